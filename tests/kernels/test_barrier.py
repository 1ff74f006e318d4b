"""The sleeping barrier is a barrier: no rank leaves it before the last has arrived; the sleeping
broadcast is a broadcast of the root's value, however late the root comes (the CPU they save a waiting
rank is measured, not tested: docs/scale.md "Shape")."""

from __future__ import annotations

import json

from tests.conftest import run_mpi

LATE_RANK = """
import pathlib, sys, time
from mpi4py import MPI
from mpi_kernels.barrier import sleeping_barrier

comm, out = MPI.COMM_WORLD, pathlib.Path(sys.argv[1])
if comm.rank == comm.size - 1:
    time.sleep(1.0)
    (out / "late").write_text("arrived")
sleeping_barrier(comm)
(out / f"rank{comm.rank}").write_text(str((out / "late").exists()))
"""


def test_no_rank_leaves_the_sleeping_barrier_before_the_last_arrives(tmp_path):
    run_mpi(3, "-c", LATE_RANK, str(tmp_path), timeout=120)
    assert [(tmp_path / f"rank{r}").read_text() for r in range(3)] == ["True"] * 3


LATE_ROOT = """
import json, pathlib, sys, time
from mpi4py import MPI
from mpi_kernels.barrier import sleeping_bcast

comm, out = MPI.COMM_WORLD, pathlib.Path(sys.argv[1])
value = None
if comm.rank == 0:
    time.sleep(1.0)  # the root works its value out alone
    value = {"parts": [3, 1, 2], "from": "rank 0"}
got = sleeping_bcast(comm, value if comm.rank == 0 else {"from": f"rank {comm.rank}"})
(out / f"rank{comm.rank}").write_text(json.dumps(got))
"""


def test_the_sleeping_broadcast_gives_every_rank_the_late_roots_value(tmp_path):
    run_mpi(3, "-c", LATE_ROOT, str(tmp_path), timeout=120)
    got = [json.loads((tmp_path / f"rank{r}").read_text()) for r in range(3)]
    assert got == [{"parts": [3, 1, 2], "from": "rank 0"}] * 3
