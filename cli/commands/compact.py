"""``corpus compact BUILD``: merge the generations of a build's persistent dedup indexes into one.

A build adds one generation to its indexes (docs/incremental.md), so a probe of a long line of
incremental builds opens one file per generation and partition; compaction merges them (keep-first: the
oldest generation's record of a key wins, so every answer stays the same), switches the pointer
atomically and then removes the replaced generations. Builds forked from this one are untouched: their
generations are hard links of the same immutable files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from corpus.dedup.persistent_index import CURRENT, PersistentIndex
from corpus.errors import UserError
from corpus.layout import dedup_index_dir

KINDS = ("recrawl", "exact", "band")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compact", help="merge the generations of a build's dedup indexes into one")
    p.add_argument("build", type=Path, metavar="BUILD", help="build directory (corpus build --out)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    roots = [(kind, dedup_index_dir(args.build, kind)) for kind in KINDS]
    present = [(kind, root) for kind, root in roots if (root / CURRENT).exists()]
    if not present:
        raise UserError(f"{args.build} has no dedup index ({roots[0][1]}): was it made by `corpus build`?")
    for kind, root in present:
        index = PersistentIndex.open(root)
        before = len(index.generations)
        compacted = index.compact()  # commits, then cleanup(): the replaced generations are removed
        print(f"{kind}: {before} generation(s) -> {len(compacted.generations)}, {compacted.records} records")
    return 0
