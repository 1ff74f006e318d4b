"""Reading manifests: the one place that turns a stage or snapshot directory into its typed manifest."""

from __future__ import annotations

import json
from pathlib import Path

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
