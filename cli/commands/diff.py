"""``corpus diff A B``: what differs between two builds, snapshots or versions; exit 0 when identical.

Two build directories are compared as builds (stages, configs, counts, and what their default versions
select). When either side is a version directory (``corpus version``), both must be versions of one
build (a build directory stands for its default version), and the diff names the selection changes,
the tombstones, and the documents and tokens added and removed per bucket, source and language."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from corpus.model.layout import STAGES_DIR
from corpus.report.build_view import open_build
from corpus.report.diff import SAMPLE, diff_builds, summary_text
from corpus.version.diff import diff_text, diff_versions
from corpus.version.open import is_version, open_version


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diff", help="compare two builds or snapshots (exit 0 when identical, 1 when they differ)"
    )
    p.add_argument(
        "a", type=Path, metavar="A", help="build directory, snapshot directory or snapshot manifest"
    )
    p.add_argument("b", type=Path, metavar="B", help="the other build or snapshot")
    p.add_argument("--json", action="store_true", help="print the differences as JSON")
    p.add_argument(
        "--root",
        type=Path,
        metavar="DIR",
        help="where snapshots named by id live (default $CORPUS_SNAPSHOTS)",
    )
    p.add_argument(
        "--sample",
        type=int,
        default=SAMPLE,
        metavar="N",
        help=f"how many added / removed doc_ids to list (default {SAMPLE})",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if any(is_version(p) and not (p / STAGES_DIR).is_dir() for p in (args.a, args.b)):
        d = diff_versions(open_version(args.a), open_version(args.b))
        print(json.dumps(d, indent=1) if args.json else diff_text(d))
        return 0 if d["identical"] else 1
    d = diff_builds(open_build(args.a, args.root), open_build(args.b, args.root), sample=args.sample)
    print(json.dumps(d, indent=1) if args.json else summary_text(d))
    return 0 if d["identical"] else 1
