"""The k-th smallest of values spread over ranks, exactly, with no rank holding more than its own.

Each rank passes its values sorted. Every round the ranks propose the middle of what each has left
(weighted by how much), the weighted median of the proposals is the pivot, and one count of the values
below and equal to it on every rank says on which side the k-th lies: at least a quarter of what is
left goes each round, so ``O(log n)`` rounds of ``O(ranks)`` small messages, after which the last few
candidates (``gather_at`` at most, on all ranks together) are gathered. Values are anything numpy
sorts and ``searchsorted`` compares alike (numbers, dates, object arrays of ``bytes`` or ``str``).
The version step's quantiles use it (docs/versions.md, "The version step on N ranks").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: at most this many candidates left on all ranks together: gathered to every rank and picked there
GATHER_AT = 4096


@dataclass(frozen=True)
class Kth:
    """The k-th smallest value, a rank holding it and its position in that rank's sorted values."""

    value: Any
    rank: int
    position: int


def _weighted_median(proposals: list[tuple[Any, int]]) -> Any:
    """The proposal at which half the weight (the values left behind each) is reached."""
    ordered = sorted(proposals, key=lambda p: p[0])
    total = sum(w for _, w in ordered)
    seen = 0
    for value, weight in ordered:
        seen += weight
        if 2 * seen >= total:
            return value
    return ordered[-1][0]


def _gathered(comm: Any, values: np.ndarray, lo: int, hi: int, k: int) -> Kth:
    """The k-th of the candidates left on every rank, picked from all of them (few, by then)."""
    pieces = comm.allgather((lo, values[lo:hi]))
    candidates = [(v, r, start + i) for r, (start, part) in enumerate(pieces) for i, v in enumerate(part)]
    candidates.sort(key=lambda c: c[0])  # stable: equal values in rank order
    value, rank, position = candidates[k]
    return Kth(value, rank, position)


def kth_smallest(comm: Any, values: np.ndarray, k: int, gather_at: int = GATHER_AT) -> Kth:
    """The ``k``-th (0-based) smallest of the union of every rank's ``values`` (each rank's sorted
    ascending). Collective: every rank calls it with the same ``k``; every rank gets the same answer.
    :class:`ValueError` when ``k`` is not below the number of values."""
    lo, hi = 0, len(values)
    while True:
        left = sum(comm.allgather(hi - lo))
        if not 0 <= k < left:
            raise ValueError(f"k = {k} outside the {left} values left")
        if left <= gather_at:
            return _gathered(comm, values, lo, hi, k)
        proposal = (values[(lo + hi) // 2], hi - lo) if hi > lo else None
        pivot = _weighted_median([p for p in comm.allgather(proposal) if p is not None])
        below = lo + int(np.searchsorted(values[lo:hi], pivot, side="left"))
        upto = lo + int(np.searchsorted(values[lo:hi], pivot, side="right"))
        counts = comm.allgather((below - lo, upto - below))
        n_below = sum(b for b, _ in counts)
        n_equal = sum(e for _, e in counts)
        if k < n_below:
            hi = below
        elif k < n_below + n_equal:
            owner = next(r for r, (_, e) in enumerate(counts) if e > 0)
            return Kth(pivot, owner, comm.bcast(below, root=owner))
        else:
            k -= n_below + n_equal
            lo = upto
