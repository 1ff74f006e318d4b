"""The ingest_crawl DAG: scheduled on the crawl-landing asset, it builds the new crawl against the latest
complete build under the build root with build_snapshot's machinery, gives the snapshot id of
`corpus build --base`, and announces the version on the versions asset (one real `airflow dags test`,
mpiexec backend)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException

from corpus.model.stages import PIPELINE
from orchestration.assets import CRAWLS_LANDED, VERSIONS
from tests.conftest import run_corpus
from tests.orchestration.conftest import dags_test, failure_lines, snapshot_id
from tests.orchestration.test_params import load_dag_module


@pytest.fixture(scope="module")
def ingest_dag():
    return load_dag_module("ingest_crawl")


def test_the_dag_is_scheduled_on_landed_crawls_and_runs_build_snapshots_tasks(ingest_dag):
    dag = ingest_dag.ingest_crawl()
    assert dag.timetable.asset_condition == CRAWLS_LANDED
    expected = {"prepare", "snapshot"} | {f"{s}.{t}" for s in PIPELINE for t in ("submit", "verify")}
    assert set(dag.task_ids) == expected
    assert dag.get_task("snapshot").outlets == [VERSIONS]
    assert dag.get_task(f"{PIPELINE[0]}.submit").upstream_task_ids == {"prepare"}
    assert {"crawl", "base"} <= set(dag.params) and dag.params["base"] is None
    # build_snapshot's snapshot step is the same operator: it emits the same event (checked end to end below)
    assert load_dag_module("build_snapshot").build_snapshot().get_task("snapshot").outlets == [VERSIONS]


def test_a_landing_event_names_absolute_paths_only(ingest_dag):
    def events(*extras):
        return {CRAWLS_LANDED: [SimpleNamespace(extra=e) for e in extras]}

    got = ingest_dag.landed_paths(
        events({"paths": ["/c/a.warc.gz", "/c/b.warc.gz"]}, {"paths": ["/c/a.warc.gz"]})
    )
    assert got == ["/c/a.warc.gz", "/c/b.warc.gz"]
    assert ingest_dag.landed_paths({}) == []
    for bad in ({"paths": ["relative.warc.gz"]}, {"paths": "/c/a.warc.gz"}, {}, {"paths": ["/c/$(x)\n"]}):
        with pytest.raises(AirflowFailException, match="absolute"):
            ingest_dag.landed_paths(events(bad))


def version_events(airflow_env: dict[str, str]) -> list[dict]:
    """The extras of the events on the versions asset in the metadata DB of ``airflow_env``'s runs."""
    with sqlite3.connect(Path(airflow_env["AIRFLOW_HOME"]) / "airflow.db") as db:
        rows = db.execute(
            "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = ?",
            (VERSIONS.uri,),
        ).fetchall()
    return [json.loads(r[0]) for r in rows]


@pytest.mark.slow
def test_ingest_crawl_builds_against_the_latest_build_as_corpus_build_base_does(
    airflow_env, small_inputs, tmp_path
):
    base_input, new_input = map(str, small_inputs)
    root = tmp_path / "builds"
    run_corpus("build", "--input", base_input, "--out", str(root / "b1"), "--ranks", "2", "--seed", "0")
    (root / "z-incomplete").mkdir()  # sorts last, but no build: passed over
    cli = run_corpus(
        "build",
        "--base",
        str(root / "b1"),
        "--input",
        base_input,
        new_input,
        "--out",
        str(tmp_path / "cli"),
        "--ranks",
        "2",
        "--seed",
        "0",
    )
    expected = cli.stdout.strip().splitlines()[-1].split()[1]

    out = tmp_path / "dag-build"
    conf = {
        "crawl": [base_input, new_input],
        "out": str(out),
        "backend": "mpiexec",
        "ranks": 2,
        "seed": 0,
        "poll_interval": 1,
    }
    env = {**airflow_env, "CORPUS_BUILD_ROOT": str(root)}
    proc = dags_test(env, conf, tmp_path / "dag.log", dag="ingest_crawl")
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, failure_lines(text)
    assert (
        f"ingest_crawl: 1 new input(s) against base {(root / 'b1').resolve()}" in text
    )  # b1's own one skipped
    assert json.loads((out / "dedup_index" / "base.json").read_text())["base"] == "../builds/b1"
    assert snapshot_id(out) == expected
    made = [e for e in version_events(airflow_env) if e["build"] == str(out)]
    assert made == [{"snapshot_id": expected, "build": str(out), "version": f"{out}/snapshot"}]
