"""What a report or a diff reads: a build directory, or a snapshot and the build beside it.

``corpus report`` and ``corpus diff`` accept a build directory, a snapshot or version directory (or its
``manifest.json``: the build is the directory holding ``stages/`` above it), or a snapshot id looked
up under ``$CORPUS_SNAPSHOTS``. A snapshot copied away from its build still reports its own facts; the
sections that need the stages say they are absent. Stages are read in pipeline order, then any other
completed stage directory by name, so a build of another pipeline still reports every stage. See
docs/report.md ("What DIR, A and B may be").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from corpus.model import SnapshotManifest, StageManifest
from corpus.model.errors import UserError
from corpus.model.layout import BUILD_CONFIG, MANIFEST, SNAPSHOT_DIR, STAGES_DIR
from corpus.model.stages import PIPELINE
from corpus.snapshot.lookup import resolve_snapshot
from corpus.version.open import Version, is_version, open_version


@dataclass
class BuildView:
    """A build's manifests, read once; the shards stay on disk until a scan streams them."""

    path: Path  # what the user named
    build_dir: Path | None
    snapshot_dir: Path | None
    snapshot: SnapshotManifest | None
    stages: list[StageManifest] = field(default_factory=list)
    build_config: dict[str, Any] = field(default_factory=dict)
    #: the version reported (a build's default version), or None for a snapshot that is not one
    version: Version | None = None

    @property
    def snapshot_id(self) -> str | None:
        """The id a run trains on: the version's, else the snapshot's."""
        if self.version is not None:
            return self.version.snapshot_id
        return self.snapshot.snapshot_id if self.snapshot else None

    def selected(self, shard_name: str) -> np.ndarray | None:
        """The version's selection bits of a shard (None: every document counts)."""
        if self.version is None:
            return None
        return self.version.selected(next(s for s in self.version.shards if s.name == shard_name))

    def stage(self, name: str) -> StageManifest | None:
        return next((m for m in self.stages if m.stage == name), None)

    def stage_dir(self, name: str) -> Path:
        assert self.build_dir is not None
        return self.build_dir / STAGES_DIR / name

    @property
    def label(self) -> str:
        return str(self.path)

    def sources(self) -> list[str]:
        """The sources that entered the build (the first stage's input cells)."""
        if not self.stages:
            return []
        return sorted({s for s, _ in self.stages[0].yield_counts().groups})

    def stage_versions(self) -> dict[str, dict[str, Any]]:
        """The snapshot's record of every stage's version, or the manifests' own when no snapshot."""
        if self.snapshot is not None:
            return self.snapshot.stage_versions
        return {
            m.stage: {"version": m.stage_version, "config_hash": m.config_hash, "manifest": m.digest}
            for m in self.stages
        }


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from e


def stage_manifests(build_dir: Path) -> list[StageManifest]:
    """Every completed stage of a build: planned stages in order, then others by name."""
    root = build_dir / STAGES_DIR
    present = {p.name for p in root.iterdir() if (p / MANIFEST).is_file()} if root.is_dir() else set()
    order = [n for n in PIPELINE if n in present] + sorted(present - set(PIPELINE))
    out = []
    for name in order:
        try:
            out.append(StageManifest.from_dict(_read_json(root / name / MANIFEST)))
        except (KeyError, TypeError) as e:
            raise UserError(f"{root / name / MANIFEST} is not a stage manifest ({e})") from e
    return out


def _looks_like_id(ref: str) -> bool:
    hexpart = ref.removeprefix("sha256:")
    return len(hexpart) >= 8 and all(c in "0123456789abcdef" for c in hexpart.lower())


def open_build(path: Path, root: Path | None = None) -> BuildView:
    """Read a build directory, a snapshot directory or a snapshot manifest, or a snapshot by its id
    under ``root`` (default ``$CORPUS_SNAPSHOTS``)."""
    path = Path(path)
    if not path.exists():
        if _looks_like_id(str(path)):
            path = resolve_snapshot(str(path), root)  # needs a root, says so if there is none
        else:
            raise UserError(f"not found: {path}")
    if path.is_file():
        snapshot_dir, build_dir = path.parent, None
        manifest_path = path
    elif (path / STAGES_DIR).is_dir() or (path / SNAPSHOT_DIR / MANIFEST).is_file():
        build_dir, snapshot_dir = path, path / SNAPSHOT_DIR
        manifest_path = snapshot_dir / MANIFEST
    elif (path / MANIFEST).is_file():
        snapshot_dir, build_dir = path, None
        manifest_path = path / MANIFEST
    else:
        raise UserError(
            f"{path} is neither a build directory ({STAGES_DIR}/, {SNAPSHOT_DIR}/) nor a snapshot"
        )
    snapshot, version = None, None
    if manifest_path.is_file() and is_version(manifest_path):
        version = open_version(manifest_path.parent)
        snapshot_dir, manifest_path = version.base_dir, version.base_dir / MANIFEST
        if build_dir is None and (snapshot_dir.parent / STAGES_DIR).is_dir():
            build_dir = snapshot_dir.parent
    if manifest_path.is_file():
        d = _read_json(manifest_path)
        if not ("shards" in d or "shard_table" in d) or "stage_versions" not in d:
            raise UserError(f"{manifest_path} is not a snapshot manifest")
        try:
            snapshot = SnapshotManifest.from_dict(d, manifest_path.parent)
        except ValueError as e:
            raise UserError(str(e)) from e
    if build_dir is None:
        above = snapshot_dir.parent
        build_dir = above if (above / STAGES_DIR).is_dir() else None
    stages = stage_manifests(build_dir) if build_dir else []
    if snapshot is None and not stages:
        raise UserError(f"{path} holds no completed stage and no snapshot")
    cfg_path = build_dir / BUILD_CONFIG if build_dir else None
    build_config = _read_json(cfg_path) if cfg_path and cfg_path.is_file() else {}
    return BuildView(
        path=path,
        build_dir=build_dir,
        snapshot_dir=snapshot_dir if snapshot else None,
        snapshot=snapshot,
        stages=stages,
        build_config=build_config,
        version=version,
    )
