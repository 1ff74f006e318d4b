"""Where the blocks of a shard's ``.bin`` lie, whose sha256 its ``.blocks`` file holds (one per block).

Two layouts. *Fixed* (``""``): blocks of ``block_size`` bytes over the whole file, the last possibly
short. *Documents* (``"documents"``, write_shards 11): each document's bytes cut into blocks of at most
``block_size``, so no block holds bytes of two documents. A reader verifies the blocks holding what it
reads; with fixed 4 MiB blocks a version selecting 10 % of the documents hashes about every block (10×
what it reads), with document blocks it hashes the selected documents only, and a long document is still
checked a bounded block at a time. The block starts of the documents layout are a function of the
``.idx`` (documents' byte offsets and lengths) and ``block_size``: nothing more is stored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus.formats.megatron import read_index
from corpus.model.manifest import SnapshotShard

FIXED = ""
DOCUMENTS = "documents"
LAYOUTS = (FIXED, DOCUMENTS)


class DocumentBlockHasher:
    """sha256 of each document's blocks (the documents layout), computed while the documents are written
    one by one (memory: the digests)."""

    def __init__(self, block_size: int) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self.blocks: list[str] = []

    def add_document(self, data: bytes) -> None:
        view = memoryview(data)
        for at in range(0, view.nbytes, self.block_size):
            self.blocks.append(hashlib.sha256(view[at : at + self.block_size]).hexdigest())

    def block_digests(self) -> list[str]:
        return self.blocks


@dataclass(frozen=True)
class BlockLayout:
    """The blocks of one ``.bin`` of ``total`` bytes: fixed ``size``-byte blocks (``starts`` None), or the
    documents layout's blocks, which start at ``starts`` (sorted byte offsets) and tile the file."""

    size: int
    total: int
    starts: np.ndarray | None = None

    @classmethod
    def of(
        cls, layout: str, size: int, total: int, offsets: np.ndarray, lengths: np.ndarray, itemsize: int
    ) -> BlockLayout:
        """The layout of a ``.bin`` of ``total`` bytes whose documents start at byte ``offsets`` and hold
        ``lengths`` tokens of ``itemsize`` bytes (its ``.idx``, which must be consistent with the file)."""
        if layout not in LAYOUTS:
            raise ValueError(f"unknown block layout {layout!r} (known: {', '.join(map(repr, LAYOUTS))})")
        if layout == FIXED:
            return cls(size, total)
        nbytes = np.asarray(lengths, dtype=np.int64) * itemsize
        counts = -(-nbytes // size)  # a document's blocks (none for an empty one)
        doc = np.repeat(np.arange(len(counts)), counts)
        first = np.cumsum(counts) - counts
        within = np.arange(int(counts.sum()), dtype=np.int64) - first[doc]
        return cls(size, total, np.asarray(offsets, dtype=np.int64)[doc] + within * size)

    @property
    def count(self) -> int:
        return -(-self.total // self.size) if self.starts is None else int(self.starts.shape[0])

    def covering(self, lo: int, hi: int) -> range:
        """The blocks holding bytes ``[lo, hi)`` (none when the range is empty)."""
        if hi <= lo:
            return range(0)
        if self.starts is None:
            return range(lo // self.size, (hi - 1) // self.size + 1)
        first = int(self.starts.searchsorted(lo, side="right")) - 1
        return range(max(first, 0), int(self.starts.searchsorted(hi - 1, side="right")))

    def span(self, b: int) -> tuple[int, int]:
        """Block ``b``'s bytes ``[start, end)``."""
        if self.starts is None:
            return b * self.size, min((b + 1) * self.size, self.total)
        end = int(self.starts[b + 1]) if b + 1 < self.starts.shape[0] else self.total
        return int(self.starts[b]), end


def shard_block_layout(root: Path, shard: SnapshotShard) -> BlockLayout | None:
    """Where a snapshot shard's blocks lie, from its ``.idx`` and ``.bin`` under ``root`` (None: the shard
    has no block digests)."""
    if shard.block_size <= 0:
        return None
    index = read_index(root / shard.files["idx"], mmap=True)
    size = (root / shard.path).stat().st_size
    return BlockLayout.of(
        shard.block_layout, shard.block_size, size, index.offsets, index.lengths, index.dtype.itemsize
    )


class LayoutHasher:
    """sha256 of each block of ``layout``, from the file's bytes fed in chunks of any size (what a rewrite
    that reads the file once needs, whatever its layout)."""

    def __init__(self, layout: BlockLayout) -> None:
        self.layout = layout
        self.block, self.at = 0, 0
        self.hash = hashlib.sha256()
        self.blocks: list[str] = []

    def update(self, data: bytes) -> None:
        view = memoryview(data)
        while view.nbytes:
            end = self.layout.span(self.block)[1]
            take = min(view.nbytes, end - self.at)
            self.hash.update(view[:take])
            self.at += take
            view = view[take:]
            if self.at == end:
                self.blocks.append(self.hash.hexdigest())
                self.block, self.hash = self.block + 1, hashlib.sha256()

    def block_digests(self) -> list[str]:
        return self.blocks
