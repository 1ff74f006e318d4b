"""The shuffle's round plan: pure functions, the same in the MPI exchange and in :func:`simulate_rounds`.

A round is fill, ask, grant, send. Every rank queues up to :func:`round_bytes` (a quarter of its budget,
at most 1 GiB, independent of the rank count); each receiver grants at most that in total, split among
the senders that want to send to it (:func:`grant_round`: admitted in an order that rotates with the
round, each granted its first record, the rest water-filled); each sender sends, per peer, the longest
prefix of whole records within its grant (:func:`prefix_records`). So a receiver never gets more than a
round's bytes, whatever the rank count and the key skew; a record larger than a round is a one-line
error naming ``memory_budget_mb`` (:func:`too_large_error`). docs/dedup.md (*The shuffle's rounds*).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: a round never exceeds this, so that Alltoallv's 32-bit counts and displacements cannot overflow
_MAX_ROUND_BYTES = 1 << 30


def round_bytes(memory_budget_bytes: int) -> int:
    """What one rank may queue to send, and receive, in one round: a quarter of its budget (at most 1 GiB).

    Independent of the rank count on purpose: dividing by it would make messages shrink as 1/P^2."""
    return max(1, min(memory_budget_bytes // 4, _MAX_ROUND_BYTES))


def old_round_bytes(memory_budget_bytes: int, size: int) -> int:
    """A round of ``budget / (4 P)`` per rank: what the benchmark and a test compare :func:`round_bytes` with."""
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
