"""Shuffle by key: route records to the rank that owns their key, in bounded memory, whatever the rank count.

Two entry points share the exchange of this module: :func:`mpi_kernels.shuffle_bytes.shuffle_by_key`
for ``(key, payload)`` byte pairs of any length, :func:`mpi_kernels.shuffle_array.shuffle_array` for
fixed-width numpy rows. Each rank gets back an iterator over what it owns, sorted, so the order depends
only on the set of records a rank owns, never on the rank count or the round they came in.
:func:`exchange` runs rounds (fill, ask, grant, send: :mod:`mpi_kernels.shuffle_rounds`) until every
rank is done: a receiver never gets more than a round's bytes, whatever the skew, and a failure on one
rank stops every rank. Collective: every rank calls it with the same partition function and budget; the
returned iterator reads only local memory and files and removes its spill files when exhausted or closed.
Rounds, memory, framing and measurements: docs/dedup.md (*The shuffle's rounds and memory*).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mpi_kernels.barrier import wait_asleep
from mpi_kernels.shuffle_rounds import RecordTooLargeError, grant_round, too_large_error

# the states a rank announces in each round's first Alltoall
_DONE, _MORE, _TOO_LARGE, _FAILED = 0, 1, 2, 3


@dataclass(frozen=True)
class ShuffleStats:
    """What one rank's part of a shuffle did; ``rounds`` is the same on every rank.

    Bytes are what travelled (framed records on the bytes path, rows on the numpy path), so a document can
    state bytes moved as the sum of ``bytes_sent`` over ranks."""

    records: int  #: records this rank received (and the output holds)
    records_sent: int
    bytes_sent: int
    bytes_received: int
    rounds: int
    spilled_runs: int
    largest_round: int  #: the most bytes this rank received in one round (at most round_bytes(budget))

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class ShuffleOutputBase:
    """What both outputs share: their stats, the iterator over what was received, and the removal of
    the spill files once it is exhausted, closed or dropped."""

    stats: ShuffleStats
    _tmpdir: Path | None
    _it: Iterator[Any]

    def _cleanup(self) -> None:
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __next__(self) -> Any:
        return next(self._it)

    def close(self) -> None:
        """Stop early and remove the spill files."""
        self._it.close()  # type: ignore[attr-defined]
        self._cleanup()

    def __del__(self) -> None:
        self._cleanup()

    @property
    def records(self) -> int:
        return self.stats.records

    @property
    def rounds(self) -> int:
        return self.stats.rounds

    @property
    def spilled_runs(self) -> int:
        return self.stats.spilled_runs


def private_spill_dir(spill_dir: Path | None) -> Path:
    base = spill_dir if spill_dir is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"shuffle-{os.getpid()}-", dir=base))


def exchange(
    comm: Any,
    outbox: Any,
    deliver: Callable[[Any], None],
    limit: int,
    budget: int,
    make_room: Callable[[int], None] | None = None,
) -> tuple[int, int, int, int]:
    """Run rounds until every rank is done; returns (bytes sent, bytes received, rounds, largest round).

    ``make_room(n)``, when given, is called with what this rank granted for the round (at least what
    will arrive) before the send buffer is built, so that a receiver spills what it holds while only the
    send queue is alive, not beside the send and receive buffers. Each time a round's buffer is freed
    (the queue, once the send buffer is built; the send buffer, once sent; the receive buffer, once
    delivered) the allocator's free pages are given back (:func:`_release_free_memory`), so that the
    next buffer is not allocated beside the freed one."""
    size = comm.Get_size()
    rank = comm.Get_rank()
    sent_total = received_total = rounds = largest = 0
    while True:
        # 1. fill; a failure is announced to every rank, so none waits forever in the next collective
        state, failure = _MORE, None
        try:
            outbox.fill()
        except RecordTooLargeError as e:
            state, failure = _TOO_LARGE, e
        except Exception as e:  # noqa: BLE001 - re-raised below, after the other ranks know
            state, failure = _FAILED, e
        wants, heads = outbox.wants_and_heads()
        if state == _MORE and outbox.exhausted and not wants.any():
            state = _DONE
        if state == _TOO_LARGE:
            heads[:] = failure.record_bytes  # type: ignore[union-attr]
        # 2. ask: (wanted bytes, first record, state) to every peer
        asks = _alltoall(comm, np.stack([wants, heads, np.full(size, state, dtype=np.int64)], axis=1))
        states = asks[:, 2]
        if (states >= _TOO_LARGE).any():
            if failure is not None:
                raise failure
            bad = int(np.flatnonzero(states >= _TOO_LARGE)[0])
            if states[bad] == _TOO_LARGE:
                raise too_large_error(int(asks[bad, 1]), budget)
            raise RuntimeError(
                f"shuffle aborted: rank {bad} failed while reading its records (rank {rank} stops too)"
            )
        if not (states == _MORE).any():
            return sent_total, received_total, rounds, largest
        # 3. grant
        granted = grant_round(asks[:, 0], asks[:, 1], limit, rounds)
        if make_room is not None:
            make_room(int(granted.sum()))
        grants = _alltoall(comm, granted.reshape(size, 1))[:, 0]
        # 4. send the longest prefix of whole records within each grant
        send, counts = outbox.take(grants)
        _release_free_memory()
        recv = _alltoallv(comm, send, counts)
        del send
        _release_free_memory()
        deliver(recv)
        rounds += 1
        sent_total += int(counts.sum())
        received_total += len(recv)
        largest = max(largest, len(recv))
        del recv  # not held through the next round's exchange: a round's buffer is budget/4
        _release_free_memory()


def exchange_into(
    comm: Any,
    outbox: Any,
    receiver: Any,
    limit: int,
    budget: int,
    make_room: Callable[[int], None] | None = None,
) -> ShuffleStats:
    """:func:`exchange` into ``receiver`` (``add``, ``records``, ``runs``, ``tmpdir``); its spill
    directory is removed if the exchange fails. The shuffle's statistics."""
    try:
        sent, received, rounds, largest = exchange(comm, outbox, receiver.add, limit, budget, make_room)
    except BaseException:
        if receiver.tmpdir is not None:
            shutil.rmtree(receiver.tmpdir, ignore_errors=True)
        raise
    return ShuffleStats(
        receiver.records, outbox.records_sent, sent, received, rounds, len(receiver.runs), largest
    )


def _load_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    try:
        return ctypes.CDLL(None).malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _load_malloc_trim()


def _release_free_memory() -> None:
    """Give the C allocator's free pages back to the system (a no-op without glibc).

    A round frees budget/4 of queue, send or receive buffer, below glibc's adaptive mmap threshold (which
    earlier large frees raise), so glibc keeps it for reuse; the round's next buffer, or a sort's
    temporaries, are then allocated beside it instead of in it, and resident memory grows by what the
    rounds freed, not by what they hold: measured on decontaminate's 13-gram exchange at a 64 MB
    budget, the peak rose from 119 MB to 135-140 MB per rank between 10,000 and 40,000 documents
    (three full rounds instead of one), and stays at 111-117 MB with this. It costs a walk of the free
    lists, three times a round."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _alltoall(comm: Any, send: np.ndarray) -> np.ndarray:
    """Row i of ``send`` goes to rank i; row i of the result came from rank i. A rank that arrives
    before the others (its share of a round's reading or sorting was smaller) waits asleep, not
    polling (:func:`~mpi_kernels.barrier.wait_asleep`); once it has every rank's row, every rank is in
    the round, so the round's Alltoallv that follows moves bytes instead of waiting."""
    send = np.ascontiguousarray(send, dtype=np.int64)
    if comm.Get_size() == 1:
        return send.copy()
    recv = np.empty_like(send)
    wait_asleep(comm.Ialltoall(send, recv))
    return recv


def _alltoallv(comm: Any, send: Any, send_counts: np.ndarray) -> Any:
    """``send`` holds, back to back, ``send_counts[i]`` bytes for rank i; returns what every rank sent
    here, in rank order."""
    if comm.Get_size() == 1:
        return send
    from mpi4py import MPI

    recv_counts = _alltoall(comm, send_counts.reshape(-1, 1))[:, 0]
    send = np.frombuffer(send, dtype=np.uint8) if len(send) else np.empty(0, np.uint8)
    recv = np.empty(int(recv_counts.sum()), dtype=np.uint8)
    sdispl = np.concatenate(([0], np.cumsum(send_counts)[:-1]))
    rdispl = np.concatenate(([0], np.cumsum(recv_counts)[:-1]))
    comm.Alltoallv(
        [send, (send_counts.astype(np.int32), sdispl.astype(np.int32)), MPI.BYTE],
        [recv, (recv_counts.astype(np.int32), rdispl.astype(np.int32)), MPI.BYTE],
    )
    return recv
