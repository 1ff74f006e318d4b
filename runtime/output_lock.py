"""One writer per stage directory: a lock file that names the job writing it.

A retried Airflow task, a second DAG run with the same ``out`` or an ``sbatch`` by hand can start a
second job on a stage directory while the first still runs, and two writers would interleave parts and
checkpoints. The runner takes ``<stage>/.writer.lock`` (created exclusively, naming the SLURM job, host,
pid and since when; no output, in no digest) before it writes anything and releases it once the manifest
is written or the stage fails; a second writer is refused with the first one's name. A lock whose writer
is gone is stale and taken over; when liveness cannot be told it is respected. docs/orchestration.md
(*One writer per stage directory*).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from corpus.model.layout import WRITER_LOCK

#: SLURM job states in which a job may still write (``squeue -o %T``)
LIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
    }
)


class LockHeld(RuntimeError):
    """Another live writer holds the stage directory."""


@dataclass(frozen=True)
class Writer:
    job_id: str
    host: str
    pid: int
    since: str

    @classmethod
    def me(cls) -> Writer:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return cls(os.environ.get("SLURM_JOB_ID", ""), socket.gethostname(), os.getpid(), now)

    def describe(self) -> str:
        job = f"job {self.job_id}" if self.job_id else "a process"
        return f"{job} on host {self.host} (pid {self.pid}) since {self.since}"


def slurm_job_alive(job_id: str) -> bool | None:
    """Whether SLURM still runs (or queues) the job; None when SLURM cannot be asked."""
    try:
        proc = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        # squeue answers "Invalid job id specified" for a job it no longer knows: gone
        return False if "invalid job id" in proc.stderr.lower() else None
    return any(state.strip() in LIVE_STATES for state in proc.stdout.splitlines())


def writer_alive(w: Writer, me: Writer, job_alive: Callable[[str], bool | None] = slurm_job_alive) -> bool:
    """Whether the lock's writer may still be writing (True when it cannot be told)."""
    if w.job_id:
        alive = job_alive(w.job_id)
        if alive is not None:
            return alive
    if w.host == me.host:
        return process_alive(w.pid)
    return True


def process_alive(pid: int) -> bool:
    """Whether a process of this host still runs: a zombie does not (a rank killed by MPI_Abort can stay
    one where the init process reaps nothing, and ``kill(pid, 0)`` still succeeds on it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # the state follows the parenthesised command


def acquire(
    out_dir: Path,
    me: Writer,
    log: Callable[[str], None],
    job_alive: Callable[[str], bool | None] = slurm_job_alive,
) -> None:
    """Take the stage directory's lock for ``me``, or raise :class:`LockHeld` naming its holder."""
    path = Path(out_dir) / WRITER_LOCK
    body = json.dumps(asdict(me), sort_keys=True).encode()
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        held = _read(path)
        if held is None or (me.job_id and held.job_id == me.job_id) or not writer_alive(held, me, job_alive):
            tmp = path.with_name(f"{path.name}.{me.pid}")
            tmp.write_bytes(body)
            os.replace(tmp, path)  # a stale lock is replaced whole: a reader sees the old or the new one
            why = (
                "unreadable"
                if held is None
                else ("its own, before a requeue" if me.job_id and held.job_id == me.job_id else "stale")
            )
            log(
                f"took over the {why} writer lock of {path.parent}"
                + ("" if held is None else f" held by {held.describe()}")
            )
            return
        raise LockHeld(
            f"{path.parent} is being written by {held.describe()}; a second writer would corrupt it. "
            f"Wait for that job, or cancel it; if it is known to be gone, remove {path}"
        ) from None
    with os.fdopen(fd, "wb") as f:
        f.write(body)


def release(out_dir: Path, me: Writer) -> None:
    """Remove the lock if it is still ``me``'s (a writer that took it over keeps it)."""
    path = Path(out_dir) / WRITER_LOCK
    if _read(path) == me:
        path.unlink(missing_ok=True)


def _read(path: Path) -> Writer | None:
    try:
        return Writer(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
