"""The sleeping barrier is a barrier: no rank leaves it before the last has arrived (the CPU it saves a
waiting rank is measured, not tested: docs/scale.md "Shape")."""

from __future__ import annotations

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
