"""Running a job's ranks on this machine: ``mpiexec -n N COMMAND``, its lines passed on to stderr.

The ranks' lines pass as they come (:func:`runtime.logline.passed_on`: with ``CORPUS_LOG_JSON=1`` a line
that is not a JSON object is wrapped in one). On Ctrl-C the job is stopped (the ranks end silently,
``mpiexec`` is asked, then made to) and whatever it prints while stopping is dropped: the command says
once that it was interrupted (:class:`Interrupted`), and a rerun resumes from the checkpoints.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

from corpus.model.errors import UserError
from runtime.logline import passed_on

#: seconds given to a stopping job at each step: on its own (the terminal's Ctrl-C reached every rank),
#: after SIGINT to ``mpiexec``, after SIGKILL
STOP_WAIT_S = 3.0


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a job, or a build, that resumes where it stopped: the message says so."""

    def __init__(self, message: str = "interrupted; rerun the same command to resume") -> None:
        super().__init__(message)


def mpiexec_path() -> str:
    """The MPI launcher beside this interpreter (the PyPI ``mpich`` wheel's hydra), else on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if not found:
        raise UserError("mpiexec not found: install the project (`make venv`) so the mpich wheel provides it")
    return found


def launch(command: list[str], ranks: int, what: str) -> None:
    """``mpiexec -n RANKS COMMAND`` on this machine (a job of ``hpc_jobs``); its output goes to stderr.
    A failed job is a one-line :class:`UserError` (its ranks said why, once, above it)."""
    if ranks < 1:
        raise UserError(f"--ranks must be at least 1, got {ranks}")
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    proc = subprocess.Popen(
        [mpiexec_path(), "-n", str(ranks), *command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            sys.stderr.write(passed_on(line.rstrip("\n"), what) + "\n")
            sys.stderr.flush()
        proc.wait()
    except KeyboardInterrupt:
        stop(proc)
        raise Interrupted() from None
    if proc.returncode != 0:
        raise UserError(f"{what} failed with exit status {proc.returncode} (its log is above)")


def stop(proc: subprocess.Popen) -> None:
    """End an interrupted job, its output dropped: waited for, then SIGINT to ``mpiexec`` (which passes
    it to the ranks), then SIGKILL."""
    for sig in (None, signal.SIGINT, signal.SIGKILL):
        if sig is not None:
            with suppress(ProcessLookupError):
                proc.send_signal(sig)
        try:
            proc.communicate(timeout=STOP_WAIT_S)
            return
        except subprocess.TimeoutExpired:
            continue
