"""The loader's view of a version: the build's shards, each read as the stream of its selected documents.

A version (``corpus version``, :mod:`corpus.version`) selects documents of a build by a bitmap per
shard. The loader reads the build's own files; a shard's *stream* is then its selected documents back
to back (each followed by EOS when the loader appends one), so the sampler still works from sizes
alone: ``selected_tokens + selected_docs`` per shard, recorded in the version's manifest. Everything
else (chunks, epochs, resume at any world size) is unchanged; the checkpoint record carries the
version's id.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus.model import SnapshotManifest
from corpus.version import Version, is_version, open_version


@dataclass(frozen=True)
class StreamShard:
    """What the sampler needs of a shard (``loader.state.stream_layout``): its bucket, its content key
    and its stream's size in documents and tokens."""

    bucket: str
    sha256: str
    tokens: int
    docs: int


class LoaderVersion:
    """An opened version, for one loader process: the base snapshot, and each shard's selection."""

    def __init__(self, version: Version) -> None:
        if version.manifest is None:
            raise ValueError("a LoaderVersion is made from a version, not from a build's snapshot")
        self.version = version
        counts = {s.name: (d, t) for s, d, t in version.selected_counts()}
        self.names = [Path(s.path).name.removesuffix(".bin") for s in version.base.shards]
        self.stream_shards = tuple(
            StreamShard(s.bucket, s.sha256, counts[n][1], counts[n][0])
            for s, n in zip(version.base.shards, self.names, strict=True)
        )
        self._refs = {r.name: r for r in version.shards}

    @classmethod
    def open(cls, path: Path) -> LoaderVersion | None:
        """The version at ``path``, or None when ``path`` is a snapshot (or a build) instead."""
        return cls(open_version(Path(path))) if is_version(Path(path)) else None

    @property
    def snapshot_id(self) -> str:
        return self.version.snapshot_id

    @property
    def manifest(self) -> SnapshotManifest:
        return self.version.base

    @property
    def root(self) -> Path:
        return self.version.base_dir

    @property
    def tombstones(self) -> dict[str, dict]:
        return self.version.tombstones

    def selected(self, i: int) -> np.ndarray:
        """One bool per document of shard ``i`` (the manifest's order): read it or not."""
        return self.version.selected(self._refs[self.names[i]])
