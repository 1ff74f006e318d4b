"""Pre-emption: a stage stops at the next checkpoint boundary when SLURM (or a person) asks it to.

SIGUSR1 (``--signal=USR1@120`` in ``sbatch/stage.sbatch``) or SIGTERM only sets a flag here; the runner
checks it between shards and a global phase between parts, so a stop never leaves a half-written file
that a rerun would trust. When every rank has stopped the job exits with :data:`PREEMPTED_EXIT` and a
rerun resumes from the last completed shard or part. ``CORPUS_FAULT`` (``STEP:N:SIGNAL[:RANK]``, e.g.
``minhash_dedup/buckets:2:KILL:1``; from the environment only, never a config) makes rank RANK send
itself SIGNAL after N parts of that step: a stop or crash at an exact point for the tests. docs/scale.md.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from mpi_kernels.barrier import sleeping_barrier

#: exit status of a stage that stopped on request with every finished shard or part checkpointed
PREEMPTED_EXIT = 75
FAULT_ENV = "CORPUS_FAULT"
_stop = False


class Preempted(Exception):
    """Every rank stopped at a checkpoint boundary because SIGUSR1 or SIGTERM asked it to."""


def _request_stop(signum: int, frame: Any) -> None:
    global _stop
    _stop = True


def install_handlers() -> None:
    """Make SIGUSR1 and SIGTERM request a stop at the next boundary (call once, in the stage's main)."""
    signal.signal(signal.SIGUSR1, _request_stop)
    signal.signal(signal.SIGTERM, _request_stop)


def stop_requested() -> bool:
    return _stop


def any_rank_stopped(comm: Any) -> bool:
    """Collective: did any rank get a stop request? (Every rank must call it at the same point: after
    uneven work, so the ranks first meet in a barrier an early rank sleeps in, not spins.)"""
    from mpi4py import MPI

    sleeping_barrier(comm)
    return bool(comm.allreduce(int(_stop), op=MPI.MAX))


def parse_fault(spec: str) -> tuple[str, int, signal.Signals, int]:
    """``STEP:N:SIGNAL[:RANK]`` -> (step, n, signal, rank); a clear error for anything else."""
    fields = spec.split(":")
    if len(fields) not in (3, 4) or not fields[1].isdigit() or (len(fields) == 4 and not fields[3].isdigit()):
        raise ValueError(
            f"{FAULT_ENV}={spec!r}: expected STEP:N:SIGNAL[:RANK], e.g. exact_dedup/groups:1:KILL"
        )
    if fields[2] not in ("KILL", "USR1"):
        raise ValueError(f"{FAULT_ENV}={spec!r}: SIGNAL must be KILL or USR1")
    sig = signal.SIGKILL if fields[2] == "KILL" else signal.SIGUSR1
    return fields[0], int(fields[1]), sig, int(fields[3]) if len(fields) == 4 else 0


def after_part(step: str, parts_done: int, rank: int) -> None:
    """The fault-injection point: called after each completed part of a global phase's step."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    want_step, n, sig, want_rank = parse_fault(spec)
    if step == want_step and parts_done == n and rank == want_rank:
        os.kill(os.getpid(), sig)
