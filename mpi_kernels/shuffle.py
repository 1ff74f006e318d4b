"""Shuffle by key: route (key, payload) records to the rank that owns their key, in bounded memory.

``shuffle_by_key(comm, records)`` is the distributed "group by" every global stage uses: each rank passes
its local records (any iterable, possibly far larger than memory), each record goes to rank
``partition_of(key) % comm.size`` (by default a stable 64-bit hash of the key, the same on every
machine and Python process), and each rank gets back an iterator over what it received, **sorted by
(key, payload)**. The order therefore depends only on the set of records a rank owns, never on how many
ranks sent them or in which round they arrived; equal keys are adjacent, so a caller groups with
:func:`itertools.groupby`.

How it works:

* **Rounds.** Every rank packs records into per-destination buffers until its outgoing bytes for the
  round reach ``memory_budget_bytes / (4 * size)`` (at least one record per round), then all ranks take
  part in one ``Alltoall`` of byte counts and one ``Alltoallv`` of the packed bytes. A rank whose input
  is exhausted keeps taking part with empty sends until every rank is done (an ``allreduce`` decides).
  So one round receives at most about a quarter of the budget, whatever the rank count.
* **Spill.** Received records accumulate in memory; when their estimated footprint (bytes plus Python
  object overhead) passes half the budget, they are sorted and written as a sorted run to a private
  directory under ``spill_dir`` (the system temp dir when ``None``). The result is then a k-way merge of
  the runs and the in-memory remainder, streamed from disk. Without spills it is one in-memory sort.
* **Framing.** A record travels and is spilled as ``<u32 key length><u32 payload length><key><payload>``;
  a single record must stay under 2 GiB.

Collective: every rank of ``comm`` must call it, with the same ``partition_of`` and budget. The
exchange happens inside the call; the returned iterator then reads only local memory and files, and its
spill files are removed once it is exhausted or closed (exhaust it, or call ``close()``).
"""

from __future__ import annotations

import hashlib
import heapq
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

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


class ShuffleOutput(Iterator[tuple[bytes, bytes]]):
    """This rank's received records in (key, payload) order, plus what the exchange did.

    ``records`` / ``bytes`` count what this rank received; ``rounds`` is the number of collective
    exchange rounds (the same on every rank); ``spilled_runs`` the sorted runs written to disk.
    """

    def __init__(
        self,
        memory: list[tuple[bytes, bytes]],
        runs: list[Path],
        tmpdir: Path | None,
        records: int,
        nbytes: int,
        rounds: int,
    ) -> None:
        self.records = records
        self.bytes = nbytes
        self.rounds = rounds
        self.spilled_runs = len(runs)
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

    def _cleanup(self) -> None:
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __next__(self) -> tuple[bytes, bytes]:
        return next(self._it)

    def close(self) -> None:
        """Stop early and remove the spill files."""
        self._it.close()  # type: ignore[attr-defined]
        self._cleanup()

    def __del__(self) -> None:
        self._cleanup()


class _Receiver:
    """Collects received records; sorts and spills them to a run file when over its budget."""

    def __init__(self, budget: int, spill_dir: Path | None) -> None:
        self.budget = budget
        self.spill_dir = spill_dir
        self.tmpdir: Path | None = None
        self.memory: list[tuple[bytes, bytes]] = []
        self.memory_bytes = 0
        self.runs: list[Path] = []
        self.records = 0
        self.nbytes = 0

    def add(self, buf: memoryview) -> None:
        for key, payload in unpack_records(buf):
            self.memory.append((key, payload))
            self.memory_bytes += len(key) + len(payload) + _RECORD_OVERHEAD
            self.records += 1
        self.nbytes += len(buf)
        if self.memory_bytes > self.budget:
            self.spill()

    def spill(self) -> None:
        if self.tmpdir is None:
            base = self.spill_dir if self.spill_dir is not None else Path(tempfile.gettempdir())
            base.mkdir(parents=True, exist_ok=True)
            self.tmpdir = Path(tempfile.mkdtemp(prefix=f"shuffle-{os.getpid()}-", dir=base))
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
    from mpi4py import MPI

    size = comm.Get_size()
    part = partition_of or stable_key_hash
    round_bytes = max(memory_budget_bytes // (4 * size), 1)
    receiver = _Receiver(max(memory_budget_bytes // 2, 1), Path(spill_dir) if spill_dir is not None else None)
    it = iter(records)
    exhausted = False
    rounds = 0
    try:
        while True:
            outgoing: list[bytearray] = [bytearray() for _ in range(size)]
            pending = 0
            while not exhausted and pending < round_bytes:
                try:
                    key, payload = next(it)
                except StopIteration:
                    exhausted = True
                    break
                if not isinstance(key, bytes) or not isinstance(payload, bytes):
                    raise TypeError(
                        f"shuffle_by_key takes (bytes, bytes) records, got ({type(key).__name__}, "
                        f"{type(payload).__name__})"
                    )
                dest = part(key) % size
                buf = outgoing[dest]
                buf += _HEADER.pack(len(key), len(payload))
                buf += key
                buf += payload
                pending += _HEADER.size + len(key) + len(payload)
            rounds += 1
            send_counts = np.array([len(b) for b in outgoing], dtype=np.int64)
            if size == 1:
                receiver.add(memoryview(outgoing[0]))
            else:
                recv_counts = np.empty(size, dtype=np.int64)
                comm.Alltoall(send_counts, recv_counts)
                if recv_counts.sum() >= 2**31:
                    raise ValueError("one shuffle round would receive over 2 GiB: lower memory_budget_bytes")
                send = np.frombuffer(b"".join(outgoing), dtype=np.uint8) if pending else np.empty(0, np.uint8)
                recv = np.empty(int(recv_counts.sum()), dtype=np.uint8)
                sdispl = np.concatenate(([0], np.cumsum(send_counts)[:-1]))
                rdispl = np.concatenate(([0], np.cumsum(recv_counts)[:-1]))
                comm.Alltoallv(
                    [send, (send_counts.astype(np.int32), sdispl.astype(np.int32)), MPI.BYTE],
                    [recv, (recv_counts.astype(np.int32), rdispl.astype(np.int32)), MPI.BYTE],
                )
                receiver.add(memoryview(recv))
            del outgoing
            if not comm.allreduce(0 if exhausted else 1, op=MPI.SUM):
                break
    except BaseException:
        if receiver.tmpdir is not None:
            shutil.rmtree(receiver.tmpdir, ignore_errors=True)
        raise
    return ShuffleOutput(
        receiver.memory, receiver.runs, receiver.tmpdir, receiver.records, receiver.nbytes, rounds
    )
