"""``corpus report DIR``: the per-stage yield funnel of a build."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from corpus.errors import UserError
from corpus.pipeline import read_stage_manifests
from corpus.report_counts import funnel_table, stage_counts


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="per-stage counts of a build")
    p.add_argument("dir", type=Path, metavar="DIR", help="build directory (what `corpus build --out` wrote)")
    p.add_argument("--json", action="store_true", help="print the counts as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.dir.is_dir():
        raise UserError(f"not a directory: {args.dir}")
    manifests = read_stage_manifests(args.dir)
    if args.json:
        print(json.dumps(stage_counts(manifests), indent=1, sort_keys=False))
    else:
        print(funnel_table(manifests))
    return 0
