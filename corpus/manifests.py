"""Reading manifests: the one place that turns a stage or snapshot directory into its typed manifest."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from corpus.layout import manifest_path
from corpus.model import SnapshotManifest, StageManifest


class NotCompleted(FileNotFoundError):
    """A directory that should hold a completed stage (or snapshot) has no manifest."""


def read_stage_manifest(stage_directory: Path) -> StageManifest | None:
    """The stage's manifest, or None while the stage is not complete."""
    p = manifest_path(stage_directory)
    if not p.exists():
        return None
    return StageManifest.from_dict(json.loads(p.read_text()))


def require_stage_manifest(stage_directory: Path) -> StageManifest:
    m = read_stage_manifest(stage_directory)
    if m is None:
        raise NotCompleted(
            f"input {stage_directory} is not a completed stage (no {manifest_path(stage_directory).name}); "
            "run that stage first"
        )
    return m


def read_snapshot_manifest(snapshot_directory: Path) -> SnapshotManifest:
    return SnapshotManifest.from_dict(json.loads(manifest_path(snapshot_directory).read_text()))


def token_shard_metas(write_shards_dir: Path) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Every token shard a completed write_shards stage wrote, in its order: (its listing in the stage
    manifest — name, bucket, counts, ``files`` {suffix: {path, sha256}} — and its ``.meta.json``).
    One meta at a time, so a reader of 10⁵ shards holds one shard's doc_ids, not all of them."""
    m = require_stage_manifest(Path(write_shards_dir))
    if "token_shards" not in m.extra:
        raise NotCompleted(
            f"{write_shards_dir}: a write_shards stage of version {m.stage_version} lists no token shards "
            "in its manifest (extra.token_shards); rerun write_shards"
        )
    for listing in m.extra["token_shards"]:
        meta_path = Path(write_shards_dir) / listing["files"][".meta.json"]["path"]
        yield listing, json.loads(meta_path.read_text())
