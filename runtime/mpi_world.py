"""Where a job's rank starts MPI: every job's ``main`` (the stage runner; the version, export and index
commit jobs) gets its world communicator from :func:`world_comm`, so how MPI starts is decided once.

The mpich wheel's default netmod is UCX, and loading it installs UCX's memory hooks: patching
``mmap``, ``munmap`` and ``brk`` spins in ``sched_yield`` while a rank starts (on this machine about
half the kernel time of a 2-rank launch, 60 of ~125 ms, paid by every stage job), and every later
``munmap`` or ``brk`` of the rank runs through them. They serve UCX's cache of memory registered for
RDMA between nodes; ranks on one host talk through MPICH's shared memory, never UCX, so there they
are off (``UCX_MEM_EVENTS=no``), unless the environment says otherwise. docs/scale.md ("A crawl that
comes as one file") has what this saves in a build.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from runtime.orphan import LAUNCHED_ENV, die_with_launcher

#: UCX's switch for its memory hooks (UCM's events), read when the MPI library is loaded
UCX_MEM_EVENTS = "UCX_MEM_EVENTS"


def all_ranks_here(env: Mapping[str, str]) -> bool:
    """Whether every rank of the job runs on this host, from what the launcher put in ``env``: Hydra's
    ``mpiexec`` sets this host's share of the ranks (``MPI_LOCALNRANKS``) and the job's size
    (``PMI_SIZE``); ``srun`` (PMI-2 or PMIx) the step's node count (``SLURM_STEP_NUM_NODES``); another
    launcher is taken to spread the ranks; a rank run by hand is a job of one."""
    if "MPI_LOCALNRANKS" in env:
        return env["MPI_LOCALNRANKS"] == env.get("PMI_SIZE")
    if any(k in env for k in LAUNCHED_ENV):
        return env.get("SLURM_STEP_NUM_NODES") == "1"
    return True


def world_comm() -> Any:
    """``MPI.COMM_WORLD``, MPI started (UCX's memory hooks off where every rank is on this host), and
    this rank set to die with its launcher (runtime.orphan)."""
    if all_ranks_here(os.environ):
        os.environ.setdefault(UCX_MEM_EVENTS, "no")
    from mpi4py import MPI

    die_with_launcher()
    return MPI.COMM_WORLD
