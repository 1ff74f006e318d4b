"""The build_version and refresh_optouts DAGs: a version made from the UI as a job, and an opt-out list
that becomes a new version only when it changed (real `airflow dags test`, mpiexec backend)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_corpus
from tests.loader.snapshot_factory import write_id_snapshot
from tests.orchestration.conftest import dags_test, failure_lines
from tests.orchestration.test_ingest_crawl import version_events


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    """A small snapshot with its metadata tables (hosts a/b.example.org, c.example.net)."""
    root = tmp_path_factory.mktemp("version-dags") / "snapshot"
    write_id_snapshot(root, {"code": 2, "web": 3})
    return root


def last_id(text: str) -> str:
    return [ln for ln in text.splitlines() if ln.startswith("snapshot_id ")][-1].split()[1]


def test_build_version_makes_the_version_the_cli_makes(airflow_env, snapshot, tmp_path):
    selection = "min_scores = { quality = 0.2 }"
    conf = {
        "build": str(snapshot),
        "selection_toml": selection,
        "out": str(tmp_path / "v"),
        "backend": "mpiexec",
        "poll_interval": 1,
    }
    proc = dags_test(airflow_env, conf, tmp_path / "dag.log", dag="build_version")
    assert proc.returncode == 0, failure_lines(proc.stdout + proc.stderr)
    made = json.loads((tmp_path / "v" / "manifest.json").read_text())["snapshot_id"]
    cli = run_corpus("version", str(snapshot), "--select-inline", selection, "--out", str(tmp_path / "cli"))
    assert made == last_id(cli.stdout)
    assert {"snapshot_id": made, "build": str(snapshot), "version": str(tmp_path / "v")} in version_events(
        airflow_env
    )


def test_build_version_refuses_a_bad_selection_in_prepare(airflow_env, snapshot, tmp_path):
    conf = {
        "build": str(snapshot),
        "selection_toml": "min_qualty = 0.2",
        "out": str(tmp_path / "v"),
        "backend": "mpiexec",
    }
    proc = dags_test(airflow_env, conf, tmp_path / "dag.log", dag="build_version")
    assert proc.returncode != 0 and "unknown key(s) min_qualty" in proc.stdout + proc.stderr
    assert not (tmp_path / "v").exists()


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
