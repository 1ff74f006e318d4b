"""One job per stage of a run: a retry re-attaches to the job an earlier try left alive instead of
submitting a second one; a job that cannot go on is cancelled and replaced. Real SLURM, jobs that never
start (``--begin=now+600``), found by their comment."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from orchestration.submit import LocalBackend, StageJob, SubmitError, job_comment

pytestmark = pytest.mark.cluster


def stage_job(tmp_path, run_id: str, try_number: int) -> StageJob:
    return StageJob(
        stage="ingest",
        inputs=(str(tmp_path / "in"),),
        out=str(tmp_path / "b" / "stages" / "ingest"),
        config=None,
        log_dir=str(tmp_path / "b" / "logs"),
        ranks=1,
        sbatch_args=("--begin=now+600",),
        comment=job_comment("build_snapshot", run_id, "ingest", try_number),
    )


def queued_with(owner: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "--me", "-h", "-o", "%i|%k"], capture_output=True, text=True, check=True
    ).stdout
    return [
        line.split("|", 1)[0]
        for line in out.splitlines()
        if line.split("|", 1)[1].startswith(owner + " try=")
    ]


def test_a_retry_re_attaches_and_a_stuck_job_is_replaced(services, tmp_path):
    backend = LocalBackend()
    run = f"manual__{uuid.uuid4().hex[:8]}"  # this test's own run: concurrent tests' jobs are not seen
    owner = stage_job(tmp_path, run, 1).owner
    ids: list[str] = []
    try:
        first, how = backend.attach_or_submit(stage_job(tmp_path, run, 1))
        ids.append(first.job_id)
        assert how == "submitted"
        again, how = backend.attach_or_submit(stage_job(tmp_path, run, 2))
        assert again == first and how.startswith(f"re-attached to job {first.job_id}")
        assert queued_with(owner) == [first.job_id]  # one job, however many tries
        other, how = backend.attach_or_submit(stage_job(tmp_path, run + "x", 1))  # another run: its own job
        ids.append(other.job_id)
        assert other.job_id != first.job_id and how == "submitted"
        subprocess.run(["scontrol", "hold", first.job_id], check=True)  # JobHeldUser: waiting never clears it
        third, how = backend.attach_or_submit(stage_job(tmp_path, run, 3))
        ids.append(third.job_id)
        assert third.job_id not in (first.job_id, other.job_id)
        assert how.startswith(f"cancelled job {first.job_id}") and how.endswith("submitted")
        assert queued_with(owner) == [third.job_id]
    finally:
        subprocess.run(["scancel", *ids], capture_output=True)


class ImpatientBackend(LocalBackend):
    """Gives sbatch 2 s to answer, as a client with a short timeout on a busy controller would."""

    def run(self, argv, env=None, timeout=120):
        return super().run(argv, env, 2 if argv[0] == "sbatch" else timeout)


def test_an_sbatch_accepted_after_the_clients_timeout_is_re_attached_not_submitted_again(
    services, tmp_path, monkeypatch
):
    """sbatch answers after the client gave up: the try fails, yet SLURM has the job; the retry finds it."""
    real = subprocess.run(["which", "sbatch"], capture_output=True, text=True, check=True).stdout.strip()
    slow = tmp_path / "bin" / "sbatch"
    slow.parent.mkdir()
    slow.write_text(f'#!/bin/bash\n"{real}" "$@"\nrc=$?\nsleep 6\nexit $rc\n')
    slow.chmod(0o755)
    run = f"manual__{uuid.uuid4().hex[:8]}"
    owner = stage_job(tmp_path, run, 1).owner
    try:
        monkeypatch.setenv("PATH", f"{slow.parent}:{os.environ['PATH']}")
        with pytest.raises(SubmitError, match="timed out"):
            ImpatientBackend().attach_or_submit(stage_job(tmp_path, run, 1))
        monkeypatch.undo()
        accepted = queued_with(owner)
        assert len(accepted) == 1
        retry, how = LocalBackend().attach_or_submit(stage_job(tmp_path, run, 2))
        assert retry.job_id == accepted[0] and how.startswith("re-attached")
        assert queued_with(owner) == accepted  # one job for the stage of this run
    finally:
        subprocess.run(["scancel", *queued_with(owner)], capture_output=True)
