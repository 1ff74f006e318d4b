"""``corpus takedown VERSION --doc-ids FILE | --urls FILE --reason TEXT --out DIR``: remove documents.

A takedown (a DMCA notice, a person's request) must not wait for a rebuild nor delete a 16 M-token
shard: the new version deselects the documents at once, and their tokens are overwritten with zeros
in the shards that hold them, only there (corpus.version.takedown). A loader moves to the new version
at a checkpoint as to any narrower one. Rerunning the same command after a crash finishes the job.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from corpus.model.errors import UserError
from corpus.select.selection import recorded_selection
from corpus.version.buckets import VersionBuckets, recorded_buckets
from corpus.version.open import open_version
from corpus.version.plan import version_id_in
from corpus.version.takedown import append_log, locate, plan_takedown, write_new_file, zero_in_place
from corpus.version.write import refuse_version_out, version_manifest, write_version


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "takedown", help="a new version without some documents, their tokens zeroed in the shards"
    )
    p.add_argument("version", type=Path, metavar="VERSION", help="the version directory to start from")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--doc-ids", type=Path, metavar="FILE", help="document ids, one per line")
    which.add_argument("--urls", type=Path, metavar="FILE", help="URLs, one per line, exactly as stored")
    p.add_argument("--reason", required=True, metavar="TEXT", help="why (recorded, shown to every reader)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="the new version directory")
    p.set_defaults(func=run)


def _lines(path: Path) -> list[str]:
    try:
        lines = [ln.strip() for ln in path.read_text().splitlines()]
    except OSError as e:
        raise UserError(f"{path}: {e.strerror}") from None
    values = [ln for ln in lines if ln and not ln.startswith("#")]
    if not values:
        raise UserError(f"{path} names no document")
    return values


def run(args: argparse.Namespace) -> int:
    same = version_id_in(args.out)
    refuse_version_out(args.out, holding_a_version=same is not None)
    version = open_version(args.version)
    if version.manifest is None:
        raise UserError(
            f"{args.version} is a build, not a version: make one first "
            f"(corpus version {args.version} --select-inline '' --out DIR) and take down from that"
        )
    reason = " ".join(args.reason.split())
    if not reason:
        raise UserError("--reason must say why the documents are taken down")
    located = locate(
        version, _lines(args.doc_ids) if args.doc_ids else [], _lines(args.urls) if args.urls else []
    )
    planned = plan_takedown(version, located, reason)  # reads each shard once, writes nothing
    records = [record for record, _, _ in planned]
    bits = {s.name: version.selected(s).copy() for s in version.live_shards}
    for name, docs in located.items():
        bits[name][[i for i, _ in docs]] = False
    buckets = _without(recorded_buckets(version), located) if version.bucket_names else None
    manifest = version_manifest(
        version,
        recorded_selection(version.manifest["selection"]),
        bits,
        list(version.tombstones.values()),
        version.manifest.get("policy_reasons"),
        buckets,
        [*version.takedowns, *records],
    )
    if same is not None and same != manifest["snapshot_id"]:
        raise UserError(f"--out {args.out} is not empty (it holds version {same}): use a new directory")
    for _, _, new_files in planned:
        for rel_path, data in new_files.items():
            write_new_file(version.base_dir / rel_path, data)
    if same is None:
        run_info = {k: v for k, v in version.manifest.get("run_info", {}).items() if k != "base"}
        write_version(version, manifest, bits, args.out, version.base_dir, run_info, buckets)
    zeroed = sum(zero_in_place(rewrite) for _, rewrite, _ in planned)
    append_log(version.base_dir, records)  # what a build made against this one reads
    docs = sum(len(d) for d in located.values())
    print(
        f"takedown: {docs} document(s) from {len(located)} shard(s) ({', '.join(sorted(located))}); "
        f"{sum(r['bytes_zeroed'] for r in records):,} bytes zeroed in {zeroed} shard file(s): {reason}"
    )
    print(f"snapshot_id {manifest['snapshot_id']}")
    return 0


def _without(buckets: VersionBuckets, located: dict[str, list[tuple[int, str]]]) -> VersionBuckets:
    """The version's buckets as made, the documents taken down in none."""
    of_doc = dict(buckets.of_doc)
    for name, docs in located.items():
        of_doc[name] = np.array(of_doc[name], copy=True)
        of_doc[name][[i for i, _ in docs]] = -1
    return VersionBuckets(buckets.defs, buckets.resolved, of_doc)
