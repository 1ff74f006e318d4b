"""OpenLineage events of the build_snapshot DAG: each stage job reads what the previous one wrote (the
first reads the sources) and writes its stage directory, the snapshot step reads the last stage's and
writes the candidates and the snapshot; manifest digests and snapshot ids ride along as facets."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from openlineage.client.serde import Serde

from corpus.model import StageManifest
from corpus.model.manifest import read_stage_manifest
from corpus.model.stages import PIPELINE
from orchestration import operators
from orchestration.lineage import SNAPSHOT_FACET, STAGE_FACET, VERSION_FACET, dataset, job_lineage
from orchestration.operators import SnapshotOperator, StageJobOperator, VersionJobOperator, read_manifests
from tests.orchestration.conftest import lineage_events, snapshot_id
from tests.test_manifest import stage_manifest as made_up_manifest

DAG = "build_snapshot"


def stage_manifest(stage: str, config: dict) -> dict:
    return made_up_manifest(stage=stage, config=config, run_info={"ranks": 2}).to_dict()


def emitted(ds) -> dict:
    """A dataset as the transport writes it."""
    return json.loads(Serde.to_json(ds))


def test_a_stage_directory_carries_its_manifest_digest():
    a, b = stage_manifest("extract", {"max_bytes": 10}), stage_manifest("extract", {"max_bytes": 11})
    got = emitted(dataset("/b/stages/extract", a))
    assert (got["namespace"], got["name"]) == ("file", "/b/stages/extract")
    assert got["facets"][STAGE_FACET]["stage"] == "extract"
    assert got["facets"][STAGE_FACET]["manifest_digest"] == StageManifest.from_dict(a).digest
    assert got["facets"][VERSION_FACET]["datasetVersion"] == StageManifest.from_dict(a).digest
    other = emitted(dataset("/b/stages/extract", b))
    assert other["facets"][STAGE_FACET]["manifest_digest"] != got["facets"][STAGE_FACET]["manifest_digest"]
    assert emitted(dataset("/b/stages/extract"))["facets"] == {}


def test_a_snapshot_directory_carries_its_snapshot_id():
    version = {"format": "corpus-version/1", "snapshot_id": "sha256:v1", "base_snapshot_id": "sha256:c1"}
    got = emitted(dataset("/b/snapshot", version))["facets"]
    assert got[SNAPSHOT_FACET]["snapshot_id"] == "sha256:v1"
    assert got[SNAPSHOT_FACET]["base_snapshot_id"] == "sha256:c1"
    assert got[SNAPSHOT_FACET]["format"] == "corpus-version/1"
    assert got[VERSION_FACET]["datasetVersion"] == "sha256:v1"


def build_dict(out: str) -> dict:
    return {
        "stages": list(PIPELINE),
        "inputs": ["/src/a.warc.gz", "/src/b"],
        "out": out,
        "build_config": f"{out}/build-config.json",
        "ranks": 2,
        "ranks_per_stage": {},
        "root": "/repo",
        "python": "/repo/.venv/bin/python",
        "partition": "",
        "time_limit": "01:00:00",
        "sbatch_args": [],
        "env": {},
        "max_requeues": 1,
        "backend": "mpiexec",
        "conn_id": "",
    }


def names(datasets) -> list[str]:
    return [d.name for d in datasets]


def test_the_operators_name_a_chain_from_the_sources_to_the_snapshot():
    build = build_dict("/b")
    ops = [StageJobOperator(task_id=f"{s}_submit", stage=s, build=build) for s in PIPELINE]
    start = [op.get_openlineage_facets_on_start() for op in ops]
    assert names(start[0].inputs) == ["/src/a.warc.gz", "/src/b"]
    for stage, lineage in zip(PIPELINE, start, strict=True):
        assert names(lineage.outputs) == [f"/b/stages/{stage}"]
    for before, after in zip(start, start[1:], strict=False):
        assert names(after.inputs) == names(before.outputs)
    snap = SnapshotOperator(task_id="snapshot", build=build, verified=[]).get_openlineage_facets_on_start()
    assert names(snap.inputs) == names(start[-1].outputs)
    assert names(snap.outputs) == ["/b/candidates", "/b/snapshot"]


def test_the_version_step_reads_a_build_and_writes_a_version():
    step = {**build_dict("/b"), "build": "/b", "out": "/b/versions/v1", "log_dir": "/b/logs", "selection": ""}
    op = VersionJobOperator(task_id="version", step=step)
    lineage = op.get_openlineage_facets_on_start()
    assert (names(lineage.inputs), names(lineage.outputs)) == (["/b"], ["/b/versions/v1"])
    assert op.manifest_dirs(op.make_job("")) == ["/b/versions/v1"]


class Files:
    """A backend's ``read_text`` over this machine's files; it counts the reads."""

    def __init__(self) -> None:
        self.reads = 0

    def read_text(self, path: str) -> str:
        self.reads += 1
        return Path(path).read_text()


def test_a_manifest_that_cannot_be_read_leaves_its_dataset_without_facets(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(operators, "lineage_enabled", lambda: True)
    good = tmp_path / "stages" / "extract"
    good.mkdir(parents=True)
    (good / "manifest.json").write_text(json.dumps(stage_manifest("extract", {})))
    missing = str(tmp_path / "stages" / "ingest")
    with caplog.at_level(logging.WARNING):
        manifests = read_manifests(Files(), [str(good), missing], logging.getLogger("test"))
    assert list(manifests) == [str(good)]
    assert f"{missing}/manifest.json not read" in caplog.text
    lineage = job_lineage([missing], [str(good)], manifests)
    assert lineage.inputs[0].facets == {}
    assert STAGE_FACET in lineage.outputs[0].facets


def test_no_manifest_is_read_when_no_events_are_sent(tmp_path, monkeypatch):
    monkeypatch.setattr(operators, "lineage_enabled", lambda: False)
    (tmp_path / "manifest.json").write_text(json.dumps(stage_manifest("extract", {})))
    files = Files()
    assert read_manifests(files, [str(tmp_path)], logging.getLogger("test")) == {}
    assert files.reads == 0


def complete_events(events: Path) -> dict[str, dict]:
    """The COMPLETE event of each job (an Airflow task: ``dag.group.task``) of the run."""
    found: dict[str, dict] = {}
    for line in events.read_text().splitlines():
        e = json.loads(line)
        if e["eventType"] == "COMPLETE":
            assert e["job"]["name"] not in found, f"two COMPLETE events of {e['job']['name']}"
            found[e["job"]["name"]] = e
    return found


def ids(datasets: list[dict]) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in datasets]


def check_the_chain(out: Path, events_file: Path, sources: list[Path], reference: str) -> None:
    """Each stage's COMPLETE event reads the previous stage's dataset (the first: the sources) with the
    facets it was written with, and writes its stage directory with its manifest's digest; the snapshot
    task reads the last stage's and writes the candidates and the snapshot with their ids."""
    assert events_file.exists(), "no OpenLineage events were written"
    events = complete_events(events_file)
    previous = [("file", str(p.resolve())) for p in sources]
    previous_facets: list[dict] = [{} for _ in sources]
    for stage in PIPELINE:
        e = events.get(f"{DAG}.{stage}.submit")
        assert e is not None, f"no COMPLETE event of {stage}'s submit task; jobs: {sorted(events)}"
        assert ids(e["inputs"]) == previous, stage
        assert [d["facets"] for d in e["inputs"]] == previous_facets, stage
        assert ids(e["outputs"]) == [("file", str(out / "stages" / stage))]
        facets = e["outputs"][0]["facets"]
        digest = read_stage_manifest(out / "stages" / stage).digest
        assert facets[STAGE_FACET]["manifest_digest"] == digest, stage
        assert facets[STAGE_FACET]["stage"] == stage
        assert facets[VERSION_FACET]["datasetVersion"] == digest
        previous, previous_facets = ids(e["outputs"]), [facets]
    e = events.get(f"{DAG}.snapshot")
    assert e is not None, f"no COMPLETE event of the snapshot task; jobs: {sorted(events)}"
    assert ids(e["inputs"]) == previous
    assert [d["facets"] for d in e["inputs"]] == previous_facets
    assert ids(e["outputs"]) == [("file", str(out / "candidates")), ("file", str(out / "snapshot"))]
    candidates, snapshot = (d["facets"][SNAPSHOT_FACET] for d in e["outputs"])
    assert snapshot["snapshot_id"] == snapshot_id(out) == reference
    assert snapshot["format"] == "corpus-version/2"
    assert (
        candidates["snapshot_id"]
        == json.loads((out / "candidates" / "manifest.json").read_text())["snapshot_id"]
    )
    assert snapshot["base_snapshot_id"] == candidates["snapshot_id"]


@pytest.mark.slow
def test_the_embedded_dag_reports_lineage_from_the_inputs_to_the_snapshot(
    demo_build, small_inputs, reference
):
    assert demo_build.proc.returncode == 0, demo_build.proc.stderr[-3000:]
    check_the_chain(demo_build.out.resolve(), lineage_events(demo_build.out), small_inputs, reference)


@pytest.mark.slow
@pytest.mark.cluster
def test_the_dag_over_ssh_reports_lineage_from_the_inputs_to_the_snapshot(ssh_build, small_inputs, reference):
    """The manifests are read on the cluster's side, through the ssh backend."""
    check_the_chain(ssh_build, lineage_events(ssh_build), small_inputs, reference)
