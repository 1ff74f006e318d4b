"""Writing a snapshot's manifest: a split one's shard table first, ``manifest.json`` last (its presence
means the snapshot is whole). The forms: :class:`corpus.model.SnapshotManifest`, docs/snapshot.md."""

from __future__ import annotations

import json
from pathlib import Path

from corpus.formats.docshard import atomic_write_bytes
from corpus.model import SnapshotManifest
from corpus.model.layout import manifest_path
from corpus.model.shard_table import KEYS, LINES


def write_snapshot_manifest(snapshot_directory: Path, m: SnapshotManifest) -> None:
    """``m`` in ``snapshot_directory``, each file renamed into place whole."""
    if m.split:
        keys, lines, _ = m.table
        atomic_write_bytes(snapshot_directory / LINES, lines)
        atomic_write_bytes(snapshot_directory / KEYS, keys)
    text = json.dumps(m.to_dict(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_bytes(manifest_path(snapshot_directory), text.encode())
