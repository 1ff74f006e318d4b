"""Transient vs final: a dropped SSH connection or an unreachable SLURM daemon is waited out with a
bounded exponential backoff; a job that nobody knows -- scontrol, sacct, sacct -c and its exit record all
asked -- or a refused key fails the task. Fakes of the command runner stand in for the cluster."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import types

import asyncssh
import paramiko
import pytest

from orchestration import operators
from orchestration.submit import (
    JobStatus,
    LocalBackend,
    Result,
    StageJob,
    SubmitError,
    Submitted,
    TransientSubmitError,
    _drive,
    _slurm_status_steps,
    is_transient,
    job_comment,
    transient_result,
)
from tests.orchestration.conftest import scripted

JOB = Submitted("ssh", "9", "/b/logs/ingest-9.log", "ingest", "slurm_login", "/b/logs/ingest-9.exit")


@pytest.mark.parametrize(
    "exc",
    [
        asyncssh.DisconnectError(asyncssh.DISC_BY_APPLICATION, "server shutting down"),
        asyncssh.ConnectionLost("connection lost"),
        asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "open failed"),
        paramiko.SSHException("Error reading SSH protocol banner"),
        paramiko.ssh_exception.NoValidConnectionsError({("127.0.0.1", 22): ConnectionRefusedError()}),
        TimeoutError("timed out"),
        ConnectionRefusedError(111, "refused"),
        EOFError(),
        TransientSubmitError("slurmctld busy"),
    ],
)
def test_connection_drops_and_timeouts_are_transient(exc):
    assert is_transient(exc)


def test_asyncssh_and_paramiko_errors_are_not_oserrors():
    """Why `except OSError` was not enough."""
    for exc in (
        asyncssh.DisconnectError(asyncssh.DISC_BY_APPLICATION, "x"),
        asyncssh.ConnectionLost("x"),
        asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "x"),
        paramiko.SSHException("x"),
    ):
        assert not isinstance(exc, OSError)


@pytest.mark.parametrize(
    "exc",
    [
        asyncssh.PermissionDenied("bad key"),
        asyncssh.HostKeyNotVerifiable("unknown host key"),
        paramiko.AuthenticationException("bad key"),
        SubmitError("SLURM does not know job 9"),
        ValueError("a bug"),
    ],
)
def test_refused_credentials_unknown_jobs_and_bugs_are_final(exc):
    assert not is_transient(exc)


@pytest.mark.parametrize(
    "result,transient",
    [
        (Result(1, "", "slurm_load_jobs error: Socket timed out on send/recv operation"), True),
        (Result(1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"), True),
        (
            Result(1, "", "sacct: error: Problem talking to the database: Resource temporarily unavailable"),
            True,
        ),
        (
            Result(
                1, "", "error: slurm_persist_conn_open_without_init: failed to open persistent connection"
            ),
            True,
        ),
        (Result(124, "", "timed out after 120s"), True),
        (Result(1, "", "slurm_load_jobs error: Invalid job id specified"), False),
        (Result(1, "", "Slurm accounting storage is disabled"), False),
        (Result(0, "", ""), False),
    ],
)
def test_which_slurm_answers_mean_try_again(result, transient):
    assert transient_result(result) is transient


GONE = Result(1, "", "slurm_load_jobs error: Invalid job id specified")
NO_DBD = Result(1, "", "Slurm accounting storage is disabled")
DOWN = Result(1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
NOTHING = Result(0, "", "")
NO_FILE = Result(1, "", "cat: /b/logs/ingest-9.exit: No such file or directory")


def test_a_job_slurm_has_forgotten_is_read_from_its_exit_record():
    run, calls = scripted(
        {
            "scontrol show": GONE,
            "sacct -X": NO_DBD,
            "sacct -c": NOTHING,
            "cat --": Result(0, "job=9 exit=3\n", ""),
        }
    )
    st = _drive(_slurm_status_steps(JOB.job_id, JOB.exit_path), run)
    assert (st.state, st.exit_code, st.source) == ("FAILED", "3:0", "exit record")
    assert calls == ["scontrol show", "sacct -X", "sacct -c", "cat --"]


def test_nobody_knowing_the_job_is_final_only_when_everybody_answered():
    run, _ = scripted({"scontrol show": GONE, "sacct -X": NO_DBD, "sacct -c": NOTHING, "cat --": NO_FILE})
    with pytest.raises(SubmitError, match="does not know job 9") as e:
        _drive(_slurm_status_steps(JOB.job_id, JOB.exit_path), run)
    assert not is_transient(e.value) and "exit record: cat:" in str(e.value)
    # another job's record (ids restart after a cluster's state is wiped) is not this job's
    run, _ = scripted(
        {
            "scontrol show": GONE,
            "sacct -X": NO_DBD,
            "sacct -c": NOTHING,
            "cat --": Result(0, "job=10 exit=0\n", ""),
        }
    )
    with pytest.raises(SubmitError, match="does not know job 9"):
        _drive(_slurm_status_steps(JOB.job_id, JOB.exit_path), run)
    # the controller did not answer: the job may well be running, ask again later
    run, _ = scripted({"scontrol show": DOWN, "sacct -X": NO_DBD, "sacct -c": NOTHING, "cat --": NO_FILE})
    with pytest.raises(TransientSubmitError, match="cannot read the state of job 9 now.*Unable to contact"):
        _drive(_slurm_status_steps(JOB.job_id, JOB.exit_path), run)
    # ... unless another source knows how the job ended
    run, _ = scripted(
        {"scontrol show": DOWN, "sacct -X": NO_DBD, "sacct -c": Result(0, "9|COMPLETED|0:0\n", "")}
    )
    assert _drive(_slurm_status_steps(JOB.job_id, JOB.exit_path), run).state == "COMPLETED"


class FakeBackend:
    """astatus raises the scripted exceptions, then answers; the clock moves only when the trigger sleeps."""

    def __init__(self, script: list):
        self.script = script
        self.polls = 0
        self.cancelled: list[str] = []

    async def astatus(self, job):
        self.polls += 1
        step = self.script.pop(0) if self.script else JobStatus(job.job_id, "RUNNING")
        if isinstance(step, BaseException):
            raise step
        return step

    async def arun(self, argv, timeout=120):
        raise asyncssh.ConnectionLost("lost while reading the log")

    def cancel(self, job):
        self.cancelled.append(job.job_id)


#: wall-clock time at the fake clock's zero
EPOCH = 1_800_000_000.0


def run_trigger(monkeypatch, backend: FakeBackend, **kw) -> tuple[dict, list[float]]:
    clock, sleeps = [0.0], []

    async def sleep(seconds):
        sleeps.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(operators, "backend_for", lambda name, conn_id: backend)
    monkeypatch.setattr(operators.asyncio, "sleep", sleep)
    monkeypatch.setattr(
        operators,
        "time",
        types.SimpleNamespace(
            monotonic=lambda: clock[0],
            time=lambda: EPOCH + clock[0],
            strftime=time.strftime,
            gmtime=time.gmtime,
        ),
    )
    trigger = operators.StageJobTrigger(JOB.to_dict(), poll_interval=30, backoff_base=5, backoff_cap=12, **kw)

    async def first_event():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(first_event()), sleeps


def test_the_trigger_waits_out_connection_drops_with_a_bounded_backoff(monkeypatch):
    done = JobStatus("9", "COMPLETED", "0:0", "", "scontrol")
    backend = FakeBackend(
        [
            asyncssh.ConnectionLost("sshd restarted"),
            asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "open failed"),
            TransientSubmitError("slurmctld restarting"),
            TimeoutError("timed out"),
            JobStatus("9", "RUNNING"),
            asyncssh.DisconnectError(asyncssh.DISC_BY_APPLICATION, "login node rebooting"),
            done,
        ]
    )
    event, sleeps = run_trigger(monkeypatch, backend)
    assert event["ok"] and event["state"] == "COMPLETED"
    assert sleeps == [30, 5, 10, 12, 12, 30, 5]  # exponential, capped, reset by an answer
    assert "not read: ConnectionLost" in event["log_tail"]


def test_the_trigger_gives_up_when_the_failures_outlast_the_budget(monkeypatch):
    backend = FakeBackend([asyncssh.ConnectionLost("down")] * 1000)
    event, sleeps = run_trigger(monkeypatch, backend, transient_budget=100)
    assert not event["ok"] and "tries over" in event["error"] and "ConnectionLost" in event["error"]
    assert sum(sleeps[1:-1]) < 100 <= sum(sleeps[1:]) and backend.polls < 15


def test_a_final_failure_fails_at_once(monkeypatch):
    for exc in (asyncssh.PermissionDenied("bad key"), SubmitError("SLURM does not know job 9")):
        backend = FakeBackend([exc])
        event, sleeps = run_trigger(monkeypatch, backend)
        assert not event["ok"] and backend.polls == 1 and sleeps == [30]
        assert ("PermissionDenied: bad key" in event["error"]) or ("does not know job 9" in event["error"])


def test_looking_up_an_earlier_tries_job_tells_an_unreachable_queue_from_a_failure():
    class Scripted(LocalBackend):
        def __init__(self, result):
            self.result = result

        def run(self, argv, env=None, timeout=120):
            return self.result

    job = StageJob(
        stage="ingest",
        inputs=("/in",),
        out="/b/stages/ingest",
        config=None,
        log_dir="/b/logs",
        comment=job_comment("build_snapshot", "r1", "ingest", 2),
    )
    with pytest.raises(TransientSubmitError, match="squeue failed"):
        Scripted(Result(1, "", "squeue: error: Unable to contact slurm controller")).live_jobs(job)
    with pytest.raises(SubmitError, match="squeue failed") as e:
        Scripted(Result(1, "", "squeue: error: Invalid user")).live_jobs(job)
    assert not is_transient(e.value)
    listing = (
        "12|PENDING|JobHeldUser|corpus dag=build_snapshot run=r1 stage=ingest try=1\n"
        "14|RUNNING|None|corpus dag=build_snapshot run=r1|x stage=ingest try=1\n"
        "15|RUNNING|None|corpus dag=build_snapshot run=r1 stage=ingest try=2\n"
        "16|COMPLETING|None|corpus dag=build_snapshot run=r1 stage=ingest try=3\n"
        "17|CANCELLED|None|corpus dag=build_snapshot run=r1 stage=ingest try=4\n"
    )
    found = Scripted(Result(0, listing, "")).live_jobs(job)
    assert [(st.job_id, st.stuck) for st, _ in found] == [("15", False), ("12", True)]
    with pytest.raises(SubmitError, match="no comment"):
        Scripted(Result(0, listing, "")).attach_or_submit(dataclasses.replace(job, comment=""))


def test_a_worker_retries_a_transient_lookup_with_backoff_and_gives_up_in_bounds(monkeypatch):
    from orchestration import submit

    slept = []
    monkeypatch.setattr(submit.time, "sleep", slept.append)
    answers = [asyncssh.ConnectionLost("x"), TransientSubmitError("busy"), "found"]

    def call():
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    assert submit.retry_transient(call, delays=(1, 2, 4)) == "found" and slept == [1, 2]
    slept.clear()
    with pytest.raises(TransientSubmitError):
        submit.retry_transient(lambda: (_ for _ in ()).throw(TransientSubmitError("down")), delays=(1, 2))
    assert slept == [1, 2]  # three tries, then the failure is the task's
    with pytest.raises(SubmitError, match="unknown"):
        submit.retry_transient(lambda: (_ for _ in ()).throw(SubmitError("unknown")), delays=(1, 2))
    assert slept == [1, 2]  # a final failure is not retried
