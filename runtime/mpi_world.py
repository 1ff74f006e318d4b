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

from runtime.orphan import die_with_launcher

#: UCX's switch for its memory hooks (UCM's events), read when the MPI library is loaded
UCX_MEM_EVENTS = "UCX_MEM_EVENTS"


def all_ranks_here(env: Mapping[str, str]) -> bool:
    """Whether every rank of the job runs on this host, from what the launcher put in ``env``: Hydra's
    ``mpiexec`` sets the job's size (``PMI_SIZE``) and this host's share (``MPI_LOCALNRANKS``); a rank
    run by hand has neither (a job of one). A launcher that says nothing of the host's share (``srun``
    over PMI-2) is taken to spread the ranks."""
    return env.get("MPI_LOCALNRANKS", "1") == env.get("PMI_SIZE", "1")


def world_comm() -> Any:
    """``MPI.COMM_WORLD``, MPI started (UCX's memory hooks off where every rank is on this host), and
    this rank set to die with its launcher (runtime.orphan)."""
    if all_ranks_here(os.environ):
        os.environ.setdefault(UCX_MEM_EVENTS, "no")
    from mpi4py import MPI

    die_with_launcher()
    return MPI.COMM_WORLD
