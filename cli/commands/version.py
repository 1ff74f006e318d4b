"""``corpus version BUILD --select SELECTION.toml --out DIR [--ranks N]``: a new version from the metadata
table alone, in this process or on N MPI ranks (the same bytes)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from corpus.model.errors import UserError
from corpus.model.layout import manifest_path
from corpus.select.selection import load_selection, parse_inline
from corpus.version.plan import buckets_text, kept_text, make_version, plan_version
from hpc_jobs.version.job import version_command
from runtime.launch import launch


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "version",
        help="select documents of a build into a new version (reads only the metadata table)",
        description="Writes per-shard selection bitmaps and a manifest into DIR (written beside it, then "
        "renamed in whole); the last line of standard output is 'snapshot_id sha256:...'. Nothing of the "
        "build is changed or deleted: DIR must be new or empty and outside any build, snapshot or "
        "version (a build's own versions go in BUILD/versions/NAME); a DIR already holding this very "
        "version is left as it is.",
    )
    p.add_argument("build", type=Path, metavar="BUILD", help="build, snapshot or version directory")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--select", type=Path, metavar="SELECTION.toml", help="the selection file")
    src.add_argument("--select-inline", metavar="TOML", help="the selection as TOML text")
    p.add_argument("--out", type=Path, metavar="DIR", help="the version directory to write (new or empty)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print documents and tokens kept per bucket, source and language (and per bucket by "
        "predicate, with the selected documents no such bucket takes)",
    )
    p.add_argument("--json", action="store_true", help="with --dry-run: print the counts as JSON")
    p.add_argument(
        "--ranks",
        type=int,
        default=1,
        metavar="N",
        help="MPI ranks on this machine, each judging its own shards (default 1: this process); the same "
        "bytes on any N",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    selection = load_selection(args.select) if args.select else parse_inline(args.select_inline)
    if args.dry_run:
        if args.ranks != 1:
            raise UserError("--dry-run runs in this process: leave out --ranks")
        planned = plan_version(args.build, selection)
        if args.json:
            out = {"kept": planned.kept, "snapshot_id": planned.manifest["snapshot_id"]}
            if "buckets" in planned.manifest:
                out["buckets"] = planned.manifest["buckets"]
            print(json.dumps(out, indent=1))
        else:
            print(kept_text(planned.kept))
            if "buckets" in planned.manifest:
                print(buckets_text(planned.manifest))
            for b in planned.empty_buckets:
                print(f"warning: the selection keeps no document of bucket {b}")
            print(f"snapshot_id {planned.manifest['snapshot_id']} (not written: --dry-run)")
        return 0
    if args.out is None:
        raise UserError("--out DIR is required (or --dry-run)")
    if args.ranks != 1:
        # the job prints its kept table and per-rank lines (passed on to stderr); the id is the manifest's
        launch(version_command(args.build, args.out, args.select, args.select_inline), args.ranks, "version")
        manifest = json.loads(manifest_path(args.out).read_text())
    else:
        planned = make_version(args.build, selection, args.out)
        print(kept_text(planned.kept))
        manifest = planned.manifest
    if "buckets" in manifest:
        print(buckets_text(manifest))
    print(f"snapshot_id {manifest['snapshot_id']}")
    return 0
