"""The corpus-side 13-gram index retained with a snapshot: a sorted array of unique 64-bit hashes.

It answers which 13-grams the stored corpus holds, corpus-wide (:meth:`PartitionedGramIndex.contains`).
It is *not* what a benchmark is checked against after the build: a corpus-wide set cannot tell one
document from another, so it cannot apply the build's per-document rule; that is the per-document
8-gram index of :mod:`corpus.decont.doc_grams`.

A sorted array costs 8 bytes per distinct 13-gram and answers exactly (no false positives beyond
64-bit collisions); a Bloom filter would be ~8x smaller at 1% false positives. Per stage shard the
decontaminate stage writes a plain ``.npy``; the retained index is **range-partitioned by hash prefix**:
part ``p`` of ``2**prefix_bits`` holds the sorted unique hashes whose top ``prefix_bits`` bits are ``p``
as raw little-endian ``uint64`` records (:data:`GRAM_RECORD`), so the parts in order are one sorted
array, no process ever holds more than one part, and a lookup maps only the part a hash falls in
(:class:`PartitionedGramIndex`). The number of parts is fixed by the data (about
``part_grams`` hashes each), never by the rank count, so the files are the same on any number of ranks.
"""

from __future__ import annotations

import io
import math
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from corpus.decont.ngrams import NGRAM, gram_hashes, is_member, normalize_words, word_hashes
from corpus.docshard import atomic_write_bytes

#: the suffix of a spilled run of one shard's hashes (raw :data:`GRAM_RECORD`, sorted unique)
_RUN_SUFFIX = ".u64"
#: a merge reads each run in blocks of at least this many hashes, however many runs a shard spilled
_MIN_BLOCK_ROWS = 1024


def doc_grams(text: str) -> np.ndarray:
    return np.unique(gram_hashes(word_hashes(normalize_words(text)), NGRAM))


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def save_index(path: Path, hashes: np.ndarray) -> None:
    atomic_write_bytes(Path(path), npy_bytes(np.unique(np.asarray(hashes, dtype=np.uint64))))


class GramSpool:
    """One shard's 13-gram hashes on their way to its ``.npy``, in about ``limit_bytes`` of memory.

    The hashes of a shard's documents are held until they pass the limit, then written to ``spill_dir``
    as a sorted unique run; :meth:`save` merges the runs, reading each in blocks that share the limit,
    into the bytes :func:`save_index` writes for all the hashes at once. So a rank holds the limit, not
    the shard's 13-grams (8 bytes each, about 330 a document on the benchmark corpus: 3.3 M for a shard
    of 10,000 documents, held three times over by ``np.unique``), whatever the shard size.
    ``spill_dir`` belongs to the spool: it is emptied first (runs left by a killed run) and removed."""

    def __init__(self, spill_dir: Path, limit_bytes: int) -> None:
        self.spill_dir = Path(spill_dir)
        shutil.rmtree(self.spill_dir, ignore_errors=True)
        self.limit_rows = max(1, limit_bytes // GRAM_RECORD.itemsize)
        self.held: list[np.ndarray] = []
        self.held_rows = 0
        self.runs: list[Path] = []

    def add(self, hashes: np.ndarray) -> None:
        self.held.append(np.asarray(hashes, dtype=np.uint64))
        self.held_rows += int(self.held[-1].shape[0])
        if self.held_rows > self.limit_rows:
            self._spill()

    def _take_held(self) -> np.ndarray:
        hashes = np.unique(np.concatenate(self.held)) if self.held else np.empty(0, np.uint64)
        self.held, self.held_rows = [], 0
        return hashes

    def _spill(self) -> None:
        self.spill_dir.mkdir(parents=True, exist_ok=True)
        path = self.spill_dir / f"run-{len(self.runs):06d}{_RUN_SUFFIX}"
        self._take_held().astype(GRAM_RECORD, copy=False).tofile(path)
        self.runs.append(path)

    def save(self, path: Path) -> int:
        """Write the shard's sorted unique hashes to ``path`` (atomically); returns how many."""
        if not self.runs:
            hashes = self._take_held()
            save_index(path, hashes)
            return int(hashes.shape[0])
        try:
            self._spill()
            block_rows = max(_MIN_BLOCK_ROWS, self.limit_rows // len(self.runs))
            return _write_npy_stream(Path(path), merge_unique_runs(self.runs, block_rows))
        finally:
            shutil.rmtree(self.spill_dir, ignore_errors=True)
            self.runs = []


def merge_unique_runs(paths: Sequence[Path], block_rows: int) -> Iterator[np.ndarray]:
    """The sorted unique union of files of sorted unique :data:`GRAM_RECORD` hashes, in ascending chunks.

    Each file is read in blocks of ``block_rows``; a step emits every loaded hash at or below the
    smallest last hash loaded from a file with more to read (nothing unread can be below it), so the
    file that set that bound loads its next block, and memory stays at one block a file."""
    sources = [open(p, "rb") for p in paths]  # noqa: SIM115 - closed below
    try:
        left = [Path(p).stat().st_size // GRAM_RECORD.itemsize for p in paths]
        loaded = [np.empty(0, np.uint64) for _ in sources]
        while True:
            for i, f in enumerate(sources):
                if not loaded[i].shape[0] and left[i]:
                    loaded[i] = np.fromfile(f, dtype=GRAM_RECORD, count=min(block_rows, left[i]))
                    left[i] -= int(loaded[i].shape[0])
            reading = [i for i in range(len(sources)) if left[i]]
            if not reading:
                yield np.unique(np.concatenate(loaded))
                return
            bound = min(loaded[i][-1] for i in reading)
            cuts = [int(np.searchsorted(block, bound, side="right")) for block in loaded]
            yield np.unique(np.concatenate([block[:c] for block, c in zip(loaded, cuts, strict=True)]))
            loaded = [block[c:] for block, c in zip(loaded, cuts, strict=True)]
    finally:
        for f in sources:
            f.close()


def _write_npy_stream(path: Path, chunks: Iterable[np.ndarray]) -> int:
    """Write ascending uint64 chunks as the ``.npy`` :func:`npy_bytes` makes of their concatenation, without
    holding it: the header (whose length does not depend on the count) is rewritten once the count is known."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    count = 0
    with open(tmp, "wb") as f:
        header = _npy_header(0)
        f.write(header)
        for chunk in chunks:
            f.write(chunk.astype(GRAM_RECORD, copy=False).tobytes())
            count += int(chunk.shape[0])
        final = _npy_header(count)
        if len(final) != len(header):
            raise ValueError(f"{path}: an .npy header for {count} hashes is not {len(header)} bytes")
        f.seek(0)
        f.write(final)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return count


def _npy_header(count: int) -> bytes:
    """The header :func:`npy_bytes` writes for ``count`` uint64 hashes (everything before the data)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": GRAM_RECORD.str, "fortran_order": False, "shape": (count,)}
    )
    return buf.getvalue()


def load_index(path: Path) -> np.ndarray:
    arr = np.load(path, mmap_mode="r", allow_pickle=False)
    if arr.dtype != np.uint64 or arr.ndim != 1:
        raise ValueError(
            f"{path}: not a 13-gram index (expected a 1-d uint64 array, got {arr.dtype} {arr.shape})"
        )
    return arr


def npy_length(path: Path) -> int:
    """How many hashes a per-shard ``.npy`` holds, from its header (the data is not read)."""
    return int(load_index(path).shape[0])


# --- the range-partitioned index -------------------------------------------------------------------
#: one record of an index part: a 13-gram hash, little-endian (parts hold them sorted and unique)
GRAM_RECORD = np.dtype("<u8")


def prefix_bits(count: int, per_part: int) -> int:
    """How many top bits of a key choose its part: enough parts of about ``per_part`` records each for
    ``count`` records (0 bits: one part). A function of the data only, never of the rank count."""
    if per_part < 1:
        raise ValueError(f"per_part must be positive, got {per_part}")
    return max(0, math.ceil(math.log2(max(1, count) / per_part))) if count > per_part else 0


def part_of_hashes(hashes: np.ndarray, bits: int) -> np.ndarray:
    """The part of each uint64 hash: its top ``bits`` bits (all 0 with 0 bits)."""
    h = np.asarray(hashes, dtype=np.uint64)
    if bits == 0:
        return np.zeros(h.shape[0], dtype=np.int64)
    return (h >> np.uint64(64 - bits)).astype(np.int64)


def encode_grams(hashes: np.ndarray) -> bytes:
    return np.asarray(hashes, dtype=np.uint64).astype(GRAM_RECORD, copy=False).tobytes()


def decode_grams(data: bytes | memoryview) -> np.ndarray:
    if len(data) % GRAM_RECORD.itemsize:
        raise ValueError(
            f"a 13-gram index part holds whole {GRAM_RECORD.itemsize}-byte records, got {len(data)} bytes"
        )
    return np.frombuffer(data, dtype=GRAM_RECORD)


def map_records(path: Path, dtype: np.dtype) -> np.ndarray:
    """A file of fixed-width records as a read-only memory map (pages read when touched, not held)."""
    size = Path(path).stat().st_size
    if size % dtype.itemsize:
        raise ValueError(f"{path}: {size} bytes is not a whole number of {dtype.itemsize}-byte records")
    if size == 0:  # mmap refuses empty files
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


class SortedUniqueWriter:
    """Writes ascending uint64 values to a part file once each, batch by batch (memory: one batch).

    The exchange hands a part its hashes sorted, duplicates adjacent (every shard that holds a 13-gram
    sends it), in batches; the writer drops the repeats, also across batch ends, with no Python work per
    value."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.last: int | None = None
        self.count = 0

    def add_sorted(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.uint64)
        if not values.shape[0]:
            return
        if np.any(values[1:] < values[:-1]) or (self.last is not None and int(values[0]) < self.last):
            raise ValueError("values must arrive in ascending order")
        keep = np.empty(values.shape[0], dtype=bool)
        keep[0] = self.last is None or int(values[0]) != self.last
        np.not_equal(values[1:], values[:-1], out=keep[1:])
        fresh = values[keep]
        if fresh.shape[0]:
            self.out.write(encode_grams(fresh))
            self.count += int(fresh.shape[0])
        self.last = int(values[-1])


class PartitionedGramIndex:
    """The retained index as its parts (``paths[p]`` holds prefix ``p``), looked up by memory map: a
    lookup maps the parts its hashes fall in, one at a time, so memory stays at what it touches."""

    def __init__(self, paths: Sequence[Path], bits: int) -> None:
        if len(paths) != 1 << bits:
            raise ValueError(f"a {bits}-bit partitioned index has {1 << bits} parts, got {len(paths)}")
        self.paths = [Path(p) for p in paths]
        self.bits = bits

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        h = np.asarray(hashes, dtype=np.uint64)
        found = np.zeros(h.shape[0], dtype=bool)
        parts = part_of_hashes(h, self.bits)
        for p in np.unique(parts):
            sel = parts == p
            found[sel] = is_member(h[sel], map_records(self.paths[int(p)], GRAM_RECORD))
        return found

    def __len__(self) -> int:
        return sum(p.stat().st_size // GRAM_RECORD.itemsize for p in self.paths)
