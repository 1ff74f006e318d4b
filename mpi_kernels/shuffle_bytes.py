"""Shuffle by key for byte records: ``(key, payload)`` pairs of any length, routed to rank
``partition_of(key) % comm.size`` (by default :func:`stable_key_hash`, the same on every machine and
Python process); each rank gets back an iterator over what it received, sorted by (key, payload).

A record travels and spills framed as ``<u32 key length><u32 payload length><key><payload>``; received
records stay in memory up to a quarter of the budget (counting Python's per-object overhead, checked
record by record), then are sorted and spilled as a run; the output is a heap merge of the runs. Rounds
and the exchange: :mod:`mpi_kernels.shuffle`; docs/dedup.md (*The shuffle's rounds and memory*).
"""

from __future__ import annotations

import hashlib
import heapq
import struct
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mpi_kernels.shuffle import ShuffleOutputBase, ShuffleStats, exchange_into, private_spill_dir
from mpi_kernels.shuffle_rounds import prefix_records, round_bytes, too_large_error

_HEADER = struct.Struct("<II")
#: what one received record costs in memory beyond its bytes: a tuple and two bytes objects
_RECORD_OVERHEAD = 56 + 2 * 33 + 16
_READ_BLOCK = 1 << 20


def stable_key_hash(key: bytes) -> int:
    """The default partition function: a 64-bit blake2b of the key, independent of the process."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


def pack_records(records: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Frame records as ``<u32 klen><u32 plen><key><payload>`` back to back."""
    out = bytearray()
    for key, payload in records:
        out += _HEADER.pack(len(key), len(payload))
        out += key
        out += payload
    return bytes(out)


def unpack_records(buf: bytes | memoryview) -> Iterator[tuple[bytes, bytes]]:
    """The inverse of :func:`pack_records`."""
    mv = memoryview(buf)
    pos, end = 0, len(mv)
    while pos < end:
        klen, plen = _HEADER.unpack_from(mv, pos)
        pos += _HEADER.size
        key = bytes(mv[pos : pos + klen])
        pos += klen
        yield key, bytes(mv[pos : pos + plen])
        pos += plen


def _read_run(path: Path) -> Iterator[tuple[bytes, bytes]]:
    """Stream a spilled run back, one record at a time, with buffered reads."""
    with open(path, "rb", buffering=_READ_BLOCK) as f:
        while header := f.read(_HEADER.size):
            if len(header) != _HEADER.size:
                raise OSError(f"spill file {path} is truncated")
            klen, plen = _HEADER.unpack(header)
            key = f.read(klen)
            payload = f.read(plen)
            if len(key) != klen or len(payload) != plen:
                raise OSError(f"spill file {path} is truncated")
            yield key, payload


class ShuffleOutput(ShuffleOutputBase, Iterator[tuple[bytes, bytes]]):
    """This rank's received records in (key, payload) order, plus what the exchange did (``stats``)."""

    def __init__(
        self, memory: list[tuple[bytes, bytes]], runs: list[Path], tmpdir: Path | None, stats: ShuffleStats
    ) -> None:
        self.stats = stats
        self._tmpdir = tmpdir
        memory.sort()
        self._it = self._merge(memory, runs)

    def _merge(self, memory: list[tuple[bytes, bytes]], runs: list[Path]) -> Iterator[tuple[bytes, bytes]]:
        try:
            if runs:
                yield from heapq.merge(memory, *(_read_run(p) for p in runs))
            else:
                yield from memory
        finally:
            self._cleanup()


class _BytesOutbox:
    """Per-destination queues of framed records: what this rank still has to send."""

    def __init__(
        self,
        records: Iterable[tuple[bytes, bytes]],
        part: Callable[[bytes], int],
        size: int,
        limit: int,
        budget: int,
    ) -> None:
        self.it = iter(records)
        self.part, self.size, self.limit, self.budget = part, size, limit, budget
        self.exhausted = False
        self.bufs = [bytearray() for _ in range(size)]
        self.ends: list[list[int]] = [[] for _ in range(size)]  # end offset of each queued record
        self.start = [0] * size  # first unsent record
        self.base = [0] * size  # first unsent byte
        self.pending = 0
        self.records_sent = 0

    def fill(self) -> None:
        while not self.exhausted and self.pending < self.limit:
            try:
                key, payload = next(self.it)
            except StopIteration:
                self.exhausted = True
                break
            if not isinstance(key, bytes) or not isinstance(payload, bytes):
                raise TypeError(
                    f"shuffle_by_key takes (bytes, bytes) records, got ({type(key).__name__}, "
                    f"{type(payload).__name__})"
                )
            n = _HEADER.size + len(key) + len(payload)
            if n > self.limit:
                raise too_large_error(n, self.budget)
            dest = self.part(key) % self.size
            buf = self.bufs[dest]
            buf += _HEADER.pack(len(key), len(payload))
            buf += key
            buf += payload
            self.ends[dest].append(len(buf))
            self.pending += n

    def wants_and_heads(self) -> tuple[np.ndarray, np.ndarray]:
        wants = np.array([len(b) - s for b, s in zip(self.bufs, self.base, strict=True)], dtype=np.int64)
        heads = np.array(
            [e[i] - s if i < len(e) else 0 for e, i, s in zip(self.ends, self.start, self.base, strict=True)],
            dtype=np.int64,
        )
        return wants, heads

    def take(self, grants: np.ndarray) -> tuple[bytearray, np.ndarray]:
        """Remove, per peer, the longest prefix of whole records within its grant; return them back to
        back in rank order (one buffer: no second copy for the Alltoallv) and the bytes per peer."""
        send = bytearray()
        counts = np.zeros(self.size, dtype=np.int64)
        for d in range(self.size):
            g = int(grants[d])
            if not g:
                continue
            ends, i, base = self.ends[d], self.start[d], self.base[d]
            k = max(1, prefix_records(ends, i, base, g))
            cut = ends[i + k - 1]
            with memoryview(self.bufs[d]) as mv:
                send += mv[base:cut]
            counts[d] = cut - base
            self.records_sent += k
            self.pending -= cut - base
            self.start[d], self.base[d] = i + k, cut
            if cut * 2 >= len(self.bufs[d]):  # compact: amortized O(1) per record
                del self.bufs[d][:cut]
                self.ends[d] = [e - cut for e in ends[i + k :]]
                self.start[d] = self.base[d] = 0
        return send, counts


class _BytesReceiver:
    """Collects received records; sorts and spills them to a run file when over its budget."""

    def __init__(self, budget: int, spill_dir: Path | None) -> None:
        self.budget = budget
        self.spill_dir = spill_dir
        self.tmpdir: Path | None = None
        self.memory: list[tuple[bytes, bytes]] = []
        self.memory_bytes = 0
        self.runs: list[Path] = []
        self.records = 0

    def add(self, buf: memoryview | bytes) -> None:
        for key, payload in unpack_records(buf):
            self.memory.append((key, payload))
            self.memory_bytes += len(key) + len(payload) + _RECORD_OVERHEAD
            self.records += 1
            if self.memory_bytes > self.budget:  # within the round: small records cost 5x their bytes here
                self.spill()

    def spill(self) -> None:
        if self.tmpdir is None:
            self.tmpdir = private_spill_dir(self.spill_dir)
        self.memory.sort()
        path = self.tmpdir / f"run-{len(self.runs):06d}.bin"
        with open(path, "wb", buffering=_READ_BLOCK) as f:
            for key, payload in self.memory:
                f.write(_HEADER.pack(len(key), len(payload)))
                f.write(key)
                f.write(payload)
        self.runs.append(path)
        self.memory = []
        self.memory_bytes = 0


def shuffle_by_key(
    comm: Any,
    records: Iterable[tuple[bytes, bytes]],
    *,
    partition_of: Callable[[bytes], int] | None = None,
    memory_budget_bytes: int = 256 << 20,
    spill_dir: Path | None = None,
) -> ShuffleOutput:
    """Send every record to rank ``partition_of(key) % comm.size``; return what this rank received,
    sorted by (key, payload). Collective; see the module docstring for rounds, spilling and memory."""
    size = comm.Get_size()
    limit = round_bytes(memory_budget_bytes)
    outbox = _BytesOutbox(records, partition_of or stable_key_hash, size, limit, memory_budget_bytes)
    receiver = _BytesReceiver(
        max(memory_budget_bytes // 4, 1), Path(spill_dir) if spill_dir is not None else None
    )
    stats = exchange_into(comm, outbox, receiver, limit, memory_budget_bytes)
    return ShuffleOutput(receiver.memory, receiver.runs, receiver.tmpdir, stats)
