"""Submitting a stage job and finding out how it ended: one module, three backends.

* ``local``   ``sbatch`` on this host (this host is a SLURM login node).
* ``ssh``     ``sbatch`` on a login node reached through the SSH provider's hook, with the host, user
              and key from an Airflow Connection.
* ``mpiexec`` the same job script run without SLURM, detached, under the ``mpiexec`` beside the
              project's Python (the embedded demo; no cluster needed).

Every command is an argument vector. The local backends execute it without a shell; the ssh backend
joins it with :func:`shlex.join` for the remote shell, so a path with spaces, quotes, ``;`` or ``$(...)``
reaches the job as the same literal string and is never executed.

A job's state comes from ``scontrol show job`` while SLURM remembers it (``MinJobAge``), then from
``sacct`` (slurmdbd) or ``sacct -c`` (``jobcomp/filetxt``, no slurmdbd). The state logic is written once
(:func:`_slurm_status_steps`) and driven either synchronously (in a task) or asynchronously (in the
triggerer, which must not block its event loop).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shlex
import signal
import subprocess
import uuid
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corpus.pipeline import PIPELINE

#: The repository this module belongs to: where ``sbatch/`` and the default venv live on this host.
PROJECT_ROOT = Path(__file__).resolve().parents[2]

#: Finished well.
SUCCESS_STATES = frozenset({"COMPLETED"})
#: Finished badly: the task fails and shows the job's log tail.
FAILURE_STATES = frozenset({
    "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
    "PREEMPTED", "REVOKED", "SPECIAL_EXIT",
})
#: Everything else (PENDING, RUNNING, REQUEUED, COMPLETING, SUSPENDED, ...) is still on its way.

BACKENDS = ("local", "ssh", "mpiexec")


class SubmitError(RuntimeError):
    """A job could not be submitted or its state could not be read; the message says why."""


@dataclass(frozen=True)
class StageJob:
    """One stage of one build as a job: what ``sbatch sbatch/<stage>.sbatch ARGS`` is given."""

    stage: str
    inputs: tuple[str, ...]
    out: str
    config: str | None
    log_dir: str
    ranks: int = 2
    root: str = str(PROJECT_ROOT)  # the repository on the machine that runs the job
    python: str = ""  # the job's interpreter; "" = ROOT/.venv/bin/python
    partition: str = ""
    time_limit: str = ""
    sbatch_args: tuple[str, ...] = ()  # extra sbatch options, e.g. ("--oversubscribe",)
    env: tuple[tuple[str, str], ...] = ()  # extra environment for the job

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.stage):
            raise SubmitError(f"bad stage name {self.stage!r}")
        if self.ranks < 1:
            raise SubmitError(f"ranks must be at least 1, got {self.ranks}")
        for k, _ in self.env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise SubmitError(f"bad environment variable name {k!r}")

    @property
    def job_name(self) -> str:
        return f"corpus-{self.stage}"

    def script_argv(self) -> list[str]:
        """A planned stage's own job script (what a person submits); any other stage through the
        generic ``sbatch/stage.sbatch STAGE``."""
        if self.stage in PIPELINE:
            return [f"{self.root}/sbatch/{self.stage}.sbatch"]
        return [f"{self.root}/sbatch/stage.sbatch", self.stage]

    @property
    def interpreter(self) -> str:
        return self.python or f"{self.root}/.venv/bin/python"

    def stage_args(self) -> list[str]:
        """The arguments of ``python -m hpc_jobs.<stage>`` (and of the job script)."""
        args = ["--in", *self.inputs, "--out", self.out]
        if self.config:
            args += ["--config", self.config]
        return args

    def job_env(self) -> dict[str, str]:
        return {"CORPUS_ROOT": self.root, "CORPUS_PYTHON": self.interpreter, "CORPUS_RANKS": str(self.ranks),
                **dict(self.env)}

    def log_template(self) -> str:
        """sbatch's ``--output`` pattern: ``%j`` is the job id; a literal ``%`` in the path is doubled."""
        return f"{self.log_dir.replace('%', '%%')}/{self.stage}-%j.log"

    def sbatch_argv(self) -> list[str]:
        argv = ["sbatch", "--parsable", f"--job-name={self.job_name}", f"--ntasks={self.ranks}",
                f"--output={self.log_template()}", f"--chdir={self.root}"]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        if self.time_limit:
            argv.append(f"--time={self.time_limit}")
        argv += [*self.sbatch_args, *self.script_argv(), *self.stage_args()]
        return argv


def expand_log_template(template: str, job_id: str) -> str:
    """The file sbatch writes for ``--output=template`` (``%j`` -> id, ``%%`` -> ``%``)."""
    return re.sub(r"%%|%j", lambda m: "%" if m.group() == "%%" else job_id, template)


def parse_job_id(sbatch_stdout: str) -> str:
    """``sbatch --parsable`` prints ``ID`` or ``ID;CLUSTER``."""
    lines = [ln.strip() for ln in sbatch_stdout.strip().splitlines() if ln.strip()]
    m = re.fullmatch(r"(\d+)(;\S+)?", lines[-1]) if lines else None
    if not m:
        raise SubmitError(f"sbatch printed no job id: {sbatch_stdout!r}")
    return m.group(1)


@dataclass(frozen=True)
class Submitted:
    """A submitted job: what the waiter needs to follow it (JSON-serialisable for triggers and XCom)."""

    backend: str
    job_id: str
    log_path: str
    stage: str
    conn_id: str = ""

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Submitted:
        return cls(**d)


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: str  # SLURM's word, e.g. COMPLETED, CANCELLED (a suffix like "by 0" is dropped)
    exit_code: str = ""  # "rc:signal" as SLURM prints it
    reason: str = ""
    source: str = ""  # which command told us

    @property
    def done(self) -> bool:
        return self.state in SUCCESS_STATES or self.state in FAILURE_STATES

    @property
    def ok(self) -> bool:
        return self.state in SUCCESS_STATES

    def describe(self) -> str:
        extra = f", exit code {self.exit_code}" if self.exit_code else ""
        why = f", reason {self.reason}" if self.reason and self.reason != "None" else ""
        return f"job {self.job_id} {self.state}{extra}{why} (from {self.source})"


def normalise_state(word: str) -> str:
    """``CANCELLED by 0`` (sacct with slurmdbd) and ``CANCELLED`` (sacct -c) are the same state."""
    return word.strip().split()[0].rstrip("+").upper() if word.strip() else ""


def parse_scontrol(out: str, job_id: str) -> JobStatus | None:
    """``scontrol show job -o ID``: one line of ``Key=Value`` pairs."""
    for line in out.splitlines():
        if not re.search(rf"(^|\s)JobId={re.escape(job_id)}(\s|$)", line):
            continue
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        return JobStatus(job_id, normalise_state(fields.get("JobState", "")), fields.get("ExitCode", ""),
                         fields.get("Reason", ""), "scontrol")
    return None


def parse_sacct(out: str, job_id: str, source: str) -> JobStatus | None:
    """``sacct [-c] -n -P -j ID -o JobID,State,ExitCode``: the last record of the job itself wins
    (a requeued job has one record per run)."""
    found = None
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and parts[0] == job_id:
            found = JobStatus(job_id, normalise_state(parts[1]), parts[2], "", source)
    return found


@dataclass
class Result:
    rc: int
    out: str
    err: str


Steps = Generator[list[str], Result, JobStatus]


def _slurm_status_steps(job_id: str) -> Steps:
    """Ask scontrol, then sacct, then sacct -c; yields commands, receives their results."""
    r = yield ["scontrol", "show", "job", "-o", job_id]
    if r.rc == 0 and (st := parse_scontrol(r.out, job_id)):
        return st
    tried = [f"scontrol: {(r.err or r.out).strip()}"]
    for argv, source in ((["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode"], "sacct"),
                         (["sacct", "-c", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode"], "sacct -c")):
        r = yield argv
        if r.rc == 0 and (st := parse_sacct(r.out, job_id, source)):
            return st
        tried.append(f"{source}: {(r.err or r.out).strip() or 'no record'}")
    raise SubmitError(f"SLURM does not know job {job_id} ({'; '.join(tried)})")


def _drive(steps: Steps, run: Callable[[list[str]], Result]) -> JobStatus:
    try:
        argv = next(steps)
        while True:
            argv = steps.send(run(argv))
    except StopIteration as stop:
        return stop.value


async def _adrive(steps: Steps, arun: Callable[[list[str]], Coroutine[Any, Any, Result]]) -> JobStatus:
    try:
        argv = next(steps)
        while True:
            argv = steps.send(await arun(argv))
    except StopIteration as stop:
        return stop.value


class Backend:
    """Runs commands where the jobs are submitted; everything else is built on :meth:`run`."""

    name = ""
    conn_id = ""

    def run(self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> Result:
        raise NotImplementedError

    async def arun(self, argv: list[str], timeout: float = 120) -> Result:
        return await asyncio.to_thread(self.run, argv, None, timeout)

    def check(self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> str:
        r = self.run(argv, env, timeout)
        if r.rc != 0:
            raise SubmitError(f"{shlex.join(argv)} failed on {self.name} (exit {r.rc}): {(r.err or r.out).strip()}")
        return r.out

    # -- jobs -------------------------------------------------------------------------------------
    def submit(self, job: StageJob) -> Submitted:
        self.check(["mkdir", "-p", "--", job.log_dir])
        job_id = parse_job_id(self.check(job.sbatch_argv(), env=job.job_env()))
        return Submitted(self.name, job_id, expand_log_template(job.log_template(), job_id), job.stage, self.conn_id)

    def status(self, job: Submitted) -> JobStatus:
        return _drive(_slurm_status_steps(job.job_id), self.run)

    async def astatus(self, job: Submitted) -> JobStatus:
        return await _adrive(_slurm_status_steps(job.job_id), self.arun)

    def cancel(self, job: Submitted) -> None:
        self.check(["scancel", job.job_id])

    # -- files on the cluster's filesystem --------------------------------------------------------
    def read_text(self, path: str) -> str:
        return self.check(["cat", "--", path])

    def tail(self, path: str, lines: int = 60) -> str:
        r = self.run(["tail", "-n", str(lines), "--", path])
        return r.out if r.rc == 0 else f"(no log at {path}: {r.err.strip()})"


def _local_run(argv: list[str], env: dict[str, str] | None, timeout: float) -> Result:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
    except FileNotFoundError as e:
        return Result(127, "", str(e))
    except subprocess.TimeoutExpired:
        return Result(124, "", f"timed out after {timeout:.0f}s")
    return Result(p.returncode, p.stdout, p.stderr)


class LocalBackend(Backend):
    """``sbatch`` and friends on this host, without a shell."""

    name = "local"

    def run(self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> Result:
        return _local_run(argv, env, timeout)

    async def arun(self, argv: list[str], timeout: float = 120) -> Result:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            return Result(124, "", f"timed out after {timeout:.0f}s")
        return Result(proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))


def remote_command(argv: list[str], env: dict[str, str] | None = None) -> str:
    """The one string the remote shell gets: every word quoted, the environment set through ``env``."""
    prefix = ["env", *(f"{k}={v}" for k, v in sorted((env or {}).items()))] if env else []
    return shlex.join([*prefix, *argv])


class SSHBackend(Backend):
    """Commands on a login node over SSH: the SSH provider's hooks, host/user/key from a Connection."""

    name = "ssh"

    def __init__(self, conn_id: str) -> None:
        self.conn_id = conn_id
        self._hook: Any = None

    def hook(self) -> Any:
        if self._hook is None:
            from airflow.providers.ssh.hooks.ssh import SSHHook

            self._hook = SSHHook(ssh_conn_id=self.conn_id, cmd_timeout=None)
        return self._hook

    def run(self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> Result:
        command = remote_command(argv, env)
        with self.hook().get_conn() as client:
            rc, out, err = self.hook().exec_ssh_client_command(client, command, get_pty=False, environment=None,
                                                               timeout=timeout)
        return Result(rc, out.decode(errors="replace"), err.decode(errors="replace"))

    async def arun(self, argv: list[str], timeout: float = 120) -> Result:
        from airflow.providers.ssh.hooks.ssh import SSHHookAsync

        rc, out, err = await SSHHookAsync(ssh_conn_id=self.conn_id).run_command(remote_command(argv), timeout=timeout)
        return Result(rc, out if isinstance(out, str) else out.decode(errors="replace"),
                      err if isinstance(err, str) else err.decode(errors="replace"))


class MpiexecBackend(Backend):
    """The job script without SLURM: run detached under mpiexec; its exit status lands in ``LOG.rc``.

    Job ids are ``mpiexec-<hex>``; state is RUNNING while the process lives, then COMPLETED or FAILED
    from the recorded exit status (CANCELLED after :meth:`cancel`).
    """

    name = "mpiexec"

    def run(self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> Result:
        return _local_run(argv, env, timeout)

    def submit(self, job: StageJob) -> Submitted:
        Path(job.log_dir).mkdir(parents=True, exist_ok=True)
        job_id = f"mpiexec-{uuid.uuid4().hex[:12]}"
        log = expand_log_template(job.log_template(), job_id)
        wrapper = 'bash "$0" "$@" >>"$CORPUS_JOB_LOG" 2>&1; echo $? >"$CORPUS_JOB_LOG.rc.tmp"; mv -f "$CORPUS_JOB_LOG.rc.tmp" "$CORPUS_JOB_LOG.rc"'
        proc = subprocess.Popen(
            ["bash", "-c", wrapper, *job.script_argv(), *job.stage_args()],
            cwd=job.root, env={**os.environ, **job.job_env(), "CORPUS_JOB_LOG": log},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        Path(log + ".pid").write_text(str(proc.pid))
        return Submitted(self.name, job_id, log, job.stage)

    def _pid(self, job: Submitted) -> int | None:
        p = Path(job.log_path + ".pid")
        return int(p.read_text()) if p.exists() else None

    def status(self, job: Submitted) -> JobStatus:
        rc_file = Path(job.log_path + ".rc")
        if rc_file.exists():
            rc = int(rc_file.read_text().strip() or 1)
            cancelled = Path(job.log_path + ".cancelled").exists()
            state = "COMPLETED" if rc == 0 else ("CANCELLED" if cancelled else "FAILED")
            return JobStatus(job.job_id, state, f"{rc}:0", "", "mpiexec")
        pid = self._pid(job)
        if pid is not None and _process_alive(pid):
            return JobStatus(job.job_id, "RUNNING", "", "", "mpiexec")
        if Path(job.log_path + ".cancelled").exists():
            return JobStatus(job.job_id, "CANCELLED", "", "cancelled", "mpiexec")
        return JobStatus(job.job_id, "FAILED", "", "the job's process vanished without an exit status", "mpiexec")

    async def astatus(self, job: Submitted) -> JobStatus:
        return self.status(job)

    def cancel(self, job: Submitted) -> None:
        pid = self._pid(job)
        Path(job.log_path + ".cancelled").touch()
        if pid is not None and _process_alive(pid):
            os.killpg(pid, signal.SIGTERM)

    def read_text(self, path: str) -> str:
        return Path(path).read_text()


def _process_alive(pid: int) -> bool:
    """Alive and not a zombie (a finished child nobody reaped yet is not running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def backend_for(name: str, conn_id: str = "") -> Backend:
    if name == "local":
        return LocalBackend()
    if name == "ssh":
        if not conn_id:
            raise SubmitError("the ssh backend needs an Airflow Connection id (e.g. slurm_login)")
        return SSHBackend(conn_id)
    if name == "mpiexec":
        return MpiexecBackend()
    raise SubmitError(f"unknown backend {name!r}; backends: {', '.join(BACKENDS)}")
