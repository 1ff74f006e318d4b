"""Benchmark: the per-document 8-gram index sampled to a budget, its bytes per token and the recall of a
later benchmark's check against it (issue 34 item 6).

    python bench/bench_doc_gram_sample.py [--work /tmp/decont-bench] [--per-benchmark 200] [--seed 16]
                                          [--samples 1,16,32,64,128]

Seed 000 R4 budgets ~2 TB for the retained n-gram index at 15 T tokens: about 0.13-0.2 bytes per token.
The index keeps 16 bytes per (8-gram, document), ~12 bytes per token; ``[decontaminate] doc_gram_sample
= N`` keeps the 8-grams whose hash is 0 modulo N (the same 8-grams of every text) and a check after the
build applies the sampled rule (``corpus.decont.doc_grams.SAMPLED_RULE``: a document holding two of a
passage's sampled 8-grams, or its one). The corpora, plants and registry are ``bench/bench_decont.py``'s
(every page of the shared crawl; the shared eval sets as the later benchmarks; each benchmark's items
pasted verbatim, and reformatted, into distinct real pages). Per N: records and bytes of the index, bytes
per token (the project's tokenizer over the pages), the check's recall of the planted (item, page) pairs
on each corpus, its false positives (a flagged pair neither planted nor a sibling; on the clean crawl,
every flag) and checked items without a sampled 8-gram. N = 1 is the exact index (the build's rule).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_decont import SHARED, crawl_pages, in_build, make_plants, page_key, score, siblings  # noqa: E402
from corpus.decont.doc_grams import (  # noqa: E402
    DocGramIndex,
    check_benchmark,
    doc_rows,
    key_hex,
    sampled_grams,
    write_parts,
)
from corpus.decont.matcher import EvalIndex  # noqa: E402
from corpus.decont.registry import EvalRegistry  # noqa: E402
from corpus.text.tokenizer import PinnedTokenizer  # noqa: E402
from hpc_jobs.tokenize.stage import DEFAULT_TOKENIZER  # noqa: E402

#: seed 000 R4's budget for the retained index, bytes per token
BUDGET = 0.2


def checked(registry, index, dg, sample, n_pages):
    """(found (benchmark, item, page) triples, unsampled items, seconds) of the check of every benchmark."""
    page_of = {key_hex(page_key(i)): i for i in range(n_pages)}
    found, unsampled = set(), 0
    t0 = time.process_time()
    for b in registry.benchmarks:
        r = check_benchmark(b, dg, index.min_run, index.min_item_words, sample=sample)
        unsampled += r.get("unsampled_items", 0)
        found |= {(b.name, item_id, page_of[m["doc"]]) for item_id, ms in r["matches"].items() for m in ms}
    return found, unsampled, time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/decont-bench"), help="cache and index directory")
    ap.add_argument("--per-benchmark", type=int, default=200)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--samples", default="1,16,32,64,128", help="one 8-gram in N kept (comma-separated)")
    ap.add_argument("--bits", type=int, default=4)
    args = ap.parse_args(argv)
    samples = [int(x) for x in args.samples.split(",")]

    pages = [text for _, text in crawl_pages(args.work / "cache")]
    registry = EvalRegistry.load(SHARED / "evals")
    index = EvalIndex.build(SHARED / "evals", args.work / "eval-table")
    plants, planted = make_plants(registry, pages, args.per_benchmark, args.seed)
    corpora = {"clean crawl": pages, **planted}
    tokenizer = PinnedTokenizer(DEFAULT_TOKENIZER)
    tokens = sum(tokenizer.count_tokens(pages))
    print(
        f"{len(pages):,} pages, {tokens:,} tokens ({tokenizer.info.name}); {len(plants)} plants; "
        f"budget {BUDGET} bytes per token"
    )
    print()
    print(
        "| one 8-gram in | records | bytes | bytes per token | corpus | planted | found | recall "
        "| false pos. | unsampled items | check CPU s |"
    )
    print("|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for name, docs in corpora.items():
        _, rows, _ = in_build(index, docs)
        also = siblings(index, plants, name) if name != "clean crawl" else set()
        for n in samples:
            kept = [doc_rows(sampled_grams(r["gram"], n), page_key(i)) for i, r in enumerate(rows)]
            d = args.work / "sampled" / f"{name.replace(' ', '-')}-{n}"
            dg = DocGramIndex(write_parts(np.concatenate(kept), d, args.bits), args.bits)
            found, unsampled, cpu = checked(registry, index, dg, n, len(docs))
            records = len(dg)
            per_token = 16 * records / tokens
            if name == "clean crawl":
                cells = ["0", "-", "-", str(len(found))]
            else:
                planted_n, hit, fp = score(found, plants, also=also)
                cells = [str(planted_n), str(hit), f"{hit / planted_n:.3f}", str(fp)]
            print(
                f"| {n} | {records:,} | {16 * records / 1e6:.1f} MB | {per_token:.3f} | {name} | "
                + " | ".join(cells)
                + f" | {unsampled} | {cpu:.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
