"""Benchmark: what the known-bad check adds to extract, per GB of extracted text.

    python bench/bench_known_bad.py [--data ../shared/data] [--every 50]

Real pages (the shared crawls, extracted as the extract stage does, cached by
bench_scale.extracted_pages); a list holding the keys of every ``--every``-th page; each page's exact key
computed and looked up, as extract does for every kept document. Process CPU seconds, best of three,
against the same pages' plain ``normalize_text`` (the cheapest step extract already runs on each text).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_scale import WEB_WARCS, extracted_pages  # noqa: E402
from corpus.text.extract import normalize_text  # noqa: E402
from corpus.text.normalize import text_key  # noqa: E402


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
    bad = frozenset(text_key(t) for t in texts[:: args.every])
    matched = sum(text_key(t) in bad for t in texts)
    check = best_of(lambda: [text_key(t) in bad for t in texts])
    normalize = best_of(lambda: [normalize_text(t) for t in texts])
    print(
        f"{len(texts):,} pages, {gb * 1e3:.1f} MB of text; a list of {len(bad)} keys, {matched} pages matched"
    )
    print("\n| step | CPU-s per GB of text |\n|---|---:|")
    print(f"| known-bad check (exact key + lookup) | {check / gb:.1f} |")
    print(f"| normalize_text (baseline) | {normalize / gb:.1f} |")


if __name__ == "__main__":
    main()
