"""Benchmark: what the known-bad check adds to extract, per GB of extracted text.

    python bench/bench_known_bad.py [--data ../shared/data] [--every 50]

Real pages (the shared crawls, extracted as the extract stage does, cached by
bench_scale.extracted_pages); a list holding the exact keys of every ``--every``-th page, and one with
their near entries too; each page checked as extract checks every kept document (the exact key, and
with near entries the MinHash signature, its band keys and the candidates' similarity). Process CPU
seconds, best of three, against the same pages' plain ``normalize_text`` (the cheapest step extract
already runs on each text).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_scale import WEB_WARCS, extracted_pages  # noqa: E402
from corpus.text.extract import normalize_text  # noqa: E402
from corpus.text.known_bad import NEAR_PERM, KnownBad  # noqa: E402
from corpus.text.normalize import text_key  # noqa: E402
from hpc_jobs.extract.known_bad import NEAR_PARAMS, KnownBadCheck  # noqa: E402
from mpi_kernels.minhash import MinHasher  # noqa: E402


def best_of(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/benchcache"))
    ap.add_argument("--every", type=int, default=50)
    args = ap.parse_args()
    texts = [t for _, t in extracted_pages([args.data / p for p in WEB_WARCS], args.cache, "web-pool") if t]
    gb = sum(len(t.encode()) for t in texts) / 1e9
    listed = texts[:: args.every]
    keys = frozenset(text_key(t) for t in listed)
    checks = {
        "exact keys only (key + lookup)": KnownBadCheck(
            KnownBad(keys, np.zeros((0, NEAR_PERM), np.uint64)), 0.8
        ),
        "exact keys and near entries (+ MinHash, bands, similarity)": KnownBadCheck(
            KnownBad(keys, MinHasher(NEAR_PARAMS).signatures(listed)), 0.8
        ),
    }
    print(f"{len(texts):,} pages, {gb * 1e3:.1f} MB of text; a list of {len(listed)} of them")
    rows = []
    for name, check in checks.items():
        check.match(texts[0])  # the kernel loaded (numba's cache) before the clock starts
        kinds = [m.kind for m in map(check.match, texts) if m is not None]
        print(f"{name}: {len(kinds)} pages matched, {kinds.count('near')} of them near")
        rows.append((name, best_of(lambda check=check: [check.match(t) for t in texts])))
    rows.append(("normalize_text (baseline)", best_of(lambda: [normalize_text(t) for t in texts])))
    print("\n| step | CPU-s per GB of text |\n|---|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds / gb:.1f} |")


if __name__ == "__main__":
    main()
