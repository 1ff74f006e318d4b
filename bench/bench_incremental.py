"""Issue 13 item 4: what an incremental build costs against a full build of the same inputs.

Three real ``corpus build`` runs on the shared crawls, each in its own process under ``mpiexec``:

1. the base: ``crawl-2026-03-part*`` (a full build);
2. the delta against it: ``corpus build --base BASE --input crawl-2026-06``;
3. the full build of base + delta in one run (what the delta would cost without a base).

It prints one table: wall seconds of each, the incremental build's share of the full one, the peak
resident memory per rank of exact_dedup (``run_info.peak_rss_mb_by_rank`` of its manifest: with the base's
index probed in the delta, without one in the full builds), and what exact_dedup found in the base.

    python bench/bench_incremental.py [--ranks 2] [--work DIR] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def corpus_build(out: Path, inputs: list[Path], ranks: int, base: Path | None = None) -> float:
    """Wall seconds of one ``corpus build`` (its log beside the build directory)."""
    cmd = [
        sys.executable,
        "-m",
        "cli",
        "build",
        "--input",
        *map(str, inputs),
        "--out",
        str(out),
        "--ranks",
        str(ranks),
    ]
    cmd += ["--base", str(base)] if base is not None else []
    t0 = time.monotonic()
    with open(out.with_suffix(".log"), "w") as log:
        subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True)
    return time.monotonic() - t0


def exact_dedup_facts(build: Path) -> tuple[list[float], dict]:
    m = json.loads((build / "stages" / "exact_dedup" / "manifest.json").read_text())
    peaks = m["run_info"]["peak_rss_mb_by_rank"]
    return [peaks[r] for r in sorted(peaks, key=int)], m["extra"].get("index", {})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_incremental"))
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    args = ap.parse_args()
    warc = args.data / "warc"
    march, june = sorted(warc.glob("crawl-2026-03-part*.warc.gz")), [warc / "crawl-2026-06.warc.gz"]
    args.work.mkdir(parents=True, exist_ok=True)
    base, delta, full = args.work / "base", args.work / "delta", args.work / "full"
    t_base = corpus_build(base, march, args.ranks)
    t_delta = corpus_build(delta, june, args.ranks, base=base)
    t_full = corpus_build(full, march + june, args.ranks)
    rows = [
        ("base (March, full build)", t_base, base),
        ("delta (June, --base)", t_delta, delta),
        ("March + June (full build)", t_full, full),
    ]
    print(f"ranks {args.ranks}; incremental / full = {t_delta / t_full:.1%}\n")
    print("| build | wall s | exact_dedup peak MB per rank | base keys found | copies tagged dup_of base |")
    print("|---|---:|---|---:|---:|")
    for name, seconds, build in rows:
        peaks, index = exact_dedup_facts(build)
        print(
            f"| {name} | {seconds:.1f} | {' / '.join(f'{p:.0f}' for p in peaks)} | "
            f"{index.get('base_keys', 0)} | {index.get('base_duplicates', 0)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
