"""A rank whose launcher is killed with SIGKILL ends, instead of spinning in an MPI call forever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT, mpiexec

#: rank 0 works (sleeps) outside MPI; rank 1 waits for it in a broadcast, polling, as a stage's ranks wait
#: for a slow one; each writes its pid to a file once it is set up
PROGRAM = """
import os, sys, time
sys.path.insert(0, sys.argv[2])
from mpi4py import MPI
from runtime.orphan import die_with_launcher
if sys.argv[1] == "guarded":
    assert die_with_launcher()
comm = MPI.COMM_WORLD
pid_file = f"{sys.argv[3]}/rank{comm.Get_rank()}.pid"
with open(pid_file + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(pid_file + ".tmp", pid_file)
if comm.Get_rank() == 0:
    time.sleep(120)
comm.bcast(None, root=0)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def launch_and_kill_launcher(tmp_path: Path, mode: str) -> list[int]:
    """Start 2 ranks, SIGKILL mpiexec and its proxy once both ranks run; the ranks' pids."""
    program = tmp_path / "ranks.py"
    program.write_text(PROGRAM)
    proc = subprocess.Popen(
        [mpiexec(), "-n", "2", sys.executable, str(program), mode, str(ROOT), str(tmp_path)]
    )
    pids = [tmp_path / f"rank{r}.pid" for r in range(2)]
    deadline = time.monotonic() + 120
    while not all(p.exists() for p in pids):
        assert time.monotonic() < deadline and proc.poll() is None, "the ranks did not start"
        time.sleep(0.1)
    ranks = [int(p.read_text()) for p in pids]
    proxies = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert proxies, "no proxy under mpiexec"
    for pid in [*map(int, proxies), proc.pid]:  # the proxy first: it would end the ranks on mpiexec's death
        os.kill(pid, signal.SIGKILL)
    proc.wait()
    return ranks


def test_ranks_end_when_their_launcher_is_killed(tmp_path):
    ranks = launch_and_kill_launcher(tmp_path, "guarded")
    deadline = time.monotonic() + 30
    while any(alive(p) for p in ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(p) for p in ranks), "a rank outlived its launcher"


def test_without_the_guard_a_waiting_rank_is_left_behind(tmp_path):
    """What the guard is for (and proof that the check above can fail)."""
    ranks = launch_and_kill_launcher(tmp_path, "bare")
    try:
        time.sleep(2)
        assert all(alive(p) for p in ranks)
    finally:
        for pid in ranks:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
