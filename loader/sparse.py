"""Sparse reads: the ``.bin`` byte ranges a step needs, asked of the filesystem in few requests.

A step's stream ranges of one shard that touch (consecutive sequences of one chunk) are one request.
Through a version's selection a range's bytes are only its selected documents', and documents less
than ``gap_bytes`` apart are one request (the gap is read and not delivered). A request is an
``MADV_WILLNEED`` of exactly its pages, waited for; a version's mapping is ``MADV_RANDOM``, so a page
fault reads no neighbourhood around it. What requests cover is counted (``ShardStore.bytes_read``);
which tokens are delivered does not depend on any of it. See docs/loader.md ("Sparse reads").
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

#: Selected documents closer than this in the ``.bin`` are fetched in one request (bytes).
DEFAULT_GAP_BYTES = 256


def merge_step_ranges(segments: tuple) -> list[tuple[int, int, int]]:
    """A step's ``(shard, start, end)`` stream ranges (per sequence) as the fewest ranges: a range that
    begins where the previous one of the same shard ended extends it. Order of first appearance. Pure."""
    out: list[tuple[int, int, int]] = []
    for ranges in segments:
        for shard, a, b in ranges:
            if out and out[-1][0] == shard and out[-1][2] == a:
                out[-1] = (shard, out[-1][1], b)
            else:
                out.append((shard, a, b))
    return out


def coalesce(lo: np.ndarray, hi: np.ndarray, gap: int) -> tuple[np.ndarray, np.ndarray]:
    """Ascending, disjoint byte ranges ``[lo, hi)`` merged where the gap between two is at most ``gap``
    bytes. Pure; empty ranges are dropped."""
    keep = hi > lo
    lo, hi = np.asarray(lo, np.int64)[keep], np.asarray(hi, np.int64)[keep]
    if lo.size == 0:
        return lo, hi
    starts = np.concatenate(([True], lo[1:] - hi[:-1] > gap))
    ends = np.concatenate((starts[1:], [True]))
    return lo[starts], hi[ends]


def map_bin(path: Path, size: int, sparse: bool) -> tuple[mmap.mmap | None, np.ndarray]:
    """The ``.bin`` mapped read-only, and its bytes as an array; ``sparse``: no read-around on faults."""
    if size == 0:
        return None, np.zeros(0, np.uint8)
    with open(path, "rb") as f:
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if sparse and hasattr(mmap, "MADV_RANDOM"):
        mapping.madvise(mmap.MADV_RANDOM)
    return mapping, np.frombuffer(mapping, dtype=np.uint8)


def request(mapping: mmap.mmap | None, data: np.ndarray, lo: list[int], hi: list[int]) -> None:
    """Read the pages of each byte range ``[lo, hi)`` of ``mapping`` (``data``: its bytes as an array):
    one request each, waited for (a byte of every page is touched), so a request's time is the
    filesystem's."""
    if mapping is None:
        return
    page = mmap.PAGESIZE
    for a, b in zip(lo, hi, strict=True):
        start, b = a - a % page, min(b, len(mapping))
        if b <= start:
            continue
        if hasattr(mmap, "MADV_WILLNEED"):
            mapping.madvise(mmap.MADV_WILLNEED, start, b - start)
        data[start:b:page].max()


def byte_ranges(opened, start: int, end: int, gap: int) -> tuple[list[int], list[int]]:
    """The ``.bin`` byte ranges reading stream positions ``[start, end)`` of ``opened`` (an
    :class:`loader.sequences.OpenShard`) needs, coalesced with ``gap``: one range for a whole shard,
    the selected documents' parts through a selection, each document's through a shuffle."""
    size = opened.itemsize
    if opened.shuffled is not None:
        parts = opened.shuffled.parts(opened, start, end)
        lo = np.array([p.token for p in parts], dtype=np.int64)
        hi = lo + np.array([p.tokens for p in parts], dtype=np.int64)
        order = np.argsort(lo, kind="stable")
        lo, hi = coalesce(lo[order] * size, hi[order] * size, gap)
        return lo.tolist(), hi.tolist()
    sel = opened.selection
    if sel is not None:
        first = max(int(np.searchsorted(sel.starts, start, side="right")) - 1, 0)
        last = int(np.searchsorted(sel.starts, end, side="left"))
        s, n, tok = sel.starts[first:last], sel.lengths[first:last], sel.token_starts[first:last]
        lo = tok + np.maximum(start - s, 0)
        hi = tok + np.minimum(end - s, n)
        lo, hi = coalesce(lo * size, np.maximum(hi, lo) * size, gap)
        return lo.tolist(), hi.tolist()
    lo, hi = opened.bin_slice(start, end)
    return ([lo * size], [hi * size]) if hi > lo else ([], [])  # one range: nothing to coalesce
