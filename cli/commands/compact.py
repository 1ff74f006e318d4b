"""``corpus compact BUILD [--ranks N]``: merge the generations of a build's persistent dedup indexes into one.

A build adds one generation to its indexes (docs/incremental.md), so a probe of a long line of
incremental builds opens one file per generation and partition; compaction merges them (keep-first: the
oldest generation's record of a key wins; a line's counts are summed: every answer stays the same). This process begins each
index's merged generation, the commit job (``python -m hpc_jobs.commit_index --compact``) writes it on N ranks,
each rank the partitions it owns, then this process switches each pointer atomically and removes the
replaced generations. A kill leaves every index not yet switched as it was; the rerun starts it again.
Builds forked from this one are untouched: their generations are hard links of the same immutable files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from corpus.formats.dedup_files import CURRENT
from corpus.formats.dedup_index import PersistentIndex
from corpus.model.errors import UserError
from corpus.model.layout import dedup_index_dir
from runtime.build import COMMIT_JOB, commit_job_command, launch

KINDS = ("recrawl", "exact", "band", "lines")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compact", help="merge the generations of a build's dedup indexes into one")
    p.add_argument("build", type=Path, metavar="BUILD", help="build directory (corpus build --out)")
    p.add_argument(
        "--ranks",
        type=int,
        default=1,
        metavar="N",
        help="MPI ranks writing the merged partitions (default 1)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    roots = [(kind, dedup_index_dir(args.build, kind)) for kind in KINDS]
    present = [(kind, root) for kind, root in roots if (root / CURRENT).exists()]
    if not present:
        raise UserError(f"{args.build} has no dedup index ({roots[0][1]}): was it made by `corpus build`?")
    indexes = [(kind, PersistentIndex.open(root)) for kind, root in present]
    # each index's merged generation, begun here (None: an index of fewer than two generations)
    begun = [(kind, index, index.begin_compaction()) for kind, index in indexes]
    kinds = [kind for kind, _, pending in begun if pending is not None]
    if kinds:
        launch(
            commit_job_command(args.build, kinds, None), args.ranks, f"{COMMIT_JOB} --compact of {args.build}"
        )
    for kind, index, pending in begun:
        compacted = index if pending is None else pending.commit()
        compacted.cleanup()  # the replaced generations are removed
        print(
            f"{kind}: {len(index.generations)} generation(s) -> {len(compacted.generations)}, {compacted.records} records"
        )
    return 0
