"""The contamination_check DAG, run by Airflow itself: a benchmark published after the snapshot is
checked against the snapshot's per-document 8-gram index, and a contaminated one turns the run red; a new
version announced on corpus://versions is checked by the run its event triggers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from corpus.formats.docshard import iter_docs
from tests.conftest import SAMPLE, run_corpus
from tests.orchestration.conftest import AIRFLOW, dags_test, failure_lines
from tests.orchestration.test_ingest_crawl import version_events

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def curated_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("contamination") / "build"
    run_corpus("build", "--input", str(SAMPLE / "curated"), "--out", str(out), "--ranks", "2")
    return out


def later_benchmark(build, path):
    """One item copied from a document that is in the snapshot, one that is in no document."""
    shard = sorted((build / "stages" / "decontaminate" / "shards").glob("*.jsonl.zst"))[0]
    words = next(iter_docs(shard)).text.split()
    leaked = " ".join(words[20:220])
    clean = (
        "A train leaves the station at nine and travels north at sixty miles per hour while a second "
        "train leaves at ten heading south at forty miles per hour; when do they meet the lighthouse?"
    )
    path.write_text(
        json.dumps({"id": "leaked-1", "text": leaked})
        + "\n"
        + json.dumps({"id": "clean-1", "text": clean})
        + "\n"
    )
    return path


def run_check(env, conf):
    return subprocess.run(
        [AIRFLOW, "dags", "test", "contamination_check", "-c", json.dumps(conf)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_later_benchmark_is_checked_against_the_retained_index(curated_build, airflow_env, tmp_path):
    bench = later_benchmark(curated_build, tmp_path / "published-later.jsonl")
    conf = {"snapshot": str(curated_build / "snapshot"), "benchmarks": [str(bench)], "backend": "mpiexec"}

    strict = run_check(airflow_env, {**conf, "max_rate": 0.0})
    assert strict.returncode != 0, "a leaked benchmark item must fail the run"
    assert "contaminated beyond 0.00%: published-later (50.00%)" in strict.stdout + strict.stderr

    tolerant = run_check(airflow_env, {**conf, "max_rate": 0.6})
    out = tolerant.stdout + tolerant.stderr
    assert tolerant.returncode == 0, failure_lines(out)
    assert "published-later: 1 of 2 checked items flagged (50.00%)" in out


#: the scheduler's own step that turns queued asset events into an asset-triggered run (what `airflow
#: scheduler` does each loop; `airflow dags test` only makes manual runs, which consume no event)
ASSET_TRIGGERED_RUN = """
from airflow.jobs.job import Job
from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
from airflow.models.dag import DagModel
from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session
from sqlalchemy import select

with create_session() as session:
    due, _ = DagModel.dags_needing_dagruns(session)
    due = [m for m in due if m.dag_id == "contamination_check"]
    assert due, "no queued corpus://versions event for contamination_check"
    SchedulerJobRunner(job=Job(), executors=[])._create_dag_runs_asset_triggered(dag_models=due, session=session)
    session.flush()
    run = session.scalars(select(DagRun).where(DagRun.dag_id == "contamination_check")
                          .order_by(DagRun.id.desc())).first()
    print("RUN", run.run_id, run.run_type, len(run.consumed_asset_events))
"""


def test_the_dag_is_scheduled_on_new_versions_and_reads_their_events_as_data():
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    from orchestration.assets import VERSIONS
    from tests.orchestration.test_params import load_dag_module

    module = load_dag_module("contamination_check")
    assert module.contamination_check().timetable.asset_condition == VERSIONS
    good = {"snapshot_id": "sha256:" + "ab" * 32, "build": "/b/june", "version": "/b/june/snapshot"}

    def events(*extras):
        return {VERSIONS: [SimpleNamespace(extra=e) for e in extras]}

    by_hand = {"snapshot": "/b/march/snapshot"}
    assert module.versions_to_check(by_hand, events(good)) == [
        {"snapshot": "/b/march/snapshot", "snapshot_id": None}
    ]
    assert module.versions_to_check({"snapshot": ""}, events(good, good)) == [
        {"snapshot": "/b/june/snapshot", "snapshot_id": good["snapshot_id"]}
    ]
    for bad, field in [
        ({**good, "version": "relative/snapshot"}, "version"),
        ({**good, "version": "/b/june\n--root=/etc"}, "version"),
        ({**good, "snapshot_id": "sha256:$(id)"}, "snapshot_id"),
        ({"build": "/b/june"}, "extra"),
    ]:
        with pytest.raises(AirflowFailException, match=f"event's {field} is not valid"):
            module.versions_to_check({"snapshot": ""}, events(bad))
    with pytest.raises(AirflowFailException, match="no snapshot to check"):
        module.versions_to_check({"snapshot": ""}, {})


@pytest.mark.timeout(1800)  # seven Airflow commands, each parsing every DAG: 15 minutes on a loaded 2-core VM
def test_a_version_build_version_announces_is_checked_by_the_run_its_event_triggers(
    curated_build, airflow_env, tmp_path
):
    """build_version (a real `airflow dags test`) makes the version the CLI makes and emits its event; the scheduler's own step makes the
    asset-triggered contamination_check run that consumes it; its tasks, run by `airflow tasks test` on that
    run, read the version from the event (no Param names it) and check it against the deployment's
    benchmarks."""
    bench = later_benchmark(curated_build, tmp_path / "published-later.jsonl")
    env = {**airflow_env, "CORPUS_CONTAMINATION_BENCHMARKS": json.dumps([str(bench)])}
    subprocess.run([AIRFLOW, "dags", "reserialize"], env=env, check=True, capture_output=True, timeout=300)
    subprocess.run(
        [AIRFLOW, "dags", "unpause", "contamination_check"],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    version = tmp_path / "v"
    conf = {
        "build": str(curated_build),
        "selection_toml": "min_scores = { quality = 0.0 }",
        "out": str(version),
        "backend": "mpiexec",
        "poll_interval": 1,
    }
    made = dags_test(env, conf, tmp_path / "version.log", dag="build_version")
    assert made.returncode == 0, failure_lines(made.stdout + made.stderr)
    version_id = json.loads((version / "manifest.json").read_text())["snapshot_id"]
    cli = run_corpus(
        "version",
        str(curated_build),
        "--select-inline",
        conf["selection_toml"],
        "--out",
        str(tmp_path / "cli"),
    )
    assert version_id == cli.stdout.split()[-1], "the DAG's version is the one the CLI makes"
    assert {
        "snapshot_id": version_id,
        "build": str(curated_build),
        "version": str(version),
    } in version_events(env)

    proc = subprocess.run(
        [sys.executable, "-c", ASSET_TRIGGERED_RUN], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, run_id, run_type, consumed = proc.stdout.strip().splitlines()[-1].split()
    assert run_type == "asset_triggered" and int(consumed) >= 1

    def task(name):
        return subprocess.run(
            [AIRFLOW, "tasks", "test", "contamination_check", name, run_id],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    check = task("check")
    assert check.returncode == 0, failure_lines(check.stdout + check.stderr)
    judge = task("judge")
    out = judge.stdout + judge.stderr
    assert f"snapshot {version} (version {version_id}, candidates" in out, out[-3000:]
    assert "published-later: 1 of 2 checked items flagged (50.00%)" in out
    assert "contaminated beyond 0.00%: published-later (50.00%)" in out
