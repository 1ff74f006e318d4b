"""Airflow standalone (scheduler, triggerer, API server) on PostgreSQL, started by
scripts/airflow_standalone.sh as `make airflow` starts it: a run triggered through the REST API and
one triggered from the UI in headless Chromium, running at the same time, both build the snapshot; a
waiting task marked failed through the REST API cancels its job."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from corpus.model.stages import PIPELINE
from orchestration.deployment import DEFAULT_SBATCH_OPTIONS
from tests.conftest import ROOT
from tests.orchestration.conftest import PG_PORT, snapshot_id

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
PASSWORD = "corpus-test-Pw1"
#: job-state polls of the deferred tasks: not within seconds of the deferral on a loaded machine, where
#: the scheduler may still be handling it (apache/airflow#71172)
POLL = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    """The REST API v2 with a token of the admin user."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.token = self.call("POST", "/auth/token", {"username": "admin", "password": PASSWORD})[
            "access_token"
        ]

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        req = urllib.request.Request(
            self.base + path,
            method=method,
            data=json.dumps(body).encode() if body else None,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        if getattr(self, "token", None):
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read() or b"{}")

    def wait_run(self, run_id: str, timeout: float = 1200) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.call("GET", f"/api/v2/dags/build_snapshot/dagRuns/{run_id}")["state"]
            if state in ("success", "failed"):
                return state
            time.sleep(2)
        raise AssertionError(f"run {run_id} still not finished after {timeout}s")

    def failed_tasks(self, run_id: str) -> list[str]:
        tis = self.call("GET", f"/api/v2/dags/build_snapshot/dagRuns/{run_id}/taskInstances")[
            "task_instances"
        ]
        return [f"{t['task_id']}: {t['state']}" for t in tis if t["state"] not in ("success",)]

    def snapshot_id(self, run_id: str) -> str:
        x = self.call(
            "GET",
            f"/api/v2/dags/build_snapshot/dagRuns/{run_id}/taskInstances/snapshot/xcomEntries/snapshot_id",
        )
        return x["value"] if isinstance(x["value"], str) else json.dumps(x["value"])


def copy_of(build: Path, dest: Path) -> Path:
    """A copy of a complete build without its last stage: that stage runs for real, the rest is
    checked and found complete (stages are idempotent)."""
    shutil.copytree(build, dest)
    shutil.rmtree(dest / "stages" / PIPELINE[-1])
    shutil.rmtree(dest / "logs")
    return dest


@pytest.fixture(scope="module")
def standalone(services, ssh_build, small_inputs, tmp_path_factory):
    """One standalone server for the module, its metadata in a fresh PostgreSQL database."""
    home = tmp_path_factory.mktemp("standalone")
    db = f"corpus_test_{os.getpid()}"
    psql = ["psql", "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", "postgres", "-qc"]
    subprocess.run([*psql, f'DROP DATABASE IF EXISTS "{db}"'], check=True, capture_output=True)
    ui_build = copy_of(ssh_build, home / "ui build")
    port = free_port()
    env = {
        **os.environ,
        "CORPUS_AIRFLOW_HOME": str(home / "airflow"),
        "CORPUS_AIRFLOW_PORT": str(port),
        "CORPUS_AIRFLOW_DB": db,
        "CORPUS_AIRFLOW_PASSWORD": PASSWORD,
        "CORPUS_RETRY_DELAY_S": "2",
        # only build_snapshot is unpaused (below): the other DAGs' runs (contamination_check's, triggered
        # by each build's version event) are not what this module tests and would compete for the CPUs
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        # the DAG files do not change during the module: parsed once, not every 30 s (each round ~5 s of CPU)
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
        # this site lets a run defer its jobs' start (the mark-failed test holds a job queued with it)
        "CORPUS_DEPLOYMENT": json.dumps({"sbatch_options": [*DEFAULT_SBATCH_OPTIONS, "--begin"]}),
        # what a run triggered from the UI form gets without editing it
        "CORPUS_DAG_DEFAULTS": json.dumps(
            {
                "backend": "ssh",
                "inputs": [str(p) for p in small_inputs],
                "out": str(ui_build),
                "poll_interval": POLL,
                "sbatch_args": ["--oversubscribe"],
            }
        ),
    }
    log = open(home / "standalone.log", "w")
    proc = subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "airflow_standalone.sh")],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        health = {}
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=10) as r:
                    health = json.loads(r.read())
                if all(
                    health.get(c, {}).get("status") == "healthy"
                    for c in ("metadatabase", "scheduler", "triggerer", "dag_processor")
                ):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(2)
        else:
            raise AssertionError(
                f"standalone never became healthy ({health}):\n{(home / 'standalone.log').read_text()[-3000:]}"
            )
        api = Api(base)
        while time.monotonic() < deadline:
            try:
                if not api.call("PATCH", "/api/v2/dags/build_snapshot", {"is_paused": False})["is_paused"]:
                    break
            except urllib.error.HTTPError:  # not parsed yet
                pass
            time.sleep(2)
        yield {"base": base, "api": api, "ui_build": ui_build, "home": home}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        subprocess.run([*psql, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'], capture_output=True)


def test_the_login_is_required(standalone):
    req = urllib.request.Request(standalone["base"] + "/api/v2/dags", headers={"Accept": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code in (401, 403)


def test_a_run_triggered_through_the_rest_api_and_one_from_the_ui_both_build_the_snapshot(
    standalone, ssh_build, small_inputs, reference, artifacts_dir
):
    """Both ways a person starts a build, at once (the REST run goes on while the UI is driven): each
    run succeeds and gives the embedded build's snapshot id."""
    from playwright.sync_api import sync_playwright

    api: Api = standalone["api"]
    base = standalone["base"]
    # a Param of the wrong type is refused before anything runs
    with pytest.raises(urllib.error.HTTPError) as e:
        api.call(
            "POST",
            "/api/v2/dags/build_snapshot/dagRuns",
            {"logical_date": None, "dag_run_id": "bad-ranks", "conf": {"ranks": "many"}},
        )
    assert e.value.code == 400
    rest_out = copy_of(ssh_build, standalone["home"] / "rest build")
    rest_run = "rest-api-test"
    conf = {
        "backend": "local",
        "inputs": [str(p) for p in small_inputs],
        "out": str(rest_out),
        "poll_interval": POLL,
        "sbatch_args": ["--oversubscribe"],
    }
    api.call(
        "POST",
        "/api/v2/dags/build_snapshot/dagRuns",
        {"logical_date": None, "dag_run_id": rest_run, "conf": conf},
    )
    before = {r["dag_run_id"] for r in api.call("GET", "/api/v2/dags/build_snapshot/dagRuns")["dag_runs"]}
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
            ],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(base + "/")
        page.get_by_role("textbox").first.fill("admin")
        page.locator("input[type=password]").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: "login" not in url, timeout=60_000)
        page.goto(f"{base}/dags/build_snapshot")
        page.get_by_role("button", name="Trigger").first.wait_for(timeout=60_000)
        page.wait_for_timeout(2000)
        page.screenshot(path=str(artifacts_dir / "airflow-build_snapshot-dag.png"), full_page=True)
        page.get_by_role("button", name="Trigger").first.click()
        dialog = page.get_by_role("dialog")
        dialog.wait_for(timeout=30_000)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(artifacts_dir / "airflow-build_snapshot-trigger-form.png"))
        dialog.get_by_role("button", name="Trigger").last.click()
        deadline = time.monotonic() + 60
        new = set()
        while not new and time.monotonic() < deadline:
            new = {
                r["dag_run_id"] for r in api.call("GET", "/api/v2/dags/build_snapshot/dagRuns")["dag_runs"]
            } - before
            time.sleep(1)
        assert len(new) == 1, "the UI's Trigger button started no run"
        ui_run = new.pop()
        assert api.wait_run(ui_run) == "success", api.failed_tasks(ui_run)
        page.goto(f"{base}/dags/build_snapshot/runs/{ui_run}")
        page.wait_for_timeout(3000)
        page.screenshot(path=str(artifacts_dir / "airflow-build_snapshot-run.png"), full_page=True)
        browser.close()
    assert api.snapshot_id(ui_run).strip('"') == reference == snapshot_id(standalone["ui_build"])
    assert api.wait_run(rest_run) == "success", api.failed_tasks(rest_run)
    assert api.snapshot_id(rest_run).strip('"') == reference == snapshot_id(rest_out)


def slurm_jobs_of(run_id: str) -> list[str]:
    """Ids of the queued or running jobs whose comment names the DAG run (job_comment)."""
    out = subprocess.run(["squeue", "-h", "-o", "%i|%k"], capture_output=True, text=True, check=True).stdout
    return [
        i
        for i, _, comment in (line.partition("|") for line in out.splitlines())
        if f" run={run_id} " in comment
    ]


def test_marking_a_waiting_task_failed_through_the_rest_api_cancels_its_job(standalone, small_inputs):
    """The job of a deferred task must not outlive the task: a user who marks it failed (or clears it)
    frees the allocation, or a later retry would run beside it (the trigger's on_kill cancels it)."""
    api: Api = standalone["api"]
    run_id = "mark-failed-test"
    conf = {
        "backend": "local",
        "inputs": [str(p) for p in small_inputs],
        "out": str(standalone["home"] / "marked"),
        "poll_interval": POLL,
        "sbatch_args": ["--oversubscribe", "--begin=now+3600"],
    }
    api.call(
        "POST",
        "/api/v2/dags/build_snapshot/dagRuns",
        {"logical_date": None, "dag_run_id": run_id, "conf": conf},
    )
    ti = f"/api/v2/dags/build_snapshot/dagRuns/{run_id}/taskInstances/{PIPELINE[0]}.submit"
    deadline = time.monotonic() + 300
    state, jobs = None, []
    running = False  # a triggerer runs the task's trigger: only it can cancel the job (its on_kill)
    while time.monotonic() < deadline and not (state == "deferred" and jobs and running):
        time.sleep(2)
        got = api.call("GET", ti)
        state, jobs = got["state"], slurm_jobs_of(run_id)
        running = bool((got.get("trigger") or {}).get("triggerer_id"))
    assert state == "deferred" and len(jobs) == 1 and running, (
        f"the first stage never waited on one queued job in a triggerer: {state}, {jobs}, {running}"
    )
    time.sleep(POLL + 2)  # past the trigger's first poll: it is running, not just assigned
    api.call("PATCH", ti, {"new_state": "failed"})
    deadline = time.monotonic() + 300  # the triggerer cancels the trigger, whose cleanup scancels the job
    while slurm_jobs_of(run_id) and time.monotonic() < deadline:
        time.sleep(2)
    assert not slurm_jobs_of(run_id), f"job {jobs[0]} still queued after its task was marked failed"
    shown = subprocess.run(["scontrol", "-o", "show", "job", jobs[0]], capture_output=True, text=True).stdout
    assert "JobState=CANCELLED" in shown, shown
    assert api.wait_run(run_id, timeout=120) == "failed"
