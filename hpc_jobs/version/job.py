"""The version step as a job: ``corpus version --ranks N`` launches it, the DAGs submit it like a stage.

    mpiexec -n N python -m hpc_jobs.version --input BUILD --out DIR (--select FILE | --select-inline TOML)

It reads only the build's metadata table (corpus/version/). On one rank it is ``corpus version``'s own
single query; on N, each rank owns whole shards and judges them alone; the per-language quantiles and the near-duplicate groups go through exchanges
(:mod:`hpc_jobs.version.partitioned`); rank 0 writes the manifest, each rank its shards' bitmaps. The
bytes are those of one process (``corpus version`` without ``--ranks``) on any rank count. Rank 0
prints the kept table, one JSON line per rank (shards, rows, seconds, peak RSS), then ``snapshot_id
sha256:…``; a bad selection is one line, exit 2. docs/versions.md ("The version step on N ranks").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from corpus.select.selection import load_selection, parse_inline
from corpus.version.plan import kept_text, make_version
from hpc_jobs.version.partitioned import make_on_ranks
from runtime.job_failure import EXPECTED, agreed
from runtime.mpi_world import world_comm
from runtime.runner import fail_job, peak_rss_mb

JOB = "version"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=f"python -m hpc_jobs.{JOB}", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--input",
        "--in",  # the old spelling, still accepted
        dest="build",
        nargs=1,
        required=True,
        type=Path,
        metavar="BUILD",
        help="the build, snapshot or version to select from",
    )
    ap.add_argument("--out", required=True, type=Path, metavar="DIR", help="the version directory to write")
    src = ap.add_mutually_exclusive_group(required=True)
    # --select as corpus version says it; --config, the old spelling, still accepted
    src.add_argument(
        "--select", "--config", dest="config", type=Path, metavar="SELECTION.toml", help="the selection file"
    )
    src.add_argument("--select-inline", metavar="TOML", help="the selection as TOML text")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    comm = world_comm()
    try:
        t = time.perf_counter()
        selection = agreed(
            comm, lambda: load_selection(args.config) if args.config else parse_inline(args.select_inline)
        )
        if comm.Get_size() == 1:  # one rank: the single query, faster and leaner (docs/versions.md)
            made = make_version(args.build[0], selection, args.out)
            shards, rows = len(made.manifest["shards"]), sum(s["docs"] for s in made.manifest["shards"])
        else:
            made, share = make_on_ranks(comm, args.build[0], selection, args.out)
            shards, rows = len(share.shards), share.rows
        line = {
            "rank": comm.Get_rank(),
            "shards": shards,
            "rows": rows,
            "seconds": round(time.perf_counter() - t, 3),
            "peak_rss_mb": peak_rss_mb(),
        }
        lines = comm.gather(line, root=0)
        if made is not None:
            print(kept_text(made.kept))
            print(json.dumps({"job": JOB, "ranks": lines}))
            print(f"snapshot_id {made.manifest['snapshot_id']}", flush=True)
    except (*EXPECTED, ValueError) as e:
        return fail_job(comm, JOB, e)
    except BaseException:
        return fail_job(comm, JOB)
    return 0


def version_command(build: Path, out: Path, select: Path | None, select_inline: str | None) -> list[str]:
    """The job's command line (without ``mpiexec``), as ``corpus version --ranks N`` launches it."""
    source = ["--select", str(select)] if select is not None else ["--select-inline", select_inline or ""]
    return [sys.executable, "-m", f"hpc_jobs.{JOB}", "--input", str(build), "--out", str(out), *source]
