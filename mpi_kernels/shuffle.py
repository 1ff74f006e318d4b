"""Shuffle by key: route records to the rank that owns their key, in bounded memory, whatever the rank count.

Two entry points share one collective round structure:

* ``shuffle_by_key(comm, records)`` takes ``(key, payload)`` byte pairs of any length (any iterable,
  possibly far larger than memory); each goes to rank ``partition_of(key) % comm.size`` (by default a
  stable 64-bit hash of the key, the same on every machine and Python process) and each rank gets back
  an iterator over what it received, **sorted by (key, payload)**.
* ``shuffle_array(comm, batches, dtype=..., dest_of=..., order_fields=...)`` takes fixed-width records as
  numpy structured arrays; each row goes to rank ``dest_of(batch)[i] % comm.size`` and each rank gets back
  an iterator of numpy batches **sorted by** ``order_fields`` **then by every other field** (integers
  numerically, byte fields bytewise). Routing, sorting, spilling and merging are numpy operations on
  whole batches: no Python work per record (the bytes path's queues, unpacking, sort and heap merge cost
  tens of microseconds per record end to end, measured below). :func:`whole_groups` re-cuts the output
  so that equal keys never straddle two batches.

Either way the order depends only on the set of records a rank owns, never on how many ranks sent them
or in which round they arrived; equal keys are adjacent, so a caller groups with :func:`itertools.groupby`.

How a round works (``R = memory_budget_bytes / 4``, at most 1 GiB; the same on every rank):

1. **Fill.** A rank reads its input into per-destination queues until it holds ``R`` bytes in total (not
   per peer), counting what is left over from earlier rounds.
2. **Ask.** One ``Alltoall`` of (bytes queued for you, size of my first queued record, my state): every
   receiver learns what each sender wants to send it, and every rank learns whether all are done.
3. **Grant.** Each receiver grants at most ``R`` bytes in total, split among the senders that want to
   send to it (:func:`grant_round`: senders are admitted in an order that rotates with the round, each
   admitted sender is granted at least its first record, the rest is water-filled), and returns the
   grants with a second ``Alltoall``.
4. **Send.** One ``Alltoallv``: each sender sends, per peer, the longest prefix of whole records that fits
   its grant, and keeps the rest for the next round.

**The bound.** A receiver never receives more than ``R`` bytes in one round, whatever the rank count ``P``
and whatever the key skew (all records to one rank included), and a sender never queues more than
``R`` plus one record (plus one input batch of at most ``R`` on the numpy path). The round size does not
shrink with ``P``: with keys spread evenly a message is about ``R / P`` bytes per peer (16 KiB at a
64 MB budget on 1,000 ranks), where the old rule (``budget / (4 P)`` per rank and round) gave
``budget / (4 P^2)``, 17 bytes. :func:`simulate_rounds` runs the same protocol without MPI, for tests and
``bench/bench_shuffle.py``. A single record must fit in a round: a larger one is a one-line
``ValueError`` naming ``memory_budget_mb`` and the size it needs, raised on every rank.

**Spill.** Received records accumulate in memory; past their share of the budget (a quarter of it, counting
Python object overhead, on the bytes path, checked record by record; an eighth on the numpy path, whose
sort needs the rows, their sort order and its temporaries, a run being written through the order a block at
a time rather than as a sorted copy; a round larger than that is spilled in pieces) they are sorted and
written as a sorted run to a private directory under ``spill_dir`` (the system temp dir when ``None``). On
the numpy path a round's remainder is held sorted, and a receiver spills it before the round that would
overflow it is sent (its size is what the receiver granted), so neither sort shares memory with a send and
a receive buffer. The result is then a merge of the runs and the in-memory remainder, streamed from disk: a
heap of records on the bytes path, a batched merge on the numpy path (each step sorts the loaded blocks,
which take a 32nd of the budget together, and emits every row at or below the smallest block end). Without
spills it is one in-memory sort.

**Memory.** So a rank holds its send queue (``R``), the round being sent and received (``R``) and the
records it keeps, with their sort: measured on the numpy path at a 64 MB budget, 52 MB of allocations at
most during the exchange and 20 MB during the merge. Each round's freed buffers are given back to the
system at once (:func:`_release_free_memory`), so resident memory follows this rather than growing with the
number of rounds. The bytes path adds Python's per-object overhead where it is not counted: about 40 bytes
per queued record (its end offset in a list).

**Framing.** On the bytes path a record travels and is spilled as
``<u32 key length><u32 payload length><key><payload>``; on the numpy path rows travel and spill as the
dtype's raw bytes.

**Measured** (``bench/bench_shuffle.py``, table in docs/dedup.md): 3 M records of a 16-byte key and an
8-byte payload at a 64 MB budget, on 1 and 2 ranks of 2 shared cores: the numpy path is 7-20x faster than
the bytes path in the same run (0.2-0.9 M records/s per rank against 0.02-0.05 M) and peaks 25-50 MB
lower per rank.

Collective: every rank of ``comm`` must call it, with the same partition function and budget. The
exchange happens inside the call; the returned iterator then reads only local memory and files, and its
spill files are removed once it is exhausted or closed (exhaust it, or call ``close()``). Its ``stats``
(:class:`ShuffleStats`) say what moved.
"""

from __future__ import annotations

import bisect
import ctypes
import hashlib
import heapq
import math
import os
import shutil
import struct
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

_HEADER = struct.Struct("<II")
#: what one received record costs in memory beyond its bytes: a tuple and two bytes objects
_RECORD_OVERHEAD = 56 + 2 * 33 + 16
_READ_BLOCK = 1 << 20
#: a round never exceeds this, so that Alltoallv's 32-bit counts and displacements cannot overflow
_MAX_ROUND_BYTES = 1 << 30
#: numpy output batches are about this large (rows of the in-memory result are views, not copies)
_OUT_BATCH_BYTES = 4 << 20
#: a spilled run is written in blocks of about this many bytes, gathered through the sort order
_SPILL_WRITE_BYTES = 1 << 20
#: each spilled run is read back in blocks of at least this many rows, however many runs there are
_MIN_MERGE_ROWS = 1024

# the states a rank announces in each round's first Alltoall
_DONE, _MORE, _TOO_LARGE, _FAILED = 0, 1, 2, 3


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


# --- the round plan: pure functions, the same in the MPI exchange and in simulate_rounds ---------------


def round_bytes(memory_budget_bytes: int) -> int:
    """What one rank may queue to send, and receive, in one round: a quarter of its budget (at most 1 GiB).

    Independent of the rank count on purpose: dividing by it made messages shrink as 1/P^2."""
    return max(1, min(memory_budget_bytes // 4, _MAX_ROUND_BYTES))


def old_round_bytes(memory_budget_bytes: int, size: int) -> int:
    """The rule this module used before (``budget / (4 P)`` per rank and round); kept for the benchmark."""
    return max(memory_budget_bytes // (4 * size), 1)


class RecordTooLargeError(ValueError):
    """A record that cannot fit in one round at this budget (a ``ValueError`` with the size it needs)."""

    def __init__(self, message: str, record_bytes: int) -> None:
        super().__init__(message)
        self.record_bytes = record_bytes


def too_large_error(record_bytes: int, memory_budget_bytes: int) -> RecordTooLargeError:
    """The one-line error for a record that cannot fit in a round at this budget."""
    need_mb = max(1, math.ceil(4 * record_bytes / (1 << 20)))
    return RecordTooLargeError(
        f"memory_budget_mb = {memory_budget_bytes / (1 << 20):.4g} is too small for a shuffle record of "
        f"{record_bytes:,} bytes: a record must fit in a quarter of the budget, so it needs "
        f"memory_budget_mb >= {need_mb}",
        record_bytes,
    )


def grant_round(wants: np.ndarray, heads: np.ndarray, capacity: int, round_no: int) -> np.ndarray:
    """A receiver's grants for one round: at most ``capacity`` bytes in total, split among its senders.

    ``wants[s]`` is what sender ``s`` has queued for this receiver, ``heads[s]`` the size of its first
    queued record (at most ``capacity``). Senders are admitted in the order ``round_no, round_no + 1, …``
    (mod P), so none starves under skew, as long as their first records fit together (the first one always
    is); each admitted sender is granted its first record, and what capacity is left is water-filled
    (every admitted sender gets the same extra, or all it wants if less). Deterministic, and never more
    than ``capacity`` in total."""
    wants = np.asarray(wants, dtype=np.int64)
    heads = np.asarray(heads, dtype=np.int64)
    size = len(wants)
    grants = np.zeros(size, dtype=np.int64)
    rotation = (np.arange(size) + round_no) % size
    senders = rotation[wants[rotation] > 0]
    if not len(senders):
        return grants
    admitted = senders[np.cumsum(heads[senders]) <= capacity]
    if not len(admitted):
        admitted = senders[:1]
    grants[admitted] = heads[admitted]
    room = capacity - int(heads[admitted].sum())
    extra = wants[admitted] - heads[admitted]
    if room > 0 and extra.sum() > 0:
        grants[admitted] += _water_fill(extra, room)
    return grants


def _water_fill(extra: np.ndarray, room: int) -> np.ndarray:
    """The largest level L with sum(min(extra, L)) <= room; returns min(extra, L)."""
    if int(extra.sum()) <= room:
        return extra
    s = np.sort(extra)
    n = len(s)
    below = np.concatenate(([0], np.cumsum(s)[:-1]))  # what the k smallest take in full
    levels = (room - below) // (n - np.arange(n))  # the level if the k smallest are satisfied
    k = int(np.argmax(levels < s))  # first k whose level does not cover it (exists: sum(s) > room)
    return np.minimum(extra, levels[k])


def prefix_records(ends: Sequence[int], start: int, base: int, grant: int) -> int:
    """How many whole records, from index ``start`` of the queue whose record ``i`` ends at byte
    ``ends[i]`` (the queue's unsent part begins at byte ``base``), fit in ``grant`` bytes."""
    return bisect.bisect_right(ends, base + grant, lo=start) - start


@dataclass(frozen=True)
class RoundTrace:
    """What :func:`simulate_rounds` saw: per round, the bytes each receiver got and the messages sent."""

    received: list[np.ndarray]  #: per round, bytes received by each rank (length P)
    messages: list[int]  #: per round, how many non-empty (sender, receiver) messages
    sent_bytes: list[int]  #: per round, bytes moved in total

    @property
    def rounds(self) -> int:
        return len(self.received)

    @property
    def largest_round_received(self) -> int:
        return max((int(r.max()) for r in self.received), default=0)

    @property
    def mean_message_bytes(self) -> float:
        return sum(self.sent_bytes) / max(1, sum(self.messages))


def simulate_rounds(
    record_bytes: Sequence[np.ndarray], dests: Sequence[np.ndarray], *, memory_budget_bytes: int
) -> RoundTrace:
    """Run the round protocol of the shuffle for P ranks in one process, without MPI.

    ``record_bytes[r]`` / ``dests[r]``: the sizes and destination ranks of rank r's input records, in
    input order. The rules (fill to :func:`round_bytes`, :func:`grant_round`, longest prefix of whole
    records) are the ones :func:`shuffle_by_key` and :func:`shuffle_array` follow, so its trace is what
    they would do."""
    size = len(record_bytes)
    limit = round_bytes(memory_budget_bytes)
    # per rank and destination: the sizes of the records queued, as an array, and how far each is consumed
    order = [np.argsort(np.asarray(d) % size, kind="stable") for d in dests]
    per_dest: list[list[np.ndarray]] = []
    positions: list[list[np.ndarray]] = []  # input positions of each destination's records
    prefix_in: list[np.ndarray] = []  # bytes of the first i + 1 input records
    for r in range(size):
        d = np.asarray(dests[r]) % size
        sizes = np.asarray(record_bytes[r], dtype=np.int64)
        if len(sizes) and int(sizes.max()) > limit:
            raise too_large_error(int(sizes.max()), memory_budget_bytes)
        sorted_d = d[order[r]]
        cuts = np.searchsorted(sorted_d, np.arange(size + 1))
        per_dest.append([np.cumsum(sizes[order[r][cuts[j] : cuts[j + 1]]]) for j in range(size)])
        positions.append([order[r][cuts[j] : cuts[j + 1]] for j in range(size)])
        prefix_in.append(np.cumsum(sizes))
    taken = np.zeros(size, dtype=np.int64)  # input records read so far, per rank
    sent = np.zeros((size, size), dtype=np.int64)  # records sent, per (sender, receiver)
    trace = RoundTrace([], [], [])
    for round_no in range(1 << 40):
        wants = np.zeros((size, size), dtype=np.int64)
        heads = np.zeros((size, size), dtype=np.int64)
        more = False
        for r in range(size):
            n_in = len(record_bytes[r])
            # 1. fill: read input until the queues hold `limit` bytes (what was sent no longer counts)
            sent_bytes = sum(_cum_between(per_dest[r][j], 0, int(sent[r, j])) for j in range(size))
            if n_in:
                reach = int(np.searchsorted(prefix_in[r], sent_bytes + limit, side="left")) + 1
                taken[r] = max(int(taken[r]), min(reach, n_in))
            queued = [int(np.searchsorted(positions[r][j], taken[r])) for j in range(size)]
            pend = [_cum_between(per_dest[r][j], int(sent[r, j]), queued[j]) for j in range(size)]
            for j in range(size):
                wants[r, j] = pend[j]
                if pend[j]:
                    heads[r, j] = _cum_between(per_dest[r][j], sent[r, j], sent[r, j] + 1)
            more = more or taken[r] < n_in or sum(pend) > 0
        if not more:
            return trace
        # 2-3. ask and grant: receiver j sees column j
        grants = np.stack(
            [grant_round(wants[:, j], heads[:, j], limit, round_no) for j in range(size)], axis=1
        )
        # 4. send the longest prefix of whole records within each grant
        received = np.zeros(size, dtype=np.int64)
        messages = 0
        for r in range(size):
            for j in range(size):
                if not grants[r, j]:
                    continue
                cum = per_dest[r][j]
                base = int(cum[sent[r, j] - 1]) if sent[r, j] else 0
                k = prefix_records(cum, int(sent[r, j]), base, int(grants[r, j]))
                moved = int(cum[sent[r, j] + k - 1]) - base
                sent[r, j] += k
                received[j] += moved
                messages += 1
        trace.received.append(received)
        trace.messages.append(messages)
        trace.sent_bytes.append(int(received.sum()))
    raise AssertionError("unreachable")


def _cum_between(cum: np.ndarray, lo: int, hi: int) -> int:
    """Bytes of records lo..hi-1 given their cumulative sizes."""
    if hi <= lo:
        return 0
    return int(cum[hi - 1]) - (int(cum[lo - 1]) if lo else 0)


# --- stats and outputs ----------------------------------------------------------------------------


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


class _StatsMixin:
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
    def bytes(self) -> int:
        """Bytes received (the name callers used before :class:`ShuffleStats`)."""
        return self.stats.bytes_received

    @property
    def rounds(self) -> int:
        return self.stats.rounds

    @property
    def spilled_runs(self) -> int:
        return self.stats.spilled_runs


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


class ShuffleOutput(_StatsMixin, Iterator[tuple[bytes, bytes]]):
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


def _private_dir(spill_dir: Path | None) -> Path:
    base = spill_dir if spill_dir is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"shuffle-{os.getpid()}-", dir=base))


# --- the bytes path -------------------------------------------------------------------------------


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
            self.tmpdir = _private_dir(self.spill_dir)
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
    try:
        sent, received, rounds, largest = _exchange(comm, outbox, receiver.add, limit, memory_budget_bytes)
    except BaseException:
        if receiver.tmpdir is not None:
            shutil.rmtree(receiver.tmpdir, ignore_errors=True)
        raise
    stats = ShuffleStats(
        receiver.records, outbox.records_sent, sent, received, rounds, len(receiver.runs), largest
    )
    return ShuffleOutput(receiver.memory, receiver.runs, receiver.tmpdir, stats)


# --- the exchange, shared by both paths ----------------------------------------------------------


def _exchange(
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
    """Row i of ``send`` goes to rank i; row i of the result came from rank i."""
    send = np.ascontiguousarray(send, dtype=np.int64)
    if comm.Get_size() == 1:
        return send.copy()
    recv = np.empty_like(send)
    comm.Alltoall(send, recv)
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


# --- the numpy path: fixed-width records, whole batches at a time ---------------------------------


def _check_dtype(dtype: np.dtype, order_fields: Sequence[str]) -> None:
    if dtype.names is None:
        raise TypeError(f"shuffle_array takes a structured dtype (named fields), got {dtype}")
    if dtype.hasobject:
        raise TypeError(f"shuffle_array takes fixed-width records; dtype {dtype} holds Python objects")
    unknown = [f for f in order_fields if f not in dtype.names]
    if unknown:
        raise ValueError(
            f"shuffle_array: order_fields {unknown} are not fields of {dtype} (fields: {list(dtype.names)})"
        )
    for name in dtype.names:
        base = dtype.fields[name][0].base
        if base.kind not in "iubSV":
            raise TypeError(
                f"shuffle_array orders rows by integer or byte fields; field {name!r} is {dtype.fields[name][0]}"
            )


def _byte_columns(raw: np.ndarray) -> list[np.ndarray]:
    """(n, w) uint8 rows as big-endian u64 columns, most significant first: their order is bytewise."""
    n, w = raw.shape
    if w % 8:
        padded = np.zeros((n, w + 8 - w % 8), dtype=np.uint8)
        padded[:, :w] = raw
        raw = padded
    cols = np.ascontiguousarray(raw).view(">u8").astype(np.uint64)  # native order: numpy's fast sorts
    return [cols[:, i] for i in range(cols.shape[1])]


def field_u64(rows: np.ndarray, field: str, start: int = 0) -> np.ndarray:
    """Bytes ``start .. start + 8`` of a byte field, as little-endian u64 per row: a ``dest_of`` for rows
    whose key already is a hash (MinHash band keys, shuffle keys), with no Python work per row."""
    raw = np.ascontiguousarray(rows[field]).view(np.uint8).reshape(len(rows), -1)
    if raw.shape[1] < start + 8:
        raise ValueError(f"field {field!r} has {raw.shape[1]} bytes; bytes {start}..{start + 8} do not fit")
    return np.ascontiguousarray(raw[:, start : start + 8]).view("<u8")[:, 0]


def sort_columns(rows: np.ndarray, order_fields: Sequence[str]) -> list[np.ndarray]:
    """The columns that order ``rows``, most significant first: ``order_fields``, then every other field
    in dtype order, so the order is total (rows that compare equal are equal byte for byte in every
    field) and a rank's output never depends on arrival order. Integer fields compare numerically, byte
    fields (``S``, ``V``, ``u1`` arrays) bytewise."""
    names = list(order_fields) + [n for n in rows.dtype.names if n not in order_fields]
    return field_columns(rows, names)


def field_columns(rows: np.ndarray, names: Sequence[str]) -> list[np.ndarray]:
    """The named fields as sortable columns (integers as they are, bytes as big-endian u64 words)."""
    cols: list[np.ndarray] = []
    n = len(rows)
    for name in names:
        field = rows[name]
        ftype = rows.dtype.fields[name][0]
        base = ftype.base
        if base.kind in "SV" or (base.kind == "u" and base.itemsize == 1 and ftype.shape):
            raw = np.ascontiguousarray(field).view(np.uint8).reshape(n, -1)
            cols.extend(_byte_columns(raw))
        elif ftype.shape:
            flat = field.reshape(n, -1)
            cols.extend(flat[:, i] for i in range(flat.shape[1]))
        else:
            cols.append(field.astype(np.uint8) if base.kind == "b" else field)
    return cols


def order_of(cols: Sequence[np.ndarray]) -> np.ndarray:
    """The permutation that sorts rows by ``cols`` (most significant first).

    One ``argsort`` of the first column, then a ``lexsort`` of only the rows that tie on it: keys are
    mostly hashes, so ties are few, and this is 2-4x faster than ``lexsort`` over every column. When
    most rows tie on the first column (a part number that every row of a part shares), one ``lexsort``
    over every column is as fast and needs 24 instead of ~58 bytes of temporaries per row. Rows equal
    in every column may come out in either order: no stage depends on it, since the order they arrive
    in depends on the rank count already."""
    order = np.argsort(cols[0])
    if len(cols) == 1 or len(order) < 2:
        return order
    first = cols[0][order]
    same = first[1:] == first[:-1]
    if not same.any():
        return order
    if 2 * int(np.count_nonzero(same)) > len(same):
        del order, first, same
        return np.lexsort([np.asarray(c) for c in cols[::-1]])
    tied = np.zeros(len(order), dtype=bool)
    tied[1:] |= same
    tied[:-1] |= same
    pos = np.flatnonzero(tied)
    group = np.cumsum(np.concatenate(([True], ~same)))[pos]  # which run of equal first values
    sub = order[pos]
    order[pos] = sub[np.lexsort([np.asarray(c)[sub] for c in cols[:0:-1]] + [group])]
    return order


def sort_rows(rows: np.ndarray, order_fields: Sequence[str]) -> np.ndarray:
    """``rows`` in the shuffle's output order (see :func:`sort_columns`)."""
    if len(rows) < 2:
        return rows
    order = order_of(sort_columns(rows, order_fields))  # the columns are freed before the copy
    return rows[order]


def whole_groups(batches: Iterable[np.ndarray], fields: Sequence[str]) -> Iterator[np.ndarray]:
    """Re-cut sorted batches so that rows with equal ``fields`` are never split between two batches.

    A stage that groups :func:`shuffle_array`'s output (a MinHash bucket, a shard's documents) can then
    treat each batch on its own; a batch grows past the output's batch size only for a group larger than
    it, which the caller holds whole anyway."""
    carry: np.ndarray | None = None
    for batch in batches:
        rows = batch if carry is None or not len(carry) else np.concatenate([carry, batch])
        if not len(rows):
            continue
        cols = field_columns(rows, fields)
        same = np.ones(len(rows), dtype=bool)
        for c in cols:
            same &= c == c[-1]
        start = len(rows) - int(np.argmin(same[::-1])) if not same.all() else 0  # the trailing group
        if start:
            yield rows[:start]
        carry = rows[start:]
    if carry is not None and len(carry):
        yield carry


class _ArrayOutbox:
    """Per-destination queues of row batches: what this rank still has to send."""

    def __init__(
        self,
        batches: Iterable[np.ndarray],
        dtype: np.dtype,
        dest_of: Callable[[np.ndarray], Any],
        size: int,
        limit: int,
    ) -> None:
        self.it = iter(batches)
        self.dtype, self.dest_of, self.size, self.limit = dtype, dest_of, size, limit
        self.chunk_rows = max(1, limit // dtype.itemsize)
        self.current: np.ndarray | None = None
        self.exhausted = False
        self.queues: list[deque[np.ndarray]] = [deque() for _ in range(size)]
        self.rows = np.zeros(size, dtype=np.int64)
        self.records_sent = 0

    def _next_chunk(self) -> np.ndarray | None:
        while self.current is None or not len(self.current):
            try:
                batch = next(self.it)
            except StopIteration:
                return None
            if not isinstance(batch, np.ndarray) or batch.dtype != self.dtype or batch.ndim != 1:
                got = (
                    f"{batch.dtype} with shape {batch.shape}"
                    if isinstance(batch, np.ndarray)
                    else type(batch).__name__
                )
                raise TypeError(f"shuffle_array takes 1-d arrays of dtype {self.dtype}, got {got}")
            self.current = batch
        chunk, self.current = self.current[: self.chunk_rows], self.current[self.chunk_rows :]
        return chunk

    def fill(self) -> None:
        itemsize = self.dtype.itemsize
        while not self.exhausted and int(self.rows.sum()) * itemsize < self.limit:
            chunk = self._next_chunk()
            if chunk is None:
                self.exhausted = True
                break
            dest = np.asarray(self.dest_of(chunk))
            if dest.shape != (len(chunk),) or dest.dtype.kind not in "iu":
                raise TypeError(
                    f"dest_of must return one integer per row, shape ({len(chunk)},); got {dest.dtype} {dest.shape}"
                )
            dest = (dest % self.size).astype(np.intp)
            order = np.argsort(dest, kind="stable")
            counts = np.bincount(dest, minlength=self.size)
            grouped = chunk[order]
            cuts = np.concatenate(([0], np.cumsum(counts)))
            for d in np.flatnonzero(counts):
                self.queues[d].append(grouped[cuts[d] : cuts[d + 1]])
            self.rows += counts

    def wants_and_heads(self) -> tuple[np.ndarray, np.ndarray]:
        itemsize = self.dtype.itemsize
        return self.rows * itemsize, np.where(self.rows > 0, itemsize, 0).astype(np.int64)

    def take(self, grants: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Remove, per peer, as many rows as its grant holds (at least one); return them in rank order as
        one byte buffer, and the bytes per peer."""
        itemsize = self.dtype.itemsize
        take = np.where(grants > 0, np.minimum(self.rows, np.maximum(1, grants // itemsize)), 0)
        send = np.empty(int(take.sum()), dtype=self.dtype)
        at = 0
        for d in np.flatnonzero(take):
            want, got, q = int(take[d]), 0, self.queues[d]
            while got < want:
                head = q.popleft()
                if got + len(head) > want:
                    q.appendleft(head[want - got :])
                    head = head[: want - got]
                send[at : at + len(head)] = head
                at += len(head)
                got += len(head)
        self.rows -= take
        self.records_sent += int(take.sum())
        return send.view(np.uint8), take * itemsize


class _ArrayReceiver:
    """Collects received rows; spills sorted runs when over its budget.

    What it holds between rounds is a list of sorted arrays: a round's remainder is sorted when it
    arrives, while its receive buffer is alive anyway, so that spilling it in a later round (while that
    round's send buffer is alive) is a plain write, with no sort temporaries on top."""

    def __init__(
        self, dtype: np.dtype, order_fields: Sequence[str], budget: int, spill_dir: Path | None
    ) -> None:
        self.dtype, self.order_fields, self.budget, self.spill_dir = dtype, order_fields, budget, spill_dir
        self.tmpdir: Path | None = None
        self.held: list[np.ndarray] = []
        self.held_bytes = 0
        self.runs: list[Path] = []
        self.records = 0

    def make_room(self, nbytes: int) -> None:
        """Spill what is held if a round of up to ``nbytes`` would take it past the threshold: called
        before the round's send and receive buffers are allocated, so that it never shares memory with
        them."""
        if self.held and self.held_bytes + nbytes > self.budget:
            self.spill()

    def add(self, buf: Any) -> None:
        """Spill or hold a round; :meth:`make_room` saw its size (at most) first, so what is held plus it
        fits, or nothing is held."""
        rows = np.frombuffer(buf, dtype=self.dtype)
        self.records += len(rows)
        # a round (a quarter budget) is larger than the threshold: sort and spill it in pieces of that size
        step = max(1, self.budget // self.dtype.itemsize)
        while len(rows) > step:
            self._spill_unsorted(rows[:step])
            rows = rows[step:]
        if len(rows):
            # a sorted copy: a view would keep the whole round's receive buffer alive until the next spill
            self.held.append(rows[order_of(sort_columns(rows, self.order_fields))])
            self.held_bytes += rows.nbytes

    def sorted_held(self) -> np.ndarray:
        """What is held, as one sorted array (sorted again only if it arrived in several rounds)."""
        held = self.held or [np.empty(0, self.dtype)]
        self.held, self.held_bytes = [], 0
        return held[0] if len(held) == 1 else sort_rows(np.concatenate(held), self.order_fields)

    def spill(self) -> None:
        if len(self.held) == 1:
            with self._new_run() as f:
                self.sorted_held().tofile(f)
        else:
            rows = np.concatenate(self.held)
            self.held, self.held_bytes = [], 0
            self._spill_unsorted(rows)

    def _spill_unsorted(self, rows: np.ndarray) -> None:
        """Write ``rows`` as a sorted run, gathered through their sort order a block at a time: a sorted
        copy of the whole would add the threshold again to the peak."""
        order = order_of(sort_columns(rows, self.order_fields))
        step = max(1, _SPILL_WRITE_BYTES // self.dtype.itemsize)
        with self._new_run() as f:
            for start in range(0, len(order), step):
                rows[order[start : start + step]].tofile(f)

    def _new_run(self) -> BinaryIO:
        """The file of the next sorted run, listed in ``runs``."""
        if self.tmpdir is None:
            self.tmpdir = _private_dir(self.spill_dir)
        path = self.tmpdir / f"run-{len(self.runs):06d}.bin"
        self.runs.append(path)
        return open(path, "wb")  # noqa: SIM115 - the caller closes it


class _RunSource:
    """A sorted run read back in blocks: from a raw binary file, or from an array in memory."""

    def __init__(
        self, dtype: np.dtype, block_rows: int, path: Path | None = None, rows: np.ndarray | None = None
    ):
        self.dtype, self.block_rows = dtype, block_rows
        self.rows = rows
        self.file = open(path, "rb", buffering=0) if path is not None else None  # noqa: SIM115 - closed below
        self.total = (path.stat().st_size // dtype.itemsize) if path is not None else len(rows)  # type: ignore[arg-type]
        self.pos = 0

    @property
    def more(self) -> bool:
        return self.pos < self.total

    def next_block(self) -> np.ndarray:
        n = min(self.block_rows, self.total - self.pos)
        if self.file is not None:
            block = np.fromfile(self.file, dtype=self.dtype, count=n)
            if len(block) != n:
                raise OSError(f"spill file {self.file.name} is truncated")
        else:
            block = self.rows[self.pos : self.pos + n]  # type: ignore[index]
        self.pos += n
        if not self.more:
            self.close()
        return block

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def _merge_runs(sources: list[_RunSource], order_fields: Sequence[str]) -> Iterator[np.ndarray]:
    """Merge sorted runs in batches, with no work per row in Python.

    Each step sorts the rows loaded and not yet emitted together with one sentinel per run that has rows
    left on disk (the last row loaded from it): every row before the first sentinel is at or below every
    row not yet loaded, so it is emitted; a run whose loaded rows were all emitted loads its next block.
    The run with the smallest sentinel is always emptied, so every step makes progress."""
    dtype = sources[0].dtype
    pool = np.empty(0, dtype)
    pool_src = np.empty(0, dtype=np.int32)
    last: list[np.ndarray | None] = [None] * len(sources)
    need = list(range(len(sources)))
    while True:
        parts, part_src = [pool], [pool_src]
        for i in need:
            if sources[i].more:
                block = sources[i].next_block()
                parts.append(block)
                part_src.append(np.full(len(block), i, dtype=np.int32))
                last[i] = block[-1:]
        rows, src = np.concatenate(parts), np.concatenate(part_src)
        bounds = [i for i, s in enumerate(sources) if s.more]
        if not bounds:
            if len(rows):
                yield sort_rows(rows, order_fields)
            return
        sentinels = np.concatenate([last[i] for i in bounds])  # type: ignore[misc]
        every = np.concatenate([rows, sentinels])
        is_sentinel = np.concatenate([np.zeros(len(rows), np.uint8), np.ones(len(sentinels), np.uint8)])
        order = order_of([*sort_columns(every, order_fields), is_sentinel])
        first = int(np.argmax(is_sentinel[order]))
        if first:
            yield every[order[:first]]
        rest = order[first:]
        rest = rest[rest < len(rows)]
        pool, pool_src = rows[rest], src[rest]
        left = np.bincount(pool_src, minlength=len(sources))
        need = [i for i in bounds if not left[i]]


class ArrayShuffleOutput(_StatsMixin, Iterator[np.ndarray]):
    """This rank's received rows as sorted numpy batches, plus what the exchange did (``stats``)."""

    def __init__(self, receiver: _ArrayReceiver, memory_budget_bytes: int, stats: ShuffleStats) -> None:
        self.stats = stats
        self._tmpdir = receiver.tmpdir
        self._it = self._batches(receiver, memory_budget_bytes)

    def _batches(self, receiver: _ArrayReceiver, budget: int) -> Iterator[np.ndarray]:
        try:
            memory = receiver.sorted_held()
            dtype = receiver.dtype
            if not receiver.runs:
                step = max(1, _OUT_BATCH_BYTES // dtype.itemsize)
                for i in range(0, len(memory), step):
                    yield memory[i : i + step]
                return
            n_sources = len(receiver.runs) + 1
            # the blocks loaded together take a 32nd of the budget: a merge step needs ~10x that
            block_rows = max(_MIN_MERGE_ROWS, budget // (32 * dtype.itemsize * n_sources))
            sources = [_RunSource(dtype, block_rows, path=p) for p in receiver.runs]
            sources.append(_RunSource(dtype, block_rows, rows=memory))
            try:
                yield from _merge_runs(sources, receiver.order_fields)
            finally:
                for s in sources:
                    s.close()
        finally:
            self._cleanup()


def shuffle_array(
    comm: Any,
    batches: Iterable[np.ndarray],
    *,
    dtype: np.dtype | Any,
    dest_of: Callable[[np.ndarray], Any],
    order_fields: Sequence[str] = (),
    memory_budget_bytes: int = 256 << 20,
    spill_dir: Path | None = None,
) -> ArrayShuffleOutput:
    """Send every row to rank ``dest_of(batch)[i] % comm.size``; return this rank's rows as sorted batches.

    ``batches``: 1-d structured arrays of ``dtype`` (integer and byte fields), any sizes, any number
    (an empty iterable on ranks with nothing to send). ``dest_of(batch)`` returns one non-negative
    integer per row (a hash of the key, say), computed from the row alone so that the owner does not
    depend on the rank count. Output order: ``order_fields``, then the other fields (see
    :func:`sort_columns`). Collective, with the same dtype, ``dest_of`` and budget on every rank."""
    dtype = np.dtype(dtype)
    _check_dtype(dtype, order_fields)
    limit = round_bytes(memory_budget_bytes)
    if dtype.itemsize > limit:
        raise too_large_error(dtype.itemsize, memory_budget_bytes)  # the same on every rank: no collective
    size = comm.Get_size()
    outbox = _ArrayOutbox(batches, dtype, dest_of, size, limit)
    receiver = _ArrayReceiver(
        dtype,
        tuple(order_fields),
        max(memory_budget_bytes // 8, dtype.itemsize),
        Path(spill_dir) if spill_dir is not None else None,
    )
    try:
        sent, received, rounds, largest = _exchange(
            comm, outbox, receiver.add, limit, memory_budget_bytes, receiver.make_room
        )
    except BaseException:
        if receiver.tmpdir is not None:
            shutil.rmtree(receiver.tmpdir, ignore_errors=True)
        raise
    stats = ShuffleStats(
        receiver.records, outbox.records_sent, sent, received, rounds, len(receiver.runs), largest
    )
    return ArrayShuffleOutput(receiver, memory_budget_bytes, stats)
