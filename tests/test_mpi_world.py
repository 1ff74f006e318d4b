"""A job's ranks start MPI without UCX's memory hooks when every rank is on this host, and with them
when the job spans hosts or the environment asks for them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runtime.mpi_world import UCX_MEM_EVENTS, all_ranks_here
from tests.conftest import ROOT, mpiexec

#: each rank starts MPI as a job does and sends rank 0 what UCX was told, which rank 0 prints
PROGRAM = """
import os
from runtime.mpi_world import world_comm
comm = world_comm()
said = comm.gather(os.environ.get("UCX_MEM_EVENTS"), root=0)
if comm.Get_rank() == 0:
    print(" ".join(said))
"""


@pytest.mark.parametrize(
    "env, here",
    [
        ({"PMI_SIZE": "2", "MPI_LOCALNRANKS": "2", "PMI_RANK": "1"}, True),  # mpiexec -n 2 here
        ({"PMI_SIZE": "8", "MPI_LOCALNRANKS": "4", "PMI_RANK": "5"}, False),  # mpiexec over two nodes
        ({"PMI_SIZE": "4", "PMI_RANK": "3", "SLURM_STEP_NUM_NODES": "1"}, True),  # srun, PMI-2, one node
        ({"PMIX_RANK": "3", "SLURM_STEP_NUM_NODES": "2"}, False),  # srun over PMIx, two nodes
        ({"PMI_SIZE": "8", "PMI_RANK": "3"}, False),  # a launcher that does not say where its ranks are
        ({}, True),  # a rank run by hand: a job of one
    ],
)
def test_a_job_is_on_one_host_when_the_launcher_says_every_rank_is_here(env, here):
    assert all_ranks_here(env) is here


def ranks_say(env: dict[str, str]) -> str:
    proc = subprocess.run(
        [mpiexec(), "-n", "2", sys.executable, "-c", PROGRAM],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_ranks_on_this_host_start_mpi_with_ucx_memory_hooks_off_and_still_talk():
    env = {k: v for k, v in os.environ.items() if k != UCX_MEM_EVENTS}
    assert ranks_say(env) == "no no"


def test_the_environment_keeps_ucx_memory_hooks_on_when_it_says_so():
    env = {**os.environ, UCX_MEM_EVENTS: "yes"}
    assert ranks_say(env) == "yes yes"
