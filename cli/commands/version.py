"""``corpus version BUILD --select SELECTION.toml --out DIR``: a new version from the metadata table alone."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from corpus.errors import UserError
from corpus.selection import load_selection, parse_inline
from corpus.version import evaluate, kept_by, open_version, version_manifest, write_version

GROUPS = ("bucket", "source", "lang")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "version",
        help="select documents of a build into a new version (reads only the metadata table)",
        description="Writes per-shard selection bitmaps and a manifest into DIR; the last line of "
        "standard output is 'snapshot_id sha256:...'. Nothing of the build is changed or deleted.",
    )
    p.add_argument("build", type=Path, metavar="BUILD", help="build, snapshot or version directory")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--select", type=Path, metavar="SELECTION.toml", help="the selection file")
    src.add_argument("--select-inline", metavar="TOML", help="the selection as TOML text")
    p.add_argument("--out", type=Path, metavar="DIR", help="the version directory to write")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print documents and tokens kept per bucket, source and language",
    )
    p.add_argument("--json", action="store_true", help="with --dry-run: print the counts as JSON")
    p.set_defaults(func=run)


def summary(version, bits) -> dict[str, dict[str, dict[str, int]]]:
    before = {g: kept_by(version, None, g) for g in GROUPS}
    after = {g: kept_by(version, bits, g) for g in GROUPS}
    return {
        g: {
            k: {"stored_docs": before[g][k]["docs"], "stored_tokens": before[g][k]["tokens"], **after[g][k]}
            for k in after[g]
        }
        for g in GROUPS
    }


def summary_text(table: dict[str, dict[str, dict[str, int]]]) -> str:
    lines = []
    for g, rows in table.items():
        lines.append(f"{g:<24} {'docs kept':>12} {'of':>10} {'tokens kept':>14} {'of':>14}")
        for k, c in rows.items():
            lines.append(
                f"  {k:<22} {c['docs']:>12,} {c['stored_docs']:>10,} {c['tokens']:>14,} {c['stored_tokens']:>14,}"
            )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    selection = load_selection(args.select) if args.select else parse_inline(args.select_inline)
    version = open_version(args.build)
    bits = evaluate(version, selection)
    table = summary(version, bits)
    empty = sorted(b for b, c in table["bucket"].items() if c["docs"] == 0 and c["stored_docs"] > 0)
    if args.dry_run:
        print(json.dumps(table, indent=1) if args.json else summary_text(table))
        for b in empty:
            print(f"warning: the selection keeps no document of bucket {b}")
        return 0
    if args.out is None:
        raise UserError("--out DIR is required (or --dry-run)")
    if empty:
        raise UserError(
            f"the selection keeps no document of bucket(s) {', '.join(empty)}, which the build has; "
            f"nothing written (check it with --dry-run)"
        )
    manifest = version_manifest(version, selection, bits, list(version.tombstones.values()))
    write_version(version, manifest, bits, args.out, version.base_dir)
    print(summary_text(table))
    print(f"snapshot_id {manifest['snapshot_id']}")
    return 0
