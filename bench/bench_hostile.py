"""Benchmark: each hostile input of issue 30 through the real ingest stage, its time and peak RSS.

    python bench/bench_hostile.py [--ranks 1] [--keep DIR]

Every file tests/stages/hostile_files.py crafts (a gzip of zeros named .warc.gz, a tar whose pax header
claims 300 MB, a 100 MB JSONL line, an archive bomb, ...) is ingested on its own, under ``mpiexec`` as
a build runs it, with the hostile-input config; its peer is the same stage on one small benign WARC
file, run in the same session: the fixed cost of a rank (interpreter, libraries). Each row gives the
wall time, the peak RSS of the largest rank and what it adds to the peer's, against the build's memory
budget per rank (``memory_budget_mb``, default 256), and what the input was quarantined as.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.model.config import DEFAULT_MEMORY_BUDGET_MB  # noqa: E402
from tests.conftest import mpiexec  # noqa: E402
from tests.stages.hostile_files import CONFIG, PAGE, _warc, make_all, run_measured  # noqa: E402


def ingest(path: Path, out: Path, config: Path, ranks: int) -> tuple[float, float, dict]:
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "hpc_jobs.ingest", "--in", str(path)]
    cmd += ["--out", str(out), "--config", str(config)]
    t = time.perf_counter()
    proc, peak = run_measured(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"ingest of {path.name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    totals = json.loads((out / "manifest.json").read_text())["totals"]
    return wall, peak, totals


def outcome(totals: dict) -> str:
    q = Counter(totals["quarantined"])
    parts = [f"{r} {n}" for r, n in sorted(q.items())]
    return ", ".join(parts + ([f"kept {totals['out']}"] if totals["out"] else [])) or "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument(
        "--keep", type=Path, default=None, help="work here and keep it (default: a temporary dir)"
    )
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    try:
        inputs = work / "in"
        hostile = make_all(inputs)
        config = work / "c.toml"
        config.write_text(CONFIG)
        peer = work / "peer" / "benign.warc.gz"
        peer.parent.mkdir(parents=True, exist_ok=True)
        peer.write_bytes(
            _warc([(f"https://benign.example/{i}", "2026-03-01T00:00:00Z", PAGE) for i in range(20)])
        )
        base_wall, base_peak, base_totals = ingest(peer, work / "out" / "peer", config, args.ranks)
        budget = DEFAULT_MEMORY_BUDGET_MB
        print(
            f"ingest on {args.ranks} rank(s); memory budget {budget} MB a rank; peak RSS of the largest rank\n"
        )
        print(f"| input | stored | wall s | peak MB | over peer MB | within {budget} MB | outcome |")
        print("|---|---:|---:|---:|---:|---|---|")
        print(
            f"| peer: benign.warc.gz | {peer.stat().st_size:,} B | {base_wall:.1f} | {base_peak:.0f} | 0 | "
            f"{'yes' if base_peak <= budget else 'no'} | {outcome(base_totals)} |"
        )
        for h in hostile:
            p = inputs / h.name
            size = sum(f.lstat().st_size for f in p.rglob("*")) if p.is_dir() else p.stat().st_size
            wall, peak, totals = ingest(p, work / "out" / h.name.replace(".", "_"), config, args.ranks)
            print(
                f"| {h.name} | {size:,} B | {wall:.1f} | {peak:.0f} | {peak - base_peak:+.0f} | "
                f"{'yes' if peak <= budget else 'no'} | {outcome(totals)} |"
            )
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
