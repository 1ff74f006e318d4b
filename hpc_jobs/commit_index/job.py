"""The persistent dedup index's writers, one per rank: a build's index generation, or a compaction.

    mpiexec -n N python -m hpc_jobs.commit_index --build DIR --kind recrawl exact --label CANDIDATES_ID
    mpiexec -n N python -m hpc_jobs.commit_index --build DIR --kind recrawl exact band --compact

The owning process (``runtime.build.commit_indexes``, ``corpus compact``) begins each kind's pending
generation, launches this job and commits once every rank has exited 0. Each rank writes the
partitions it owns (``corpus.formats.dedup_keys.owned_partitions``), so a generation's bytes are the
same on any number of ranks; a failed rank commits nothing, and the rerun writes the same bytes.
Rank 0 prints one JSON line per rank (partitions, records read, seconds, peak RSS).
docs/incremental.md.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from corpus.formats.dedup_files import CURRENT
from corpus.formats.dedup_index import PersistentIndex
from corpus.formats.dedup_keys import KINDS, owned_partitions
from corpus.model.errors import UserError
from corpus.model.layout import dedup_index_dir
from runtime.build import COMMIT_JOB, write_commit_partitions, write_compaction_partitions
from runtime.mpi_world import world_comm
from runtime.runner import fail_job, peak_rss_mb


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=f"python -m hpc_jobs.{COMMIT_JOB}", description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True, type=Path, help="the build directory (corpus build --out)")
    ap.add_argument("--kind", nargs="+", required=True, choices=sorted(KINDS), help="index kinds")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--label", help="write the build's generation with this label (its candidates' id)")
    what.add_argument("--compact", action="store_true", help="write the compaction of every generation")
    return ap.parse_args(argv)


def write_owned(build: Path, kinds: list[str], label: str | None, rank: int, size: int) -> dict[str, object]:
    """This rank's partitions of each kind's pending generation; what it did, for the job's line."""
    t = time.perf_counter()
    records, owned = 0, []
    for kind in kinds:
        root = dedup_index_dir(build, kind)
        if not (root / CURRENT).exists():
            raise UserError(f"{build} has no {kind} index ({root})")
        mine = owned_partitions(rank, size, PersistentIndex.open(root).partitions)
        owned.append([kind, mine.start, mine.stop])
        if label is None:
            write_compaction_partitions(build, kind, mine)
        else:
            records += write_commit_partitions(build, kind, label, mine)
    return {
        "rank": rank,
        "partitions": owned,
        "records": records if label is not None else None,
        "seconds": round(time.perf_counter() - t, 3),
        "peak_rss_mb": peak_rss_mb(),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    comm = world_comm()  # and never left spinning in the gather when the launcher is killed
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        done = write_owned(args.build, args.kind, None if args.compact else args.label, rank, size)
        by_rank = comm.gather(done, root=0)  # every rank's partitions written (and fsynced) before exit
        if rank == 0:
            print(
                json.dumps({"job": COMMIT_JOB, "kinds": args.kind, "compact": args.compact, "ranks": by_rank})
            )
    except (UserError, FileNotFoundError, ValueError) as e:
        return fail_job(comm, COMMIT_JOB, e)
    except BaseException:
        return fail_job(comm, COMMIT_JOB)
    return 0
