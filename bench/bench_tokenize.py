"""Benchmark: the tokenize stage's encoder per core, the tiktoken fast path against HF ``tokenizers``,
and the equality run that backs the fast path (every id of every text compared).

Per core: the process is pinned to one CPU (``sched_setaffinity``), HF's thread pool is off
(``RAYON_NUM_THREADS=1``, ``TOKENIZERS_PARALLELISM=false``; tiktoken's ``encode_ordinary`` is
single-threaded), and times are the process's CPU seconds, so the numbers are per core even on a
machine other jobs share. Both encoders run on the same texts in the same process, best of
``--repeat``. *Peer:* ``PinnedTokenizer.encode_batch_hf`` (HF ``encode_batch_fast`` over batches of
256, EOS appended, numpy output: what the stage ran before the fast path).

Data (all from ``../shared/data``):

* ``web (trafilatura)``: every ``--trafilatura-every``-th page of the five crawl WARCs, extracted as
  the extract stage does (trafilatura, ``normalize_text``): the stage's real input, 13 languages;
* ``web (lxml, all pages)``: the text of every page (``lxml`` ``text_content``, ``normalize_text``;
  trafilatura on all 5,193 pages would take 15 minutes): the large equality run;
* ``perl-doc``: the 206 Perl documentation pages (the curated tier);
* ``code``: the text files of the 16 code archives, up to ``--code-kb`` per archive;
* ``every code point``: all 1,112,064 Unicode scalar values, each next to a letter, a digit, itself,
  an apostrophe and whitespace (equality only: its speed means nothing).

Any differing id fails the run (exit 1). Run: ``.venv/bin/python bench/bench_tokenize.py``
(10-15 minutes on one core of this machine; ``--lxml-every 8 --code-kb 128`` for a short one).
"""

from __future__ import annotations

import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core: set before tokenizers starts its pool
os.environ["RAYON_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tarfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.text.extract import extract_text, normalize_text  # noqa: E402
from corpus.text.tokenizer import PinnedTokenizer  # noqa: E402
from corpus.text.warc import RawRecord, decode_html, iter_warc  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
TOKENIZERS = {
    "olmo (50k, uint16)": SHARED / "tokenizers" / "gpt-neox-olmo-dolma-v1_5.tokenizer.json",
    "cl100k (100k, int32)": SHARED / "tokenizers" / "cl100k_base.tokenizer.json",
}
CODE_SUFFIXES = (".py", ".js", ".c", ".h", ".css", ".html", ".md", ".rst", ".txt", ".json", ".cfg", ".toml")


def web_pages(keep: Callable[[int], bool]) -> list[RawRecord]:
    pages = [
        rec
        for warc in sorted((SHARED / "warc").glob("*.warc.gz"))
        for rec in iter_warc(warc)
        if isinstance(rec, RawRecord)
    ]
    return [p for i, p in enumerate(pages) if keep(i)]


def web_trafilatura(every: int) -> list[str]:
    texts = (
        normalize_text(extract_text(decode_html(p.payload, p.content_type)[0]))
        for p in web_pages(lambda i: i % every == 0)
    )
    return [t for t in texts if t]


def web_lxml(every: int) -> list[str]:
    import lxml.html

    texts = []
    for p in web_pages(lambda i: i % every == 0):
        try:
            texts.append(normalize_text(lxml.html.fromstring(p.payload).text_content()))
        except (ValueError, lxml.etree.ParserError):  # an empty or unparsable page
            continue
    return [t for t in texts if t]


def perl_doc() -> list[str]:
    with gzip.open(SHARED / "curated" / "perl-doc.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def code(max_kb: int) -> list[str]:
    texts = []
    for archive in sorted((SHARED / "code").iterdir()):
        budget = max_kb << 10
        with tarfile.open(archive) as tar:
            for m in sorted(tar.getmembers(), key=lambda m: m.name):
                if budget <= 0:
                    break
                if m.isfile() and m.name.endswith(CODE_SUFFIXES) and m.size <= budget:
                    try:
                        texts.append(tar.extractfile(m).read().decode("utf-8"))
                    except UnicodeDecodeError:
                        continue
                    budget -= m.size
    return texts


def every_code_point() -> list[str]:
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    return [
        "".join(f"x{c}y {c}1{c}{c}'{c} \n" for c in chars[i : i + 512]) for i in range(0, len(chars), 512)
    ]


def in_batches(encode: Callable, texts: list[str], size: int = 256) -> list[np.ndarray]:
    return [a for i in range(0, len(texts), size) for a in encode(texts[i : i + size])]


def compare(tok: PinnedTokenizer, texts: list[str], repeat: int) -> dict:
    """Both encoders on the same texts (best of ``repeat`` CPU times), and every id compared."""
    best = {"hf": float("inf"), "fast": float("inf")}
    out = {}
    for _ in range(repeat):
        for name, encode in (("hf", tok.encode_batch_hf), ("fast", tok.encode_batch)):
            t0 = time.process_time()
            out[name] = in_batches(encode, texts)
            best[name] = min(best[name], time.process_time() - t0)
    differ = sum(not np.array_equal(a, b) for a, b in zip(out["fast"], out["hf"], strict=True))
    tokens = sum(a.shape[0] for a in out["hf"])
    return {"tokens": tokens, "differ": differ, "hf_s": best["hf"], "fast_s": best["fast"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--trafilatura-every", type=int, default=40, help="extract every N-th page with trafilatura"
    )
    ap.add_argument("--lxml-every", type=int, default=1, help="every N-th page for the lxml text (1: all)")
    ap.add_argument("--code-kb", type=int, default=512, help="text files per code archive, KB")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    t0 = time.perf_counter()
    datasets = {
        f"web (trafilatura, 1 page in {args.trafilatura_every})": web_trafilatura(args.trafilatura_every),
        "web (lxml, all pages)"
        if args.lxml_every == 1
        else f"web (lxml, 1 page in {args.lxml_every})": web_lxml(args.lxml_every),
        "perl-doc": perl_doc(),
        "code": code(args.code_kb),
        "every code point": every_code_point(),
    }
    print(f"data ready in {time.perf_counter() - t0:.0f} s\n")
    print(
        "| tokenizer | data | docs | MB | tokens compared equal | HF tok/s | fast tok/s | ratio | fast MB/s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    failed = False
    for tname, path in TOKENIZERS.items():
        t0 = time.process_time()
        tok = PinnedTokenizer(path)
        load_s = time.process_time() - t0
        if tok.fast is None:
            raise SystemExit(f"{tname}: fast path refused: {tok.fast_path_refused}")
        total = 0
        for dname, texts in datasets.items():
            r = compare(tok, texts, args.repeat)
            mb = sum(len(t.encode()) for t in texts) / 1e6
            failed |= r["differ"] > 0
            total += r["tokens"] if not r["differ"] else 0
            equal = f"{r['tokens']:,}" if not r["differ"] else f"**{r['differ']} docs differ**"
            speed = dname != "every code point"
            print(
                f"| {tname} | {dname} | {len(texts):,} | {mb:.1f} | {equal} | "
                + (
                    f"{r['tokens'] / r['hf_s']:,.0f} | {r['tokens'] / r['fast_s']:,.0f} | "
                    f"{r['hf_s'] / r['fast_s']:.2f}x | {mb / r['fast_s']:.2f} |"
                    if speed
                    else "– | – | – | – |"
                ),
                flush=True,
            )
        print(f"| {tname} | *all, ids compared equal* | | | **{total:,}** | | | | load {load_s:.1f} CPU s |")
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores when done")
    if failed:
        raise SystemExit("the fast path differs from HF tokenizers")


if __name__ == "__main__":
    main()
