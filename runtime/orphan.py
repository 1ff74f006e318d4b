"""A rank whose launcher is gone is ended by the kernel, instead of spinning forever in an MPI call.

MPICH's ranks wait by polling, holding the GIL: when ``mpiexec`` and its proxy are killed with SIGKILL
(a tool's timeout, the OOM killer, a node agent), nothing is left to end the ranks, and one waiting in a
collective spins at a full core until someone finds it (seen here: 99 % of a core, SIGTERM ignored, as
a Python handler never runs inside the call). ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` asks Linux to kill
the rank when its parent (the launcher's proxy) exits; what a killed rank leaves is what any killed
rank leaves: its outputs are never published half-written, and a rerun resumes from the checkpoint.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
#: set in a rank's environment by the launchers that start ranks (Hydra's mpiexec, SLURM's srun)
LAUNCHED_ENV = ("PMI_RANK", "PMI_FD", "PMIX_RANK", "SLURM_STEP_ID")


def die_with_launcher() -> bool:
    """Have this rank killed when its parent exits, if an MPI launcher started it (a process run by
    hand is left alone). Returns whether it was set; a parent already gone ends the rank now."""
    if not sys.platform.startswith("linux") or not any(k in os.environ for k in LAUNCHED_ENV):
        return False
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return False
    if parent == 1 or os.getppid() != parent:  # the launcher died before the request was made
        os.kill(os.getpid(), signal.SIGKILL)
    return True
