"""The build_version and refresh_optouts DAGs: a selection refused before any job, and an opt-out list
that becomes a new version only when it changed (real `airflow dags test`, mpiexec backend). A version
made by build_version equal to the CLI's: tests/orchestration/test_contamination_dag.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corpus.model.errors import UserError
from orchestration.deployment import Deployment
from orchestration.operators import version_job
from tests.conftest import ROOT
from tests.loader.snapshot_factory import write_id_snapshot
from tests.orchestration.conftest import dags_test, failure_lines
from tests.orchestration.test_params import load_dag_module, trigger


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    """A small snapshot with its metadata tables (hosts a/b.example.org, c.example.net)."""
    root = tmp_path_factory.mktemp("version-dags") / "snapshot"
    write_id_snapshot(root, {"code": 2, "web": 3})
    return root


def test_build_version_refuses_a_bad_selection_in_prepare(snapshot):
    """What the prepare task runs (a real run failing there: tests/orchestration/test_params.py; a run
    that makes a version: the asset-triggered test of tests/orchestration/test_contamination_dag.py)."""
    module = load_dag_module("build_version")
    conf = {"build": str(snapshot), "selection_toml": "min_qualty = 0.2", "backend": "mpiexec"}
    with pytest.raises(UserError, match=r"unknown key\(s\) min_qualty"):
        module.resolve_step(trigger(module.PARAMS, conf), "r", Deployment())


def test_refresh_optouts_makes_a_version_only_when_the_list_changed(airflow_env, snapshot, tmp_path):
    (tmp_path / "optout.txt").write_text("a.example.org\n")
    (tmp_path / "sel.toml").write_text('exclude_hosts_file = "optout.txt"\n')
    versions = tmp_path / "versions"
    conf = {
        "build": str(snapshot),
        "selection": str(tmp_path / "sel.toml"),
        "versions_root": str(versions),
        "backend": "mpiexec",
        "poll_interval": 1,
    }

    def run(tag: str) -> str:
        proc = dags_test(airflow_env, conf, tmp_path / f"{tag}.log", dag="refresh_optouts")
        assert proc.returncode == 0, failure_lines(proc.stdout + proc.stderr)
        return proc.stdout + proc.stderr

    run("first")
    first = sorted(p.name for p in versions.iterdir() if p.is_dir() and not p.name.endswith(".logs"))
    assert len(first) == 1
    assert "the opt-out list is unchanged" in run("again")
    assert sorted(p.name for p in versions.iterdir() if not p.name.endswith(".logs")) == first
    (tmp_path / "optout.txt").write_text("a.example.org\nc.example.net\n")
    run("changed")
    now = sorted(p.name for p in versions.iterdir() if p.is_dir() and not p.name.endswith(".logs"))
    assert len(now) == 2
    newest = json.loads((versions / (set(now) - set(first)).pop() / "manifest.json").read_text())
    assert newest["selection"]["exclude_hosts"] == ["a.example.org", "c.example.net"]


def test_a_version_run_reads_an_opt_out_list_only_under_the_deployments_roots(snapshot, tmp_path):
    """The inline selection a run is triggered with names the list; prepare reads nothing on the worker,
    the version job (run here as the submitter runs it, with the job's environment) reads the list only
    under the deployment's hosts_roots, whatever the environment it was submitted from says."""
    module = load_dag_module("build_version")
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "optout.txt").write_text("A.example.org\n")
    deployment = Deployment(hosts_roots=(str(lists),))

    def run_job(named: str, out: str) -> subprocess.CompletedProcess:
        conf = {"build": str(snapshot), "selection_toml": f'exclude_hosts_file = "{named}"', "out": out}
        step = module.resolve_step(trigger(module.PARAMS, conf), "r", deployment)
        job = version_job(step)
        env = {**os.environ, "CORPUS_HOSTS_ROOTS": "/etc", **job.job_env()}
        argv = [sys.executable, "-m", "hpc_jobs.version", *job.stage_args()]
        return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)

    good = run_job(str(lists / "optout.txt"), str(tmp_path / "v"))
    assert good.returncode == 0, good.stderr
    manifest = json.loads((tmp_path / "v" / "manifest.json").read_text())
    assert manifest["selection"]["exclude_hosts"] == ["a.example.org"]
    for named in ("/etc/passwd", "/etc/hostname"):
        bad = run_job(named, str(tmp_path / "w"))
        assert bad.returncode == 2
        assert f"exclude_hosts_file {named}: outside the allowed roots ({lists})" in bad.stderr
        assert not (tmp_path / "w").exists()
