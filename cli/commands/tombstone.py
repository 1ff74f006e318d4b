"""``corpus tombstone VERSION --shard NAME --reason TEXT --out DIR``: record a physically deleted shard.

Data is append-only: when a shard must go (a takedown, a licence withdrawn), it is deleted from disk
and a new version records the deletion, so every later version, ``corpus diff`` and the data card
show it, and a loader resuming a checkpoint that read the shard refuses (naming the shard and the
reason) unless told to go on. Run it before deleting the files: it reads the shard's size from them.
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

from corpus.model.errors import UserError
from corpus.select.selection import recorded_selection
from corpus.version.open import open_version
from corpus.version.write import refuse_version_out, version_manifest, write_version


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tombstone", help="write a new version recording a physically deleted shard")
    p.add_argument("version", type=Path, metavar="VERSION", help="the version directory to start from")
    p.add_argument("--shard", required=True, metavar="NAME", help="the shard's name, e.g. web-00003")
    p.add_argument(
        "--reason", required=True, metavar="TEXT", help="why it was deleted (shown to every reader)"
    )
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="the new version directory")
    p.add_argument(
        "--date",
        type=dt.date.fromisoformat,
        default=None,
        metavar="YYYY-MM-DD",
        help="when it was deleted (default today, UTC); recorded beside the id, not in it",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    refuse_version_out(args.out)  # never into a build, a snapshot, a version or a stage
    version = open_version(args.version)
    if version.manifest is None:
        raise UserError(
            f"{args.version} is a build, not a version: make one first "
            f"(corpus version {args.version} --select-inline '' --out DIR) and tombstone that"
        )
    shard = next((s for s in version.shards if s.name == args.shard), None)
    if shard is None:
        raise UserError(
            f"no shard {args.shard!r} in {args.version}; shards: {', '.join(s.name for s in version.shards)}"
        )
    if shard.name in version.tombstones:
        raise UserError(
            f"shard {shard.name} is already tombstoned ({version.tombstones[shard.name]['reason']})"
        )
    reason = " ".join(args.reason.split())
    if not reason:
        raise UserError("--reason must say why the shard is deleted")
    bin_path = version.base_dir / next(
        s.path for s in version.base.shards if Path(s.path).name == f"{shard.name}.bin"
    )
    size = bin_path.stat().st_size if bin_path.exists() else None
    if size is None:
        raise UserError(f"{bin_path} is already gone: tombstone a shard before deleting its files")
    tombstone = {"name": shard.name, "sha256": shard.sha256, "size": size, "reason": reason}
    bits = {s.name: version.selected(s) for s in version.live_shards}
    selection = recorded_selection(version.manifest["selection"])
    manifest = version_manifest(
        version,
        selection,
        bits,
        [*version.tombstones.values(), tombstone],
        version.manifest.get("policy_reasons"),  # as counted when the selection was made
    )
    date = (args.date or dt.datetime.now(dt.UTC).date()).isoformat()
    dates = {**version.manifest.get("run_info", {}).get("tombstone_dates", {}), shard.name: date}
    write_version(version, manifest, bits, args.out, version.base_dir, {"tombstone_dates": dates})
    print(f"tombstone {shard.name}: {reason} ({date})")
    print(f"snapshot_id {manifest['snapshot_id']}")
    return 0
