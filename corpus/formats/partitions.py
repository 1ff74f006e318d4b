"""Helpers of the range-partitioned indexes the stages keep: how many parts, which part a key falls in,
and a part read by memory map.

An index is **range-partitioned by key prefix**: part ``p`` of ``2**prefix_bits`` holds the records whose
key's top ``prefix_bits`` bits are ``p``, each part sorted, so the parts in order are one sorted array, no
process ever holds more than one part, and a lookup maps only the part a key falls in. The number of parts
is fixed by the data (about ``per_part`` records each), never by the rank count, so the files are the same
on any number of ranks. Users: decontaminate's per-document 8-gram index (:mod:`corpus.decont.doc_grams`,
keyed by 8-gram hash), write_shards' doc_id index (:mod:`corpus.formats.doc_index`, keyed by doc_id).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


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


def map_records(path: Path, dtype: np.dtype) -> np.ndarray:
    """A file of fixed-width records as a read-only memory map (pages read when touched, not held)."""
    size = Path(path).stat().st_size
    if size % dtype.itemsize:
        raise ValueError(f"{path}: {size} bytes is not a whole number of {dtype.itemsize}-byte records")
    if size == 0:  # mmap refuses empty files
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")
