"""Export throughput per rank against ``cp`` of the same bytes, and peak memory per rank.

    python bench/bench_export.py [--build DIR] [--ranks 1 2] [--out /tmp/bench_export]

Builds the shared crawls (``../shared/data/warc``, both crawls) once with ``corpus build`` unless
``--build`` names a build, then exports its default version in every format on each rank count, and in
the same run copies the stored shards the export reads with ``cp`` (the plain baseline: bytes moved, no
selection, no checks, no decoding). MB are the stored ``.bin`` bytes of the shards the export reads;
MB/s per rank = MB / job seconds / ranks, where job seconds are the slowest rank's own time from opening
the version to its last unit (the wall time, also shown, adds starting the interpreters and ``mpiexec``,
~1.3 s here). Peak RSS per rank comes from the job's own line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from corpus.export.export import FORMATS  # noqa: E402
from corpus.export.units import export_units  # noqa: E402
from corpus.version.open import open_version  # noqa: E402

CRAWLS = ROOT.parent / "shared" / "data" / "warc"


def run(command: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0, proc.stdout


def build_crawls(out: Path, ranks: int) -> Path:
    build = out / "build"
    if not (build / "snapshot" / "manifest.json").is_file():
        inputs = sorted(str(p) for p in CRAWLS.glob("*.warc.gz"))
        run(
            [
                sys.executable,
                "-m",
                "cli",
                "build",
                "--input",
                *inputs,
                "--out",
                str(build),
                "--ranks",
                str(ranks),
            ]
        )
    return build


def read_bytes(build: Path) -> tuple[int, list[Path]]:
    """The stored .bin files an export of the build's default version reads, and their bytes."""
    v = open_version(build)
    paths = sorted({v.base_dir / f"shards/{u.shard.name}.bin" for u in export_units(v)})
    return sum(p.stat().st_size for p in paths), paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, help="an existing build (default: build the shared crawls)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench_export"))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    build = args.build or build_crawls(args.out, max(args.ranks))
    nbytes, paths = read_bytes(build)
    mb = nbytes / 1e6
    copy = args.out / "cp"
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir()
    cp_wall, _ = run(["cp", *map(str, paths), str(copy)])
    print(
        f"build {build}: {len(paths)} stored shards read, {mb:.1f} MB; cp: {cp_wall:.2f} s, {mb / cp_wall:.1f} MB/s"
    )
    print(
        "| format | ranks | wall s | job s | MB/s per rank (job) | cp MB/s | ratio to cp | peak RSS per rank MB "
        "| export_id |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    for fmt in FORMATS:
        for ranks in args.ranks:
            out = args.out / f"{fmt}-{ranks}"
            shutil.rmtree(out, ignore_errors=True)
            job = [mpiexec, "-n", str(ranks), sys.executable, "-m", "hpc_jobs.export"]
            wall, stdout = run([*job, "--input", str(build), "--format", fmt, "--out", str(out)])
            lines = stdout.strip().splitlines()
            by_rank = json.loads(lines[-2])["ranks"]
            rss = max(r["peak_rss_mb"] for r in by_rank)
            job = max(r["seconds"] for r in by_rank)  # opening the version to the rank's last unit
            per_rank = mb / job / ranks
            print(
                f"| {fmt} | {ranks} | {wall:.2f} | {job:.2f} | {per_rank:.1f} | {mb / cp_wall:.1f} | "
                f"{per_rank / (mb / cp_wall):.3f} | {rss:.0f} | {lines[-1].split()[1][:19]}… |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
