"""Manifests are content-addressed: stable across runs, sensitive to every input of the digest."""

import json
from dataclasses import replace

import pytest

from corpus.model import ShardRef, SnapshotManifest, SnapshotShard, StageManifest


def stage_manifest(**kw):
    base = dict(
        stage="extract",
        stage_version="1",
        config={"max_bytes": 10},
        config_hash="sha256:c",
        inputs=(ShardRef("in/a.jsonl.zst", "a" * 64, 10),),
        outputs=(ShardRef("shards/a.jsonl.zst", "b" * 64, 9),),
        side_outputs=(),
        shard_counts={},
        totals={"in": 10, "out": 9},
        run_info={"ranks": 3, "finished_at": "t1"},
    )
    base.update(kw)
    return StageManifest(**base)


def snapshot(**kw):
    base = dict(
        shards=(SnapshotShard("shards/web-00000", "c" * 64, "web", docs=5, tokens=1000),),
        stage_versions={"extract": {"version": "1", "config_hash": "sha256:c"}},
        seed=7,
        run_info={"finished_at": "t1"},
    )
    base.update(kw)
    return SnapshotManifest(**base)


def test_stage_digest_survives_a_json_round_trip():
    m = stage_manifest()
    again = StageManifest.from_dict(json.loads(json.dumps(m.to_dict())))
    assert again.digest == m.digest


def test_who_ran_it_and_when_is_not_digested():
    assert stage_manifest(run_info={"ranks": 1, "finished_at": "t2"}).digest == stage_manifest().digest


@pytest.mark.parametrize(
    "change",
    [
        {"stage_version": "2"},
        {"config_hash": "sha256:d"},
        {"outputs": (ShardRef("shards/a.jsonl.zst", "f" * 64, 9),)},
        {"inputs": (ShardRef("in/a.jsonl.zst", "e" * 64, 10),)},
    ],
)
def test_stage_digest_changes_with_any_output_version_or_config(change):
    assert stage_manifest(**change).digest != stage_manifest().digest


def test_snapshot_id_is_stable_and_ignores_run_info():
    assert snapshot().snapshot_id == snapshot(run_info={"finished_at": "t9", "ranks": 4}).snapshot_id
    assert snapshot().snapshot_id.startswith("sha256:") and len(snapshot().snapshot_id) == 71


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 8},
        {"stage_versions": {"extract": {"version": "2", "config_hash": "sha256:c"}}},
        {"shards": (SnapshotShard("shards/web-00000", "d" * 64, "web", docs=5, tokens=1000),)},
    ],
)
def test_snapshot_id_changes_with_a_shard_a_stage_version_or_the_seed(change):
    assert snapshot(**change).snapshot_id != snapshot().snapshot_id


def test_a_tampered_snapshot_manifest_is_refused():
    d = snapshot().to_dict()
    d["seed"] = 99
    with pytest.raises(ValueError, match="does not match its id"):
        SnapshotManifest.from_dict(d)
    assert SnapshotManifest.from_dict(snapshot().to_dict()) == snapshot()


def test_manifest_field_order_does_not_matter():
    a = stage_manifest(config={"a": 1, "b": 2})
    b = replace(a, config={"b": 2, "a": 1})
    assert a.digest == b.digest
