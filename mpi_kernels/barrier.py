"""A barrier a rank waits at asleep, not spinning: MPICH's blocking collectives poll, so a rank that
finishes its share early burns a core in system time until the slowest arrives.

Where the ranks meet after uneven work (the runner after its shards, a global phase after each step, an
exchange's rounds, a value rank 0 works out alone), a rank tests a non-blocking barrier (or the round's
first all-to-all) and sleeps between tests, backing off to :data:`MAX_SLEEP_S`: the collective that
follows finds every rank there and returns at once. docs/scale.md "Shape".
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

T = TypeVar("T")

#: the first and the longest sleep between two tests of the barrier (a late rank's arrival is seen
#: within this, a few times a stage, against the seconds to hours a rank may wait)
FIRST_SLEEP_S = 0.001
MAX_SLEEP_S = 0.01


def sleeping_barrier(comm: Any) -> None:
    """Collective: return when every rank of ``comm`` has called it, sleeping while waiting."""
    wait_asleep(comm.Ibarrier())


def sleeping_bcast(comm: Any, obj: T, root: int = 0) -> T:
    """Collective: ``comm.bcast(obj, root)`` for a value the root works out alone (a listing, a manifest,
    facts summed from parts): the other ranks wait for it asleep, at a barrier, not polling in the
    broadcast for as long as the root works (on P ranks, P - 1 cores' worth of that time)."""
    sleeping_barrier(comm)
    return comm.bcast(obj, root=root)


def wait_asleep(request: Any) -> None:
    """Complete a non-blocking MPI request, sleeping between tests (a collective of small messages,
    whose completion waits on the other ranks' arrival, not on a transfer to drive)."""
    delay = FIRST_SLEEP_S
    while not request.Test():
        time.sleep(delay)
        delay = min(2 * delay, MAX_SLEEP_S)
