"""A crawl that comes as one file: does every rank work, and does a waiting rank sleep? (issue 29)

    python bench/bench_one_file.py [--unit-mb 4] [--ranks 1,2] [--out DIR]

Why: a file read whole by one rank leaves the others waiting, and a waiting MPI rank that polls burns
a core in the kernel. The shared crawls' five gzipped WARC files are concatenated into one (gzip
members concatenate), and ``corpus build`` runs on it on each rank count twice: with the file cut into
units of ``--unit-mb`` at record boundaries (``[ingest] unit_bytes``) and as one unit. Printed per run:
wall seconds, user and system CPU seconds of every process of the build, the system share, and the
snapshot id, which must be equal across rank counts within a layout (units give the ingest shards
other names, so the two layouts' ids differ). Measure on an otherwise idle machine: the wall clock is
the point.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRAWLS = ROOT.parent / "shared" / "data" / "warc"


def one_file(out: Path) -> Path:
    d = out / "in"
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "crawl.warc.gz", "wb") as f:
        for part in sorted(CRAWLS.glob("*.warc.gz")):
            f.write(part.read_bytes())
    return d


def build(in_dir: Path, out: Path, ranks: int, unit_bytes: int) -> tuple[float, float, float, str]:
    """Wall, user and system seconds of one ``corpus build`` and its snapshot id."""
    cfg = out.with_suffix(".toml")
    cfg.write_text(f"[ingest]\nunit_bytes = {unit_bytes}\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "cli", "build", "--input", str(in_dir), "--out", str(out)]
    proc = subprocess.run(
        [*cmd, "--ranks", str(ranks), "--config", str(cfg)], cwd=ROOT, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"build failed:\n{proc.stderr[-3000:]}")
    snapshot = proc.stdout.strip().splitlines()[-1].split()[-1]
    return wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, snapshot


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--unit-mb", type=float, default=4)
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench_one_file"))
    args = ap.parse_args(argv)
    shutil.rmtree(args.out, ignore_errors=True)
    in_dir = one_file(args.out)
    size = (in_dir / "crawl.warc.gz").stat().st_size
    print(f"one file of {size / 1e6:.1f} MB; units of {args.unit_mb} MB\n")
    print("| layout | ranks | wall s | user s | system s | system share | snapshot id |")
    print("|---|---:|---:|---:|---:|---:|---|")
    walls = {}
    for layout, unit in (("units", int(args.unit_mb * 2**20)), ("one unit", 0)):
        for ranks in map(int, args.ranks.split(",")):
            wall, user, system, snap = build(in_dir, args.out / f"{layout[0]}{ranks}", ranks, unit)
            walls[layout, ranks] = wall
            print(
                f"| {layout} | {ranks} | {wall:.1f} | {user:.1f} | {system:.1f} | "
                f"{system / (user + system):.1%} | {snap[:23]}… |",
                flush=True,
            )
    ranks = sorted(map(int, args.ranks.split(",")))
    if len(ranks) > 1:
        for layout in ("units", "one unit"):
            ratio = walls[layout, ranks[-1]] / walls[layout, ranks[0]]
            print(f"\n{layout}: wall on {ranks[-1]} ranks / on {ranks[0]}: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
