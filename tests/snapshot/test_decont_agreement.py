"""The build's decontaminate stage and ``corpus contamination`` on the same built snapshot agree item by
item: the same (item, document) pairs, by one rule.

A small real build (60 pages of Perl's documentation on 2 MPI ranks) with benchmark items pasted into
some pages in the ways a copy is found on the web — verbatim, without the benchmark's template, with the
answer choices relabelled and reordered — and two that are *not* a copy by the rule: a short quote, and
one gsm8k answer spread over two documents in overlapping pieces (each shorter than a run, together a
long run of the item's 13-grams: what a corpus-wide index without documents would have flagged).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corpus.decont.ngrams import normalize_words
from corpus.snapshot.lookup import Snapshot
from tests.conftest import run_corpus
from tests.documents import with_new_text
from tests.snapshot.conftest import EVALS, make_stage_dir, perl_docs, run_snapshot_stages, split, write_config
from tests.snapshot.test_decont import plant, record

REGISTRY = ("gsm8k", "arc_easy", "arc_challenge")


def question(benchmark: str, item_id: str) -> str:
    return record(benchmark, item_id)["doc"]["query"].removeprefix("Question: ").removesuffix("\nAnswer:")


def plants() -> tuple[dict[int, str], set[tuple[str, str]]]:
    """Document number -> text pasted into it, and the (benchmark, item) pairs that are copies."""
    arc = record("arc_challenge", "arc_challenge-0")["doc"]
    reordered = "\n".join(f"{'DCBA'[i]}) {c}" for i, c in enumerate(reversed(arc["choices"])))
    short_q = record("arc_easy", "arc_easy-22")["doc"]
    gsm_answer = normalize_words(record("gsm8k", "gsm8k-5")["text"].split("\n", 1)[1])  # 88 words
    gsm_question = normalize_words(record("gsm8k", "gsm8k-12")["doc"]["question"])  # 54 words
    texts = {
        2: record("gsm8k", "gsm8k-3")["text"],  # verbatim
        5: question("arc_easy", "arc_easy-3").upper(),  # 10 words, no template, shouted
        8: f"{question('arc_challenge', 'arc_challenge-0')}\n{reordered}\nanswer: B",  # choices reordered
        11: f"{question('arc_easy', 'arc_easy-22')}\n{short_q['choices'][short_q['gold']]}",  # q + a, 12 words
        14: " ".join(gsm_answer[0:21]),  # gsm8k-5's answer in two overlapping pieces, each under a run
        17: " ".join(gsm_answer[8:29]),
        20: " ".join(gsm_question[:21]),  # a short quote of a long question
    }
    copies = {("gsm8k", "gsm8k-3"), ("arc_easy", "arc_easy-3"), ("arc_challenge", "arc_challenge-0")}
    return texts, copies | {("arc_easy", "arc_easy-22")}


@pytest.fixture(scope="module")
def snap(tmp_path_factory) -> Snapshot:
    root = tmp_path_factory.mktemp("agreement")
    evals = root / "evals"
    evals.mkdir()
    for name in REGISTRY:
        (evals / f"{name}.jsonl").write_bytes((EVALS / f"{name}.jsonl").read_bytes())
    docs = perl_docs()
    for i, text in plants()[0].items():
        d = docs[i]
        docs[i] = with_new_text(d, plant(d.text, text))
    build = root / "build"
    make_stage_dir(build / "stages" / "minhash_dedup", split(docs, 3))
    cfg = write_config(
        build / "config.toml",
        decontaminate={"eval_dir": str(evals), "doc_gram_part_rows": 8000},
        write_shards={"shard_target_tokens": 16000},
    )
    run_snapshot_stages(build, 2, cfg)
    return Snapshot(build / "snapshot")


def in_build(snap: Snapshot) -> set[tuple[str, str, str]]:
    """(benchmark, item, doc_id) of every contaminated item the build found, from its report."""
    report = snap.contamination_report()
    return {
        (bench, item_id, d["doc_id"])
        for d in report["flagged_docs"]
        for bench, m in d["matches"].items()
        for item_id in m.get("items", [m["item"]])
    }


def after_build(snap: Snapshot) -> set[tuple[str, str, str]]:
    """The same, from ``corpus contamination --benchmark`` on each of the build's own benchmarks."""
    args = ["contamination", "--snapshot", str(snap.dir), "--json"]
    for name in REGISTRY:
        args += ["--benchmark", str(EVALS / f"{name}.jsonl")]
    out = json.loads(run_corpus(*args).stdout)
    found = set()
    for r in out["benchmarks"]:
        for item_id in r["flagged_ids"]:
            matches = r.get("matches", {}).get(item_id, [{"doc_ids": ["?"]}])
            found |= {(r["benchmark"], item_id, doc_id) for m in matches for doc_id in m["doc_ids"]}
    return found


def test_the_build_and_corpus_contamination_agree_item_by_item(snap: Snapshot):
    build, after = in_build(snap), after_build(snap)
    items_build, items_after = {(b, i) for b, i, _ in build}, {(b, i) for b, i, _ in after}
    assert items_after == items_build, (
        f"only in the build: {items_build - items_after}; only after: {items_after - items_build}"
    )
    assert after == build, "the same items, in the same documents"
    planted = {Path(d.url).name: i for i, d in enumerate(perl_docs())}
    by_doc = {d["doc_id"]: d["url"] for d in snap.contamination_report()["flagged_docs"]}
    found = {(bench, item_id): planted[Path(by_doc[doc_id]).name] for bench, item_id, doc_id in build}
    assert set(found) == plants()[1], "every copy is found, the short quote and the split answer are not"
    assert sorted(found.values()) == [2, 5, 8, 11]
