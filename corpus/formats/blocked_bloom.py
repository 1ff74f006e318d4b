"""A blocked Bloom filter over 64-bit hashes, written from sorted hashes in one pass in bounded memory.

Why a second filter format: the eval table (:mod:`corpus.decont.eval_table`) holds up to ~10⁹ distinct
8-gram hashes, and an ordinary Bloom filter (:mod:`corpus.formats.bloom`) sets each key's bits anywhere in
its array, so filling one needs the whole array in memory (578 MB at 10⁷ eval items) or rewrites a mapped
file's pages many times. Here all of a key's bits lie in one 512-bit block, the block chosen by the hash's
top 32 bits (monotone in the hash), so sorted hashes fill the blocks in order: the filter is written a
block range at a time and a writer holds one batch. A query reads one 64-byte block per key (one page)
instead of ``k`` scattered ones. The price: about a tenth more bits for the same false-positive rate
(Putze, Sanders and Singler, "Cache-, hash- and space-efficient Bloom filters", 2007). Positions inside
a block by double hashing of the splitmix64-mixed hash, in wrapping integer arithmetic (no float).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from corpus.formats.bloom import SEED, mix64

MAGIC = b"CPBBLOM1"
HEADER = np.dtype([("magic", "S8"), ("blocks", ">u8"), ("hashes", ">u8"), ("keys", ">u8")])
#: names the layout and hashing in manifests (changing the block size, mixing or positions changes it)
SCHEME = "blocked512-top32-splitmix64-double-hashing/1"
BLOCK_BITS = 512
BLOCK_BYTES = BLOCK_BITS // 8
#: bits the blocks need over an unblocked filter for its false-positive rate (0.9 % measured at 1 %)
BLOCKING_OVERHEAD = 1.1
_U32, _U9, _MASK9 = np.uint64(32), np.uint64(9), np.uint64(BLOCK_BITS - 1)


@dataclass(frozen=True)
class BlockedSpec:
    """How filters are sized: millibits per key and hash positions per key (integers only)."""

    millibits_per_key: int
    hashes: int

    @classmethod
    def from_fp_rate(cls, p: float) -> BlockedSpec:
        if not 0.0 < p < 1.0:
            raise ValueError(f"a Bloom false-positive rate must be in (0, 1), got {p}")
        bits_per_key = BLOCKING_OVERHEAD * -math.log(p) / (math.log(2) ** 2)
        return cls(math.ceil(1000 * bits_per_key), max(1, round(-math.log2(p))))

    def blocks_for(self, keys: int) -> int:
        return max(1, -(-keys * self.millibits_per_key // (1000 * BLOCK_BITS)))

    def to_dict(self) -> dict[str, int | str]:
        return {"millibits_per_key": self.millibits_per_key, "hashes": self.hashes, "scheme": SCHEME}


def block_of(h: np.ndarray, blocks: int) -> np.ndarray:
    """The block of each hash: its top 32 bits scaled to ``blocks`` (< 2³²), so never decreasing in h."""
    return ((np.asarray(h, dtype=np.uint64) >> _U32) * np.uint64(blocks)) >> _U32


def bits_in_block(h: np.ndarray, hashes: int) -> np.ndarray:
    """(hashes, len(h)) bit numbers inside each hash's block, all from its mixed hash."""
    g = mix64(np.asarray(h, dtype=np.uint64) ^ SEED)
    step = ((g >> _U9) & _MASK9) | np.uint64(1)
    i = np.arange(hashes, dtype=np.uint64)[:, None]
    return (g[None, :] + i * step[None, :]) & _MASK9


def _header(blocks: int, hashes: int, keys: int) -> bytes:
    return np.array([(MAGIC, blocks, hashes, keys)], dtype=HEADER).tobytes()


class BlockedBloomWriter:
    """Writes the filter of ``keys`` distinct hashes given in ascending order, batch by batch: a block is
    written once no later hash can fall in it, so the writer holds one batch's blocks."""

    def __init__(self, out: BinaryIO, keys: int, spec: BlockedSpec) -> None:
        self.out, self.keys, self.hashes = out, keys, spec.hashes
        self.blocks = spec.blocks_for(keys)
        if self.blocks >= 1 << 32:
            raise ValueError(f"{keys} keys need {self.blocks} blocks, more than 2^32")
        self.first = 0  # the first block not yet written
        self.pending = np.zeros(0, dtype=np.uint8)  # blocks first, first + 1, ... as bytes
        self.added = 0
        self.last: np.uint64 | None = None
        out.write(_header(self.blocks, self.hashes, keys))

    def add_sorted(self, h: np.ndarray) -> None:
        """Adds the hashes ``h``: ascending, distinct, each above every hash added before."""
        h = np.asarray(h, dtype=np.uint64)
        if h.shape[0] == 0:
            return
        if (self.last is not None and h[0] <= self.last) or bool((h[1:] <= h[:-1]).any()):
            raise ValueError("a blocked Bloom filter takes distinct hashes in ascending order")
        blocks = block_of(h, self.blocks)
        lo, hi = int(blocks[0]), int(blocks[-1])
        self._write_through(lo)
        need = (hi - self.first + 1) * BLOCK_BYTES
        if self.pending.shape[0] < need:
            self.pending = np.concatenate([self.pending, np.zeros(need - self.pending.shape[0], np.uint8)])
        bit = (blocks - np.uint64(self.first)) * np.uint64(BLOCK_BITS) + bits_in_block(h, self.hashes)
        bits = np.zeros(need * 8, dtype=bool)  # set by scattered stores, then packed: no sort, no ufunc.at
        bits[bit.reshape(-1).astype(np.intp)] = True
        self.pending |= np.packbits(bits, bitorder="little")
        self.added += h.shape[0]
        self.last = h[-1]

    def _write_through(self, block: int) -> None:
        """Writes every block before ``block``: the pending ones, then zeros."""
        done = min(block - self.first, self.pending.shape[0] // BLOCK_BYTES)
        self.out.write(self.pending[: done * BLOCK_BYTES].tobytes())
        self.pending = self.pending[done * BLOCK_BYTES :].copy()
        self.first += done
        zeros = block - self.first
        while zeros > 0:
            n = min(zeros, 1 << 14)
            self.out.write(bytes(n * BLOCK_BYTES))
            zeros -= n
            self.first += n

    def finish(self) -> None:
        """Writes the remaining blocks; refuses a filter given other than the ``keys`` it was sized for."""
        if self.added != self.keys:
            raise ValueError(f"the filter was sized for {self.keys} hashes and given {self.added}")
        self._write_through(self.blocks)


class BlockedBloom:
    """A written filter, mapped read-only: its blocks are the page cache's, read as queries touch them."""

    def __init__(self, blocks: int, hashes: int, keys: int, array: np.ndarray) -> None:
        self.blocks, self.hashes, self.keys, self.array = blocks, hashes, keys, array

    @classmethod
    def map(cls, path: Path) -> BlockedBloom:
        size = Path(path).stat().st_size
        if size < HEADER.itemsize:
            raise ValueError(f"{path}: a blocked Bloom filter file is shorter than its header")
        head = np.fromfile(path, dtype=HEADER, count=1)[0]
        if head["magic"] != MAGIC:
            raise ValueError(f"{path}: not a blocked Bloom filter file (magic)")
        blocks, hashes, keys = int(head["blocks"]), int(head["hashes"]), int(head["keys"])
        if size != HEADER.itemsize + blocks * BLOCK_BYTES:
            raise ValueError(f"{path}: {blocks} blocks need {blocks * BLOCK_BYTES} bytes after the header")
        shape = (blocks * BLOCK_BYTES,)
        return cls(
            blocks, hashes, keys, np.memmap(path, np.uint8, mode="r", offset=HEADER.itemsize, shape=shape)
        )

    def might_contain(self, h: np.ndarray) -> np.ndarray:
        """False where a hash was certainly never added; True where it may have been."""
        h = np.asarray(h, dtype=np.uint64)
        bit = block_of(h, self.blocks)[None, :] * np.uint64(BLOCK_BITS) + bits_in_block(h, self.hashes)
        byte = self.array[(bit >> np.uint64(3)).astype(np.intp)]
        return ((byte >> (bit & np.uint64(7)).astype(np.uint8)) & np.uint8(1)).all(axis=0)
