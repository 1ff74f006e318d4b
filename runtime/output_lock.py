"""One writer per directory: a lock file, made atomically, that names the process writing it.

A retried Airflow task, a second DAG run with the same ``out``, an ``sbatch`` by hand or a second
``corpus build`` can start a second writer while the first still runs. The lock's body (job, host, pid,
a random token) is written whole under a unique name and ``link()``-ed to ``.writer.lock``: the link
either creates the name or fails, atomically, on NFS too. A lock whose writer is gone is stale; the
right to remove it is itself taken by ``link()`` (``.writer.lock.break.<token>``), so of N processes
that judged one stale lock exactly one removes it, and a newer lock is never removed. Liveness that
cannot be told is respected. Once taken, temporary files of dead writers are swept. A process may take
a lock it holds again (nested). docs/orchestration.md (*One writer per directory*).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
#: a takeover in progress (another process holds the right to remove the stale lock): how long to wait
#: for it before the lock is judged again
BREAK_WAIT_S = 10.0
#: the temporary names writers give files and directories before renaming them in (``.NAME.tmp.PID``,
#: ``.NAME.PID.tmp``, ``.NAME.link.PID``, ``.NAME.tmp.PID.RANDOM``, ``.NAME.old.PID.RANDOM``): the pid
TEMPORARY = re.compile(r"^\..+?\.(?:(?:tmp|link|old)\.(\d+)(?:\.[0-9a-f]+)?|(\d+)\.tmp)$")


class LockHeld(RuntimeError):
    """Another live writer holds the directory."""


@dataclass(frozen=True)
class Writer:
    job_id: str
    host: str
    pid: int
    since: str
    #: random, one per lock taken: what tells two bodies apart (a pid or an inode is reused)
    token: str = ""
    #: ``SLURM_RESTART_COUNT``: a requeued job's new run has a higher one than the run it replaces
    restart: int = 0

    @classmethod
    def me(cls) -> Writer:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        env = os.environ
        restart = int(env["SLURM_RESTART_COUNT"]) if env.get("SLURM_RESTART_COUNT", "").isdigit() else 0
        return cls(
            env.get("SLURM_JOB_ID", ""), socket.gethostname(), os.getpid(), now, secrets.token_hex(8), restart
        )

    def describe(self) -> str:
        job = f"job {self.job_id}" if self.job_id else "a process"
        return f"{job} on host {self.host} (pid {self.pid}) since {self.since}"

    def body(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()


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
    """Whether the lock's writer may still be writing (True when it cannot be told). Another job lives
    as long as SLURM says; of ``me``'s own job, the run a requeue replaced is gone, and a writer of the
    same run (two runs inside one allocation share the job id) lives as long as its process."""
    if w.job_id and w.job_id != me.job_id:
        alive = job_alive(w.job_id)
        if alive is not None:
            return alive
    elif w.job_id and w.restart < me.restart:
        return False
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


#: the locks this process holds: resolved directory -> (its pid, the body, how many times taken)
_HELD: dict[Path, tuple[int, Writer, int]] = {}


def acquire(
    out_dir: Path,
    me: Writer,
    log: Callable[[str], None],
    job_alive: Callable[[str], bool | None] = slurm_job_alive,
    sweep_skip: tuple[str, ...] = (),
) -> None:
    """Take the directory's lock for ``me``, or raise :class:`LockHeld` naming its holder; then remove
    the temporaries of dead writers under it (not below the subdirectories ``sweep_skip``)."""
    path = Path(out_dir) / WRITER_LOCK
    mine = _write_new(path, me, "new")
    try:
        while not _link(mine, path):
            held_bytes = _read_bytes(path)
            if held_bytes is None:
                continue  # released meanwhile: link again
            held = _parse(held_bytes)
            if held is not None and writer_alive(held, me, job_alive):
                raise LockHeld(
                    f"{path.parent} is being written by {held.describe()}; a second writer would corrupt "
                    f"it. Wait for that job, or cancel it; if it is known to be gone, remove {path}"
                )
            if _break(path, held_bytes, held, me, job_alive):
                whose = f" held by {held.describe()}" if held is not None else ""
                log(f"took over the {'stale' if held else 'unreadable'} writer lock of {path.parent}{whose}")
    finally:
        mine.unlink(missing_ok=True)
    _fsync_dir(path.parent)
    sweep_temporaries(path.parent, me, job_alive, sweep_skip)


def _break(
    path: Path, judged: bytes, held: Writer | None, me: Writer, job_alive: Callable[[str], bool | None]
) -> bool:
    """Remove the stale lock ``path`` if it still has the body ``judged``, holding the right to (the
    link ``.writer.lock.break.<its token>``); whether this process removed it. A breaker of a dead
    process (killed mid-takeover) is removed as a stale lock is."""
    token = held.token if held is not None and held.token else _digest(judged)
    breaker = path.with_name(f"{path.name}.break.{token}")
    right = _write_new(path, me, "breaking")
    try:
        deadline = time.monotonic() + BREAK_WAIT_S
        while not _link(right, breaker):
            other = _read_bytes(breaker)
            if other is None:
                continue
            owner = _parse(other)
            if owner is None or not writer_alive(owner, me, job_alive):
                _break(breaker, other, owner, me, job_alive)  # its taker died mid-takeover
            elif time.monotonic() > deadline:  # never broken by force: a slow taker would remove ours
                raise LockHeld(
                    f"{owner.describe()} is taking over the stale writer lock of {path.parent} and has not "
                    f"finished in {BREAK_WAIT_S:.0f} s; if it is known to be gone, remove {breaker}"
                )
            else:
                time.sleep(0.005)
            if _read_bytes(path) != judged:
                return False  # the other taker removed it: link again
        try:
            if _read_bytes(path) != judged:
                return False  # removed (and perhaps taken) since it was judged: nothing to break
            # only the holder of the right removes a lock with this body: what is there is the judged one
            path.unlink(missing_ok=True)
            return True
        finally:
            if _read_bytes(breaker) == right.read_bytes():
                breaker.unlink(missing_ok=True)
    finally:
        right.unlink(missing_ok=True)


def release(out_dir: Path, me: Writer) -> None:
    """Remove the lock if it is still ``me``'s (a writer that took it over keeps it)."""
    path = Path(out_dir) / WRITER_LOCK
    if _read_bytes(path) == me.body():
        path.unlink(missing_ok=True)


@contextmanager
def holding(
    out_dir: Path,
    log: Callable[[str], None],
    sweep_skip: tuple[str, ...] = (),
    job_alive: Callable[[str], bool | None] = slurm_job_alive,
) -> Iterator[Writer]:
    """The directory's lock held for the block (raises :class:`LockHeld`); taken again by the process
    that holds it, it is held until the outermost block ends."""
    key = Path(out_dir).resolve()
    held = _HELD.get(key)
    if held is not None and held[0] == os.getpid():
        _HELD[key] = (held[0], held[1], held[2] + 1)
        try:
            yield held[1]
        finally:
            pid, w, n = _HELD[key]
            _HELD[key] = (pid, w, n - 1)
        return
    me = Writer.me()
    acquire(out_dir, me, log, job_alive, sweep_skip)
    _HELD[key] = (me.pid, me, 1)
    try:
        yield me
    finally:
        _HELD.pop(key, None)
        release(out_dir, me)


def sweep_temporaries(
    directory: Path,
    me: Writer,
    job_alive: Callable[[str], bool | None] = slurm_job_alive,
    skip: tuple[str, ...] = (),
) -> list[Path]:
    """Remove what killed writers left under ``directory`` (whose lock this process holds): temporary
    files and directories (:data:`TEMPORARY`) of processes of this host that no longer run, and lock
    bodies and takeover rights of writers that are gone; returns what it removed."""
    removed = []
    for root, dirs, files in os.walk(directory):
        if Path(root) == Path(directory):
            dirs[:] = [d for d in dirs if d not in skip]
        for name in [*dirs, *files]:
            p = Path(root) / name
            if name.startswith(f"{WRITER_LOCK}."):
                w = _parse(_read_bytes(p) or b"")
                dead = w is not None and w != me and not writer_alive(w, me, job_alive)
            else:
                m = TEMPORARY.match(name)
                dead = m is not None and not process_alive(int(m.group(1) or m.group(2)))
            if dead:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
                removed.append(p)
        dirs[:] = [d for d in dirs if (Path(root) / d).exists()]
    return removed


def _write_new(path: Path, me: Writer, what: str) -> Path:
    """``me``'s complete body under a name of its own beside ``path`` (fsynced: a link of it is whole)."""
    tmp = path.with_name(f"{path.name}.{what}.{me.token or secrets.token_hex(8)}")
    with open(tmp, "wb") as f:
        f.write(me.body())
        f.flush()
        os.fsync(f.fileno())
    return tmp


def _link(src: Path, dst: Path) -> bool:
    """``link(src, dst)``, exclusive: whether it made ``dst``. Judged by ``src``'s link count, as on NFS
    a retried LINK can report EEXIST for the link it made."""
    before = os.stat(src).st_nlink
    try:
        os.link(src, dst)
    except FileExistsError:
        pass
    return os.stat(src).st_nlink > before


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _parse(body: bytes) -> Writer | None:
    try:
        return Writer(**json.loads(body))
    except (ValueError, TypeError):
        return None


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:16]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
