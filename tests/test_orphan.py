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
#: for a slow one; each prints its pid once it is set up
PROGRAM = """
import os, sys, time
sys.path.insert(0, sys.argv[2])
from mpi4py import MPI
from runtime.orphan import die_with_launcher
if sys.argv[1] == "guarded":
    assert die_with_launcher()
comm = MPI.COMM_WORLD
print(os.getpid(), flush=True)
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
        [mpiexec(), "-n", "2", sys.executable, str(program), mode, str(ROOT)],
        stdout=subprocess.PIPE,
        text=True,
    )
    ranks = [int(proc.stdout.readline()) for _ in range(2)]
    proxies = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert proxies, "no proxy under mpiexec"
    for pid in [proc.pid, *map(int, proxies)]:
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
