"""The snapshot as the loader opens it: its manifest and shard root, its natural mixture, its EOS convention.

A loader reads a snapshot directory (``manifest.json`` and the shards it names, paths relative to it) or
a :class:`~corpus.model.SnapshotManifest` with an explicit root. See docs/loader.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corpus.model import SnapshotManifest
from corpus.model.errors import UserError


def load_manifest(
    snapshot: str | Path | SnapshotManifest, root: str | Path | None = None
) -> tuple[SnapshotManifest, Path]:
    """A manifest and the directory its shard paths are relative to, from a snapshot dir or manifest.json."""
    if isinstance(snapshot, SnapshotManifest):
        if root is None:
            raise ValueError(
                "a SnapshotManifest object needs root= (the directory its shard paths are relative to)"
            )
        return snapshot, Path(root)
    path = Path(snapshot)
    if path.is_dir():
        path = path / "manifest.json"
    if not path.is_file():
        raise UserError(f"no snapshot manifest at {path}")
    return parsed_manifest(path, json.loads(path.read_text()), root)


def parsed_manifest(
    path: Path, data: dict[str, Any], root: str | Path | None = None
) -> tuple[SnapshotManifest, Path]:
    """The snapshot manifest ``data`` read from ``path``, and the directory its shard paths are
    relative to (``root``, else the manifest's)."""
    return SnapshotManifest.from_dict(data, path.parent), Path(root) if root else path.parent


def natural_mixture(manifest: SnapshotManifest) -> dict[str, float]:
    """Weights proportional to each bucket's tokens: the snapshot as it is."""
    return natural_mixture_of(manifest.shards)


def natural_mixture_of(shards: Sequence[Any]) -> dict[str, float]:
    """Weights proportional to each bucket's tokens in ``shards`` (a snapshot's, or a version's streams)."""
    out: dict[str, float] = {}
    for s in shards:
        out[s.bucket] = out.get(s.bucket, 0.0) + s.tokens
    return out


def default_append_eos(manifest: SnapshotManifest) -> bool:
    """Append EOS after every document unless the manifest says its documents already end with one."""
    return not manifest.tokenizer.get("documents_end_with_eos", False)
