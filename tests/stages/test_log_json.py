"""``--log-json``: every line a build or a stage job prints is one JSON object, made from the same record
as its text line (runtime.logline), with the stage, the rank and the numbers of progress."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from corpus.model.stages import PIPELINE
from runtime.logline import LOG_JSON_ENV, LogRecord, json_line, text_line
from tests.conftest import SAMPLE, run_corpus
from tests.stages.chain import run_stage

#: a small build of real text: 40 curated documents and 139 crawled pages
INPUTS = (SAMPLE / "curated" / "perl-doc.jsonl.gz", SAMPLE / "web" / "crawl-2026-06-sample.warc.gz")
BASE_KEYS = {"ts", "level", "event", "source", "stage", "rank", "ranks", "message"}
PROGRESS_KEYS = {"units_done", "units_total", "mb_done", "mb_total", "mb_per_s", "eta_s"}


def records(text: str) -> list[dict]:
    """Every line of ``text`` as a JSON object (a line that is not one fails the test, named)."""
    found = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}")
        assert isinstance(obj, dict) and BASE_KEYS <= obj.keys(), line
        found.append(obj)
    return found


@pytest.fixture(scope="module")
def json_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("json-build") / "b"
    proc = run_corpus("build", "--input", *map(str, INPUTS), "--out", str(out), "--ranks", "2", "--log-json")
    return records(proc.stdout), records(proc.stderr)


def test_every_line_of_a_build_with_log_json_is_a_json_object_with_a_utc_time(json_build):
    stdout, stderr = json_build
    for r in stdout + stderr:
        assert r["ts"].endswith("Z") and datetime.fromisoformat(r["ts"].replace("Z", "+00:00"))
        assert r["level"] in ("info", "warning") and isinstance(r["message"], str)
    assert [r["event"] for r in stdout] == ["result"] * 3
    assert stdout[-1]["snapshot_id"].startswith("sha256:") and stdout[-1]["message"].startswith(
        "snapshot_id "
    )


def test_the_build_says_each_stage_n_of_9_as_it_starts_and_ends(json_build):
    _, stderr = json_build
    for event in ("stage_start", "stage_done"):
        said = [r for r in stderr if r["event"] == event]
        assert [(r["stage"], r["stage_number"], r["stages"]) for r in said] == [
            (name, n, len(PIPELINE)) for n, name in enumerate(PIPELINE, 1)
        ]
        assert all(r["source"] == "corpus build" and r["rank"] is None for r in said)
    done = [r for r in stderr if r["event"] == "stage_done"]
    assert all(r["docs_out"] <= r["docs_in"] for r in done) and done[0]["docs_in"] > 100


def test_each_stage_reports_its_progress_from_rank_0_with_the_numbers(json_build):
    _, stderr = json_build
    progress = [r for r in stderr if r["event"] == "progress"]
    assert {r["stage"] for r in progress} == set(PIPELINE)
    for r in progress:
        assert PROGRESS_KEYS <= r.keys() and r["rank"] == 0 and r["ranks"] == 2
        assert r["message"].startswith(f"progress: {r['units_done']}/{r['units_total']} units")
    last = {r["stage"]: r for r in progress}  # the last line of each stage: every unit done
    assert all(r["units_done"] == r["units_total"] > 0 and r["eta_s"] is None for r in last.values())
    assert all(abs(r["mb_done"] - r["mb_total"]) < 1e-9 for r in last.values())
    shards = [r for r in stderr if r["event"] == "shard_done"]
    assert {r["stage"] for r in shards} == set(PIPELINE) and {r["rank"] for r in shards} == {0, 1}
    assert {r["stage"] for r in stderr if r["event"] == "stage_complete"} == set(PIPELINE)


def test_a_stage_job_reads_the_environment_variable_on_every_rank(tmp_path, monkeypatch):
    monkeypatch.setenv(LOG_JSON_ENV, "1")  # what --log-json sets; sbatch jobs inherit it
    proc = run_stage("ingest", 2, [INPUTS[0]], tmp_path / "ingest")
    found = records(proc.stderr)
    assert {r["rank"] for r in found} == {0, 1} and {r["stage"] for r in found} == {"ingest"}
    assert [r["event"] for r in found if r["event"] == "stage_complete"] == ["stage_complete"]


def test_text_and_json_come_from_one_record():
    r = LogRecord(
        message="progress: 1/2 units",
        event="progress",
        stage="extract",
        rank=0,
        ranks=2,
        fields={"units_done": 1},
        ts=0.0,
    )
    assert text_line(r).endswith(" [extract r0/2] progress: 1/2 units")
    assert json.loads(json_line(r)) == {
        "ts": "1970-01-01T00:00:00.000Z",
        "level": "info",
        "event": "progress",
        "source": None,
        "stage": "extract",
        "rank": 0,
        "ranks": 2,
        "message": "progress: 1/2 units",
        "units_done": 1,
    }
    error = LogRecord(message="bad", event="error", level="error", stage="ingest", rank=1, ranks=2)
    assert text_line(error) == "error: ingest r1/2: bad"
    assert text_line(LogRecord(message="x", level="error", source="corpus build")) == "corpus build: error: x"
