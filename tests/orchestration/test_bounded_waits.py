"""Bounded waits: a job may live its time limit x (requeues + 1) plus the queue-wait budget; a job
PENDING for a reason that waiting does not clear is cancelled; a user's mark-failed / clear cancels the
job. The trigger runs against a fake backend; one real held job checks the reason SLURM reports."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from orchestration import operators
from orchestration.submit import JobStatus, LocalBackend, SubmitError, Submitted, slurm_seconds
from tests.orchestration.test_transient import EPOCH, JOB, FakeBackend, run_trigger


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("30", 1800),
        ("5:30", 330),
        ("04:00:00", 14400),
        ("2-0", 172800),
        ("1-02:03", 93780),
        ("1-00:00:01", 86401),
    ],
)
def test_slurm_times(text, seconds):
    assert slurm_seconds(text) == seconds


def test_a_bad_slurm_time_is_refused():
    with pytest.raises(SubmitError, match="not a SLURM time"):
        slurm_seconds("4h")


def test_the_budget_is_every_run_at_its_time_limit_plus_the_queue_wait():
    build = {"time_limit": "01:00:00", "max_requeues": 2, "queue_wait": "30"}
    assert operators.wait_budget(build) == 3 * 3600 + 1800


def test_a_job_past_its_deadline_is_cancelled_and_fails_the_task(monkeypatch):
    backend = FakeBackend([JobStatus("9", "RUNNING")] * 10)
    event, sleeps = run_trigger(monkeypatch, backend, deadline=EPOCH + 100)
    assert (
        not event["ok"]
        and "past its deadline" in event["error"]
        and "the job was cancelled" in event["error"]
    )
    assert backend.cancelled == ["9"] and sum(sleeps) > 100 and len(sleeps) == 4  # 30 s polls: 120 > 100


@pytest.mark.parametrize("reason", ["JobHeldUser", "PartitionTimeLimit", "InvalidAccount"])
def test_a_job_pending_for_a_reason_that_never_clears_fails_naming_it(monkeypatch, reason):
    backend = FakeBackend([JobStatus("9", "PENDING", "", "Priority"), JobStatus("9", "PENDING", "", reason)])
    event, _ = run_trigger(monkeypatch, backend)
    assert not event["ok"] and f"reason {reason}" in event["error"] and backend.cancelled == ["9"]


def test_a_user_killing_the_deferred_task_cancels_the_job(monkeypatch):
    backend = FakeBackend([])
    monkeypatch.setattr(operators, "backend_for", lambda name, conn_id: backend)
    asyncio.run(operators.StageJobTrigger(JOB.to_dict()).on_kill())
    assert backend.cancelled == ["9"]


@pytest.mark.cluster
def test_slurm_reports_a_held_job_as_stuck_and_a_queued_one_not(services, tmp_path):
    backend = LocalBackend()
    ids = []
    try:
        for extra in (["--hold"], ["--begin=now+600"]):
            r = subprocess.run(
                ["sbatch", "--parsable", "-n", "1", "-o", "/dev/null", *extra, "--wrap", "true"],
                capture_output=True,
                text=True,
                check=True,
            )
            ids.append(r.stdout.strip())
        held, later = (backend.status(Submitted("local", i, "/dev/null", "x")) for i in ids)
        assert (held.state, held.reason, held.stuck) == ("PENDING", "JobHeldUser", True)
        assert (later.state, later.stuck) == ("PENDING", False)
    finally:
        subprocess.run(["scancel", *ids], capture_output=True)
