"""The loader's view of a version: the build's shards, each read as the stream of its selected documents.

A shard's stream is its selected documents back to back, so the sampler still works from sizes alone
(``selected_tokens + selected_docs``, from the version's manifest). With buckets by predicate there is
one stream per (shard, bucket) pair, shard-major, seen through :attr:`LoaderVersion.stream_manifest`.
A run moves between versions of one build by translating its unread ranges (:func:`translate_range`).
See docs/versions.md ("The loader reads versions") and docs/loader.md ("Buckets by predicate").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from corpus.formats.megatron import read_index
from corpus.model import SnapshotManifest
from corpus.model.line_table import Lazily
from corpus.model.shard_table import ShardKey
from corpus.version.open import Version, as_version, manifest_at
from loader.sampler import Piece


class LoaderVersion:
    """An opened version, for one loader process: the base snapshot, and each stream's selection (a
    shard's, or a (shard, predicate bucket) pair's). Made from the build's shard keys and the version's
    (:attr:`Version.columns`): a shard's entries are parsed when its stream is opened."""

    def __init__(self, version: Version) -> None:
        if version.manifest is None:
            raise ValueError("a LoaderVersion is made from a version, not from a build's snapshot")
        self.version = version
        keys, rows = version.base.shard_keys(), version.columns
        #: the buckets by predicate, in order (none: each stream is a shard, in its physical bucket)
        self.buckets = version.bucket_names
        if self.buckets:
            pairs = [(i, b) for i in range(len(keys)) for b in self.buckets]
            docs, tokens = rows["bucket_docs"].ravel().tolist(), rows["bucket_tokens"].ravel().tolist()
        else:
            pairs = [(i, k.bucket) for i, k in enumerate(keys)]
            docs, tokens = rows["selected_docs"].tolist(), rows["selected_tokens"].tolist()
        #: the physical shard (its index in the build's manifest) of each stream
        self.shard_of = tuple(i for i, _ in pairs)
        self.stream_shards = tuple(
            ShardKey(b, keys[i].sha256, t, d) for (i, b), d, t in zip(pairs, docs, tokens, strict=True)
        )
        tombstoned = rows["tombstoned"].tolist()
        #: whether each stream's shard is tombstoned (its files may be gone)
        self.stream_tombstoned = tuple(bool(tombstoned[i]) for i in self.shard_of)
        #: the build's manifest with one entry per stream (the physical shard's files, sizes and digests;
        #: the stream's bucket): what the shard store reads by stream index. Its computed id is not the
        #: build's; ``manifest`` is the build's.
        #: A taken-down shard's entry carries its current digests (:attr:`Version.readable_base`); its
        #: order key in the sampler stays the build's (``stream_shards``), so no run's order changes.
        readable = version.readable_base
        self.stream_manifest = (
            readable
            if not self.buckets
            else replace(
                readable,
                shards=Lazily(
                    len(pairs), lambda k: replace(readable.shards[pairs[k][0]], bucket=pairs[k][1])
                ),
            )
        )

    @classmethod
    def open(cls, path: Path) -> LoaderVersion | None:
        """The version at ``path``, or None when ``path`` is a snapshot (or a build) instead."""
        return cls.of(manifest_at(Path(path)))

    @classmethod
    def of(cls, found: tuple[Path, dict[str, Any]] | None) -> LoaderVersion | None:
        """The version whose manifest :func:`corpus.version.open.manifest_at` ``found``, or None where
        it found a snapshot's (or none)."""
        version = as_version(*found) if found is not None else None
        return cls(version) if version is not None else None

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

    def name(self, i: int) -> str:
        """Stream ``i``'s shard's name."""
        return self.version.shards[self.shard_of[i]].name

    def selected(self, i: int) -> np.ndarray:
        """One bool per document of stream ``i``'s shard (the manifest's order): in the stream or not."""
        ref = self.version.shards[self.shard_of[i]]
        if self.buckets:
            return self.version.bucket_selected(ref, self.stream_shards[i].bucket)
        return self.version.selected(ref)

    def shard_selected(self, name: str) -> np.ndarray:
        """One bool per document of the shard named ``name``: selected by the version (in any bucket or none)."""
        return self.version.selected(self.version.shard_named(name))

    def bucket_of(self, name: str, doc: int) -> str | None:
        """The predicate bucket document ``doc`` of shard ``name`` is streamed in (None: in none, or the
        version has no buckets by predicate)."""
        ref = self.version.shard_named(name)
        return next((b for b in self.buckets if self.version.bucket_selected(ref, b)[doc]), None)


@dataclass(frozen=True)
class SelectedStream:
    """Where each selected document of one shard lies in the shard's stream under one selection:
    document ``docs[k]`` occupies positions ``[starts[k], starts[k] + extents[k])``."""

    docs: np.ndarray  # int64, ascending
    starts: np.ndarray  # int64
    extents: np.ndarray  # int64: tokens, plus the appended EOS

    @classmethod
    def of(cls, lengths: np.ndarray, selected: np.ndarray, append_eos: bool) -> SelectedStream:
        docs = np.flatnonzero(selected).astype(np.int64)
        extents = np.asarray(lengths, dtype=np.int64)[docs] + (1 if append_eos else 0)
        starts = np.concatenate(([0], np.cumsum(extents)[:-1])).astype(np.int64) if docs.size else extents
        return cls(docs, starts, extents)


def translate_range(start: int, end: int, old: SelectedStream, new: SelectedStream) -> list[tuple[int, int]]:
    """The positions ``[start, end)`` of a shard's stream under the old selection, as ranges of its
    stream under the new one: each document's unread part keeps its offset inside the document; a
    document the new selection drops is gone; adjacent ranges are merged. Pure."""
    out: list[tuple[int, int]] = []
    first = max(int(np.searchsorted(old.starts, start, side="right")) - 1, 0)
    last = int(np.searchsorted(old.starts, end, side="left"))
    for k in range(first, last):
        s, n = int(old.starts[k]), int(old.extents[k])
        a, b = max(start, s) - s, min(end, s + n) - s
        if b <= a:
            continue
        j = int(np.searchsorted(new.docs, old.docs[k]))
        if j == new.docs.shape[0] or new.docs[j] != old.docs[k]:
            continue  # dropped by the new version: never read again
        lo, hi = int(new.starts[j]) + a, int(new.starts[j]) + b
        if out and out[-1][1] == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def predicate_buckets(version: LoaderVersion | None) -> tuple[str, ...]:
    """A version's buckets by predicate, in order (none for the build itself, None)."""
    return version.buckets if version is not None else ()


def same_streams(old: LoaderVersion | None, new: LoaderVersion | None) -> bool:
    """Whether a run's streams mean the same under both (versions, or None: the build itself): the same
    buckets by predicate in the same order, or none on either side."""
    return predicate_buckets(old) == predicate_buckets(new)


class RunMove:
    """A run moving from one selection of a build to another at a checkpoint: what the record's
    streams were (``old``: a version, or None for the build's own snapshot) and how their unread
    remainder maps onto this loader's (``new``), stream by stream. Both must have the same streams
    (:func:`same_streams`); ``manifest`` is the new one's stream manifest. With buckets by predicate
    a document that changed bucket leaves its old stream's unread remainder and is read in its new
    bucket's stream from that stream's next epoch."""

    def __init__(
        self,
        manifest: SnapshotManifest,
        root: Path,
        old: LoaderVersion | None,
        new: LoaderVersion | None,
        append_eos: bool,
    ) -> None:
        self.manifest, self.root, self.old, self.new, self.append_eos = (
            manifest,
            Path(root),
            old,
            new,
            append_eos,
        )
        self._streams: dict[tuple[int, bool], SelectedStream] = {}

    @property
    def old_stream_shards(self) -> tuple:
        """The record's streams as the sampler keyed them (the build's own digests, takedowns or not)."""
        if self.old is not None:
            return self.old.stream_shards
        return (self.new.manifest if self.new is not None else self.manifest).shard_keys()

    def _stream(self, i: int, new: bool) -> SelectedStream:
        key = (i, new)
        if key not in self._streams:
            version = self.new if new else self.old
            shard = self.manifest.shards[i]
            lengths = read_index(self.root / shard.files.get("idx", ""), mmap=True).lengths
            bits = version.selected(i) if version is not None else np.ones(shard.docs, dtype=bool)
            self._streams[key] = SelectedStream.of(lengths, bits, self.append_eos)
        return self._streams[key]

    def translate(self, piece: Piece) -> list[Piece]:
        """One unread piece of the old streams as pieces of the new (same epoch, order and shard)."""
        if self._tombstoned(piece.shard):
            return []  # its files may be gone; a tombstoned shard selects nothing
        ranges = translate_range(
            piece.start, piece.end, self._stream(piece.shard, False), self._stream(piece.shard, True)
        )
        return [Piece(piece.epoch, piece.order, piece.shard, a, b) for a, b in ranges]

    def _tombstoned(self, i: int) -> bool:
        return self.new is not None and self.new.stream_tombstoned[i]

    def newly_tombstoned(self) -> list[int]:
        """Streams whose shard the new version tombstones and the old one did not (both of one build)."""
        return [
            i
            for i in range(len(self.manifest.shards))
            if self._tombstoned(i) and not (self.old is not None and self.old.stream_tombstoned[i])
        ]
