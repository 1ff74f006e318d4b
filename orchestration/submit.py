"""Submitting a stage job and finding out how it ended: one module, three backends.

``local`` (``sbatch`` on this host), ``ssh`` (``sbatch`` on a login node through the SSH provider's
hook and an Airflow Connection), ``mpiexec`` (the same job script without SLURM, detached). Every
command is an argument vector: executed without a shell, or joined with :func:`shlex.join` for the
remote one, so no path is ever executed. A job's state comes from ``scontrol``, then ``sacct`` or
``sacct -c``, then the job's exit record; the logic is written once (:func:`_slurm_status_steps`) and
driven synchronously (a task) or asynchronously (the triggerer). :func:`is_transient` tells failures
that say nothing about the job (retried with a bounded backoff) from final ones. See
docs/orchestration.md ("The build_snapshot DAG", "Backends and Connections").
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from corpus.model.stages import PIPELINE
from runtime.output_lock import process_alive

T = TypeVar("T")

#: The repository this module belongs to: where ``sbatch/`` and the default venv live on this host.
PROJECT_ROOT = Path(__file__).resolve().parents[1]

#: Finished well.
SUCCESS_STATES = frozenset({"COMPLETED"})
#: Finished badly: the task fails and shows the job's log tail.
FAILURE_STATES = frozenset(
    {
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
#: Everything else (PENDING, RUNNING, REQUEUED, COMPLETING, SUSPENDED, ...) is still on its way.
#: ... except a job PENDING for one of these reasons: waiting will not clear them (a hold nobody
#: releases, a request over the partition's or the association's limits, an account or QOS it may not
#: use, a dependency that failed), so the waiter cancels the job and fails the task with the reason.
NEVER_CLEARING_REASONS = frozenset(
    {
        "JobHeldUser",
        "JobHeldAdmin",
        "PartitionTimeLimit",
        "PartitionNodeLimit",
        "PartitionConfig",
        "InvalidAccount",
        "InvalidQOS",
        "AccountNotAllowed",
        "BadConstraints",
        "DependencyNeverSatisfied",
        "AssocMaxWallDurationPerJobLimit",
        "QOSMaxWallDurationPerJobLimit",
        "AssocMaxNodesPerJobLimit",
        "QOSMaxNodePerJobLimit",
        "AssocMaxCpuPerJobLimit",
        "QOSMaxCpuPerJobLimit",
    }
)

BACKENDS = ("local", "ssh", "mpiexec")
#: every job of this project is named PREFIX<stage> (scripts/services_down.sh cancels by this prefix)
JOB_PREFIX = os.environ.get("CORPUS_JOB_PREFIX", "corpus-")


class SubmitError(RuntimeError):
    """A job could not be submitted or its state could not be read; the message says why."""


class TransientSubmitError(SubmitError):
    """Nothing answered for now (the controller, the accounting, the login node): ask again later."""


#: what SLURM's commands print when their daemon is unreachable or busy, not when the job is unknown
TRANSIENT_SLURM_MESSAGE = re.compile(
    r"try again|timed out|time out|Unable to contact slurm controller|Connection refused|Connection reset|"
    r"Resource temporarily unavailable|Zero Bytes were transmitted|Transport endpoint|slurm_persist_conn|"
    r"Temporary failure|Slurmctld is not responding|communication connection failure",
    re.IGNORECASE,
)


def transient_result(r: Result) -> bool:
    """A command that failed because something was unreachable: our own timeout (124), ssh's failure to
    connect (255), or a SLURM message that says so."""
    return r.rc != 0 and (r.rc in (124, 255) or bool(TRANSIENT_SLURM_MESSAGE.search(f"{r.err}\n{r.out}")))


#: waits between tries of a lookup that failed transiently in a worker (the trigger has its own budget)
SYNC_BACKOFF_S = (2.0, 4.0, 8.0, 16.0, 32.0)


def retry_transient(call: Callable[[], T], delays: tuple[float, ...] = SYNC_BACKOFF_S) -> T:
    """``call()``, tried again after each of ``delays`` while it fails transiently (:func:`is_transient`).
    Only for what is safe to repeat -- never ``sbatch``: a submission that timed out may have been
    accepted, and the task's retry re-attaches to it instead."""
    for delay in delays:
        try:
            return call()
        except Exception as e:
            if not is_transient(e):
                raise
            time.sleep(delay)
    return call()


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` from running a command says only "not now". asyncssh's DisconnectError,
    ConnectionLost and ChannelOpenError and paramiko's SSHException are not OSError subclasses, so a
    plain ``except OSError`` misses them; a refused key or host key is final, though, since it does not
    heal by waiting."""
    if isinstance(exc, TransientSubmitError):
        return True
    # the SSH libraries' errors exist only where they were imported (the ssh backend, with the [airflow]
    # extra): a runtime-only install never imports them for this
    asyncssh, paramiko = sys.modules.get("asyncssh"), sys.modules.get("paramiko")
    final = [
        *(
            (
                asyncssh.PermissionDenied,
                asyncssh.HostKeyNotVerifiable,
                asyncssh.IllegalUserName,
                asyncssh.ProtocolNotSupported,
                asyncssh.KeyExchangeFailed,
            )
            if asyncssh
            else ()
        ),
        *((paramiko.AuthenticationException, paramiko.BadHostKeyException) if paramiko else ()),
    ]
    if isinstance(exc, tuple(final)):
        return False
    transient = [
        OSError,
        TimeoutError,
        EOFError,
        *((asyncssh.DisconnectError, asyncssh.ChannelOpenError) if asyncssh else ()),
        *((paramiko.SSHException,) if paramiko else ()),
    ]
    return isinstance(exc, tuple(transient))


#: the version step (hpc_jobs/version/, sbatch/version.sbatch) runs as a job like the stages
VERSION_STEP = "version"
#: a build's last step (orchestration/buildsteps.py) as a job, sbatch/finalize.sbatch: the end of the chain
#: ``corpus submit`` queues (orchestration/chain.py)
FINALIZE_STEP = "finalize"


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
    max_requeues: int = 3  # how often the job may requeue itself after SIGUSR1 (sbatch/stage.sbatch)
    comment: str = ""  # who submitted it (job_comment): a retry finds the job of an earlier try by it
    extra_args: tuple[str, ...] = ()  # more arguments of the step, each --name=value (the version step)
    after: str = ""  # the job id this one starts after, once it has COMPLETED (``corpus submit``'s chain)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.stage):
            raise SubmitError(f"bad stage name {self.stage!r}")
        # absolute: a relative path resolves against another directory on the worker than in the job,
        # and an absolute one never starts with "-", so no input is ever read as an option
        for what, paths in (
            ("input", self.inputs),
            ("out", [self.out]),
            ("log_dir", [self.log_dir]),
            ("root", [self.root]),
            ("config", [self.config] if self.config else []),
        ):
            for path in paths:
                if not path.startswith("/"):
                    raise SubmitError(f"{what} must be an absolute path, got {path!r}")
        if self.ranks < 1:
            raise SubmitError(f"ranks must be at least 1, got {self.ranks}")
        if self.after and not re.fullmatch(r"[0-9]+", self.after):
            raise SubmitError(f"a job id is digits, got {self.after!r}")
        for arg in self.extra_args:  # one argv element each, in = form: a value is never read as an option
            if not re.fullmatch(r"--[a-z][a-z-]*=.*", arg, flags=re.DOTALL):
                raise SubmitError(f"extra argument {arg!r} is not --name=value")
        for k, _ in self.env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise SubmitError(f"bad environment variable name {k!r}")

    @property
    def job_name(self) -> str:
        return f"{JOB_PREFIX}{self.stage}"

    def script_argv(self) -> list[str]:
        """A planned stage's (or the version step's) own job script (what a person submits); any other
        stage through the generic ``sbatch/stage.sbatch STAGE``."""
        if self.stage in (*PIPELINE, VERSION_STEP, FINALIZE_STEP):
            return [f"{self.root}/sbatch/{self.stage}.sbatch"]
        return [f"{self.root}/sbatch/stage.sbatch", self.stage]

    @property
    def interpreter(self) -> str:
        return self.python or f"{self.root}/.venv/bin/python"

    def stage_args(self) -> list[str]:
        """The arguments of ``python -m hpc_jobs.<stage>`` or of finalize (and of the job script)."""
        args = [*(["--input", *self.inputs] if self.inputs else []), f"--out={self.out}"]
        if self.config:
            args.append(f"--config={self.config}")
        return [*args, *self.extra_args]

    def job_env(self) -> dict[str, str]:
        """The extra environment first, so it can never replace what the job script is told here."""
        return {
            **dict(self.env),
            "CORPUS_ROOT": self.root,
            "CORPUS_PYTHON": self.interpreter,
            "CORPUS_RANKS": str(self.ranks),
            "CORPUS_LOG_DIR": self.log_dir,
            "CORPUS_MAX_REQUEUES": str(self.max_requeues),
        }

    def exit_record(self, job_id: str) -> str:
        """Where the job script writes ``job=ID exit=RC`` as it ends (sbatch/stage.sbatch)."""
        return f"{self.log_dir}/{self.stage}-{job_id}.exit"

    def log_template(self) -> str:
        """sbatch's ``--output`` pattern: ``%j`` is the job id; a literal ``%`` in the path is doubled."""
        return f"{self.log_dir.replace('%', '%%')}/{self.stage}-%j.log"

    def sbatch_argv(self) -> list[str]:
        """The extra options first: sbatch lets a later option win, so the job's name, size, log and
        working directory set here always do (the DAG also refuses such options in its Params)."""
        argv = [
            "sbatch",
            "--parsable",
            *self.sbatch_args,
            f"--job-name={self.job_name}",
            f"--ntasks={self.ranks}",
            f"--output={self.log_template()}",
            f"--chdir={self.root}",
        ]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        if self.time_limit:
            argv.append(f"--time={self.time_limit}")
        if self.comment:
            argv.append(f"--comment={self.comment}")
        if self.after:  # a failed job cancels the rest of the chain, never leaves it pending forever
            argv += [f"--dependency=afterok:{self.after}", "--kill-on-invalid-dep=yes"]
        argv += [*self.script_argv(), *self.stage_args()]
        return argv

    @property
    def owner(self) -> str:
        """The comment without its try: what every try of the same run's stage has in common."""
        return self.comment.rsplit(" try=", 1)[0]


def job_comment(dag_id: str, run_id: str, stage: str, try_number: int) -> str:
    """The job's SLURM comment: which DAG run, stage and task try submitted it (``squeue -o %k`` shows it)."""
    return f"corpus dag={dag_id} run={run_id} stage={stage} try={try_number}"


def slurm_seconds(limit: str) -> int:
    """Seconds of a SLURM time: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``."""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", limit.strip())
    if not m:
        raise SubmitError(f"not a SLURM time: {limit!r}")
    days, a, b, c = (int(x) if x else None for x in m.groups())
    if days is not None:  # D-H, D-H:M, D-H:M:S
        return ((days * 24 + a) * 60 + (b or 0)) * 60 + (c or 0)
    if c is not None:  # H:M:S
        return (a * 60 + b) * 60 + c
    return a * 60 + (b or 0)  # M or M:S


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
    exit_path: str = ""  # the exit record the job script writes as it ends ("" for the mpiexec backend)

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

    @property
    def stuck(self) -> bool:
        """PENDING for a reason that waiting will not clear."""
        return self.state == "PENDING" and self.reason in NEVER_CLEARING_REASONS

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
        return JobStatus(
            job_id,
            normalise_state(fields.get("JobState", "")),
            fields.get("ExitCode", ""),
            fields.get("Reason", ""),
            "scontrol",
        )
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


def parse_exit_record(out: str, job_id: str) -> JobStatus | None:
    """``job=ID exit=RC``, the line sbatch/stage.sbatch writes as it ends (not when it requeues itself)."""
    m = re.fullmatch(r"job=(\S+) exit=(\d+)", out.strip())
    if not m or m.group(1) != job_id:
        return None
    rc = int(m.group(2))
    return JobStatus(job_id, "COMPLETED" if rc == 0 else "FAILED", f"{rc}:0", "", "exit record")


def _slurm_status_steps(job_id: str, exit_path: str = "") -> Steps:
    """Ask scontrol, then sacct, then sacct -c, then the job's exit record; yields commands, receives
    their results. Only when every source answered and none knows the job is that final; when one could
    not answer (a transient failure), the caller asks again later."""
    sources = [
        (["scontrol", "show", "job", "-o", job_id], "scontrol", lambda out: parse_scontrol(out, job_id)),
        (
            ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode"],
            "sacct",
            lambda out: parse_sacct(out, job_id, "sacct"),
        ),
        (
            ["sacct", "-c", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode"],
            "sacct -c",
            lambda out: parse_sacct(out, job_id, "sacct -c"),
        ),
    ]
    if exit_path:
        sources.append((["cat", "--", exit_path], "exit record", lambda out: parse_exit_record(out, job_id)))
    tried, unreachable = [], []
    for argv, source, parse in sources:
        r = yield argv
        if r.rc == 0 and (st := parse(r.out)):
            return st
        why = f"{source}: {(r.err or r.out).strip() or 'no record'}"
        (unreachable if transient_result(r) else tried).append(why)
    if unreachable:
        raise TransientSubmitError(
            f"cannot read the state of job {job_id} now ({'; '.join(unreachable + tried)})"
        )
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
            raise SubmitError(
                f"{shlex.join(argv)} failed on {self.name} (exit {r.rc}): {(r.err or r.out).strip()}"
            )
        return r.out

    # -- jobs -------------------------------------------------------------------------------------
    def submit(self, job: StageJob) -> Submitted:
        self.check(["mkdir", "-p", "--", job.log_dir])
        job_id = parse_job_id(self.check(job.sbatch_argv(), env=job.job_env()))
        return self.submitted(job, job_id)

    def submitted(self, job: StageJob, job_id: str) -> Submitted:
        return Submitted(
            self.name,
            job_id,
            expand_log_template(job.log_template(), job_id),
            job.stage,
            self.conn_id,
            job.exit_record(job_id),
        )

    def live_jobs(self, job: StageJob) -> list[tuple[JobStatus, str]]:
        """This user's jobs still in the queue that an earlier try of the same run's stage submitted
        (same name, same comment but for the try), with their comments, newest first."""
        r = self.run(["squeue", "--me", "-h", f"--name={job.job_name}", "-o", "%i|%T|%r|%k"])
        if r.rc != 0:
            error = TransientSubmitError if transient_result(r) else SubmitError
            raise error(f"squeue failed on {self.name} (exit {r.rc}): {(r.err or r.out).strip()}")
        found = []
        for line in r.out.splitlines():
            parts = line.strip().split("|", 3)  # the comment is last: a "|" in it stays in it
            if len(parts) != 4 or parts[3].rsplit(" try=", 1)[0] != job.owner:
                continue
            status = JobStatus(parts[0], normalise_state(parts[1]), "", parts[2], "squeue")
            if not status.done and status.state != "COMPLETING":  # an ending job is not one to wait on
                found.append((status, parts[3]))
        return sorted(found, key=lambda f: int(f[0].job_id) if f[0].job_id.isdigit() else -1, reverse=True)

    def attach_or_submit(self, job: StageJob) -> tuple[Submitted, str]:
        """One job per stage of a run: re-attach to the job an earlier try left alive, submit only when
        there is none. A job that cannot go on (PENDING for a reason that never clears) or a second live
        one (two writers of one stage directory) is cancelled. Returns the job and what was done."""
        if not job.comment:  # an empty owner would match any job of that name, a hand-submitted one too
            raise SubmitError(f"job {job.job_name} has no comment (job_comment) to find its earlier tries by")
        keep, notes = None, []
        for status, comment in retry_transient(lambda: self.live_jobs(job)):
            if keep is None and not status.stuck:
                keep = (status, comment)
                continue
            self.cancel(self.submitted(job, status.job_id))
            notes.append(f"cancelled job {status.job_id} ({comment}, {status.state} {status.reason})")
        if keep is None:
            return self.submit(job), "; ".join([*notes, "submitted"])
        status, comment = keep
        return (
            self.submitted(job, status.job_id),
            "; ".join([*notes, f"re-attached to job {status.job_id} ({comment}, {status.state})"]),
        )

    def status(self, job: Submitted) -> JobStatus:
        return _drive(_slurm_status_steps(job.job_id, job.exit_path), self.run)

    async def astatus(self, job: Submitted) -> JobStatus:
        return await _adrive(_slurm_status_steps(job.job_id, job.exit_path), self.arun)

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
        p = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
        )
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
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
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
        from airflow.exceptions import AirflowException

        command = remote_command(argv, env)
        with self.hook().get_conn() as client:
            try:
                rc, out, err = self.hook().exec_ssh_client_command(
                    client, command, get_pty=False, environment=None, timeout=timeout
                )
            except AirflowException as e:  # the hook's only word for its own timeout
                if "timed out" not in str(e):
                    raise
                return Result(124, "", f"timed out after {timeout:.0f}s")
        return _ssh_result(rc, out, err, argv)

    async def arun(self, argv: list[str], timeout: float = 120) -> Result:
        import asyncssh
        from airflow.providers.ssh.hooks.ssh import SSHHookAsync

        # not SSHHookAsync.run_command: it reports a session that ended without an exit status as exit 0
        # with whatever output had arrived, which a state lookup would take for the job's answer
        async with await SSHHookAsync(ssh_conn_id=self.conn_id).get_conn() as conn:
            try:
                r = await conn.run(remote_command(argv), timeout=timeout, check=False)
            except asyncssh.TimeoutError:
                return Result(124, "", f"timed out after {timeout:.0f}s")
        return _ssh_result(r.exit_status, r.stdout or "", r.stderr or "", argv)


def _ssh_result(rc: int | None, out: str | bytes, err: str | bytes, argv: list[str]) -> Result:
    """A remote command's result. One that ended without an exit status -- the login node dropped the
    session, or the command was killed by a signal (paramiko and asyncssh say -1, asyncssh also None) --
    is ssh(1)'s 255, which :func:`transient_result` retries: its output may be cut short."""
    out, err = (x if isinstance(x, str) else x.decode(errors="replace") for x in (out, err))
    if rc is None or rc < 0:
        return Result(255, out, f"{err}the SSH session ended before {argv[0]} did (no exit status)")
    return Result(rc, out, err)


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
            cwd=job.root,
            env={**os.environ, **job.job_env(), "CORPUS_JOB_LOG": log},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        Path(log + ".pid").write_text(str(proc.pid))
        return Submitted(self.name, job_id, log, job.stage)

    def live_jobs(self, job: StageJob) -> list[tuple[JobStatus, str]]:
        """No queue to ask: without SLURM a retry submits again (the embedded demo's case)."""
        return []

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
        if pid is not None and process_alive(pid):
            return JobStatus(job.job_id, "RUNNING", "", "", "mpiexec")
        if Path(job.log_path + ".cancelled").exists():
            return JobStatus(job.job_id, "CANCELLED", "", "cancelled", "mpiexec")
        return JobStatus(
            job.job_id, "FAILED", "", "the job's process vanished without an exit status", "mpiexec"
        )

    async def astatus(self, job: Submitted) -> JobStatus:
        return self.status(job)

    def cancel(self, job: Submitted) -> None:
        pid = self._pid(job)
        Path(job.log_path + ".cancelled").touch()
        if pid is not None and process_alive(pid):
            os.killpg(pid, signal.SIGTERM)

    def read_text(self, path: str) -> str:
        return Path(path).read_text()


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
