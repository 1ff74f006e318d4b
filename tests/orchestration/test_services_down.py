"""scripts/services_down.sh cancels this project's jobs only: another job of the same user survives."""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.cluster


def queued(job_id: str) -> bool:
    r = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.strip() in {"PENDING", "RUNNING", "CONFIGURING"}


def test_services_down_cancels_the_projects_jobs_and_leaves_the_users_other_jobs(services):
    # a prefix of this test's own, so that jobs of concurrent test runs on the shared cluster are left alone
    prefix = f"corpus-t{uuid.uuid4().hex[:8]}-"
    submit = ["sbatch", "--parsable", "-n", "1", "--oversubscribe", "-o", "/dev/null", "--wrap", "sleep 300"]
    ours = subprocess.run([*submit, f"--job-name={prefix}ingest"], capture_output=True, text=True, check=True)
    other = subprocess.run([*submit, f"--job-name=not {prefix}x"], capture_output=True, text=True, check=True)
    ours_id, other_id = ours.stdout.strip(), other.stdout.strip()
    try:
        down = subprocess.run(
            ["bash", str(ROOT / "scripts" / "services_down.sh"), "--jobs-only"],
            capture_output=True,
            text=True,
            env={**os.environ, "CORPUS_JOB_PREFIX": prefix},
            timeout=60,
        )
        assert down.returncode == 0, down.stderr
        assert f"cancelled this project's jobs: {ours_id}" in down.stdout
        deadline = time.monotonic() + 20
        while queued(ours_id) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not queued(ours_id)
        assert queued(other_id), "a job that is not the project's was cancelled"
    finally:
        subprocess.run(["scancel", ours_id, other_id], capture_output=True)
