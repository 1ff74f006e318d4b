"""The build_snapshot DAG, run by Airflow itself (`airflow dags test`): through real SLURM over real
SSH, killed mid-stage and retried, and embedded (mpiexec backend) -- always the same snapshot id as
`corpus build` of the same inputs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from corpus.model.stages import PIPELINE
from tests.conftest import ROOT
from tests.orchestration.conftest import AIRFLOW, build_conf, failure_lines, snapshot_id

pytestmark = pytest.mark.slow


def stage_manifest(build: Path, stage: str) -> dict:
    m = json.loads((build / "stages" / stage / "manifest.json").read_text())
    m.pop("run_info")
    return m


@pytest.mark.cluster
def test_build_snapshot_over_ssh_and_slurm_gives_the_embedded_snapshot_id(ssh_build, reference):
    assert snapshot_id(ssh_build) == reference
    for stage in PIPELINE:
        logs = list((ssh_build / "logs").glob(f"{stage}-*.log"))
        assert len(logs) == 1, f"{stage}: expected one job, found {logs}"
        assert re.search(rf"stage {stage}: SLURM job \d+ \(run 1, 2 tasks", logs[0].read_text())
        assert stage_manifest(ssh_build, stage)["stage"] == stage
    card = json.loads((ssh_build / "report" / "card.json").read_text())
    assert card  # the build's data card was written
    assert not (ssh_build.parent / "pwned").exists() and not (ROOT / "pwned").exists()


@pytest.mark.cluster
def test_a_stage_job_killed_with_scancel_fails_its_task_and_the_retry_completes_it(
    ssh_build, airflow_env, small_inputs, reference, tmp_path
):
    """The first stage is redone from scratch (the rest of the build is already complete); its first
    job is scancel'd while it runs: the task fails with the job's state and log, the retry submits
    the stage again and the snapshot is the same."""
    first = PIPELINE[0]
    out = tmp_path / "build"
    shutil.copytree(ssh_build, out)
    shutil.rmtree(out / "stages" / first)
    shutil.rmtree(out / "logs")
    conf = build_conf("local", small_inputs, out)
    log = tmp_path / "dags-test.log"
    proc = subprocess.Popen(
        [AIRFLOW, "dags", "test", "build_snapshot", "-c", json.dumps(conf)],
        env=airflow_env,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
    )
    killed = None
    deadline = time.monotonic() + 300
    while killed is None and time.monotonic() < deadline and proc.poll() is None:
        for job_log in (out / "logs").glob(f"{first}-*.log") if (out / "logs").exists() else []:
            if f"stage {first}: SLURM job" in job_log.read_text():
                killed = job_log.stem.rsplit("-", 1)[1]
                subprocess.run(["scancel", killed], check=True)
                break
        time.sleep(0.1)
    assert killed, "the first stage's job was never seen running"
    rc = proc.wait(timeout=900)
    text = log.read_text()
    assert rc == 0, f"DAG run failed:\n{failure_lines(text)}"
    assert re.search(rf"stage {first}: job {killed} CANCELLED", text), failure_lines(text)
    assert len(list((out / "logs").glob(f"{first}-*.log"))) == 2  # the retry submitted a new job
    assert stage_manifest(out, first)["outputs"] == stage_manifest(ssh_build, first)["outputs"]
    assert snapshot_id(out) == reference


def test_the_embedded_demo_runs_the_dag_with_mpiexec_and_gives_the_same_snapshot_id(demo_build, reference):
    proc = demo_build.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == f"snapshot_id {reference}"
    assert any(ln.startswith("report ") and Path(ln.split(" ", 1)[1]).exists() for ln in lines)
    logs = (demo_build.out / "logs").glob(f"{PIPELINE[0]}-mpiexec-*.log")
    assert any("mpiexec, 2 ranks" in p.read_text() for p in logs)
