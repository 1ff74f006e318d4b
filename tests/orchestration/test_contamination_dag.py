"""The contamination_check DAG, run by Airflow itself: a benchmark published after the snapshot is
checked against the snapshot's per-document 8-gram index, and a contaminated one turns the run red."""

from __future__ import annotations

import json
import subprocess

import pytest

from corpus.docshard import iter_docs
from tests.conftest import SAMPLE, run_corpus
from tests.orchestration.conftest import AIRFLOW, failure_lines

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
    clean = ("A train leaves the station at nine and travels north at sixty miles per hour while a second "
             "train leaves at ten heading south at forty miles per hour; when do they meet the lighthouse?")
    path.write_text(json.dumps({"id": "leaked-1", "text": leaked}) + "\n" + json.dumps({"id": "clean-1", "text": clean}) + "\n")
    return path


def run_check(env, conf):
    return subprocess.run([AIRFLOW, "dags", "test", "contamination_check", "-c", json.dumps(conf)], env=env,
                          capture_output=True, text=True, timeout=600)


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
