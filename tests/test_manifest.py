"""Manifests are content-addressed: stable across runs, sensitive to every input of the digest."""

import json
from dataclasses import replace

import pytest

from corpus.formats.snapshot_manifest import write_snapshot_manifest
from corpus.model import ShardRef, SnapshotManifest, SnapshotShard, StageManifest
from corpus.model.manifest import read_snapshot_manifest


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


def split_snapshot(n: int = 6, **kw):
    shards = tuple(
        SnapshotShard(f"shards/{b}-{k:05d}.bin", f"{k:02x}" * 32, b, docs=k + 1, tokens=100 * (k + 1))
        for k, b in enumerate(["web", "code", "web", "books", "web", "code"][:n])
    )
    return snapshot(shards=shards, split=True, **kw)


def test_a_split_manifest_reads_back_with_its_id_its_shards_and_their_keys(tmp_path):
    m = split_snapshot()
    write_snapshot_manifest(tmp_path, m)
    d = json.loads((tmp_path / "manifest.json").read_text())
    assert d["format"] == "corpus-snapshot/2" and "shards" not in d
    again = read_snapshot_manifest(tmp_path)
    assert again.snapshot_id == m.snapshot_id == d["snapshot_id"]
    assert len(again.shards) == 6 and list(again.shards) == list(m.shards)
    assert again.shards[-1] == m.shards[5] and again.shards[1:3] == list(m.shards[1:3])
    assert (
        again.shard_keys()
        == m.shard_keys()
        == tuple((s.bucket, s.sha256, s.tokens, s.docs) for s in m.shards)
    )


def test_the_split_and_listed_forms_of_the_same_shards_have_different_ids_each_sensitive_to_a_shard():
    moved = replace(split_snapshot().shards[2], tokens=301)
    changed = split_snapshot().shards[:2] + (moved,) + split_snapshot().shards[3:]
    assert split_snapshot().snapshot_id != replace(split_snapshot(), split=False).snapshot_id
    assert snapshot(shards=changed, split=True).snapshot_id != split_snapshot().snapshot_id


def test_a_split_manifest_does_not_grow_with_its_shards(tmp_path):
    for n in (1, 6):
        write_snapshot_manifest(tmp_path / str(n), split_snapshot(n))
    small, large = ((tmp_path / str(n) / "manifest.json").read_text() for n in (1, 6))
    assert len(large) - len(small) < 40  # the count and the bucket names, never an entry per shard


def test_a_reader_parses_only_the_shards_it_opens_and_each_against_its_key(tmp_path):
    write_snapshot_manifest(tmp_path, split_snapshot())
    lines = (tmp_path / "shards.jsonl").read_bytes().splitlines(keepends=True)
    lines[4] = lines[4].replace(b'"docs":5', b'"docs":9')  # shard 4 tampered with, same length
    (tmp_path / "shards.jsonl").write_bytes(b"".join(lines))
    table = read_snapshot_manifest(tmp_path).shards  # the id is checked without reading the lines
    assert table[3].docs == 4 and table[5].docs == 6
    with pytest.raises(ValueError, match="shard 4's line does not match its key"):
        table[4]
    with pytest.raises(ValueError, match="does not match its key"):
        list(read_snapshot_manifest(tmp_path).shards)


def test_a_tampered_or_missing_keys_file_is_refused_when_read(tmp_path):
    write_snapshot_manifest(tmp_path, split_snapshot())
    keys = bytearray((tmp_path / "shards.keys").read_bytes())
    keys[40] ^= 1
    (tmp_path / "shards.keys").write_bytes(bytes(keys))
    with pytest.raises(ValueError, match="does not match the manifest's keys_sha256"):
        read_snapshot_manifest(tmp_path).shard_keys()
    (tmp_path / "shards.keys").unlink()
    with pytest.raises(ValueError, match="is missing"):
        read_snapshot_manifest(tmp_path).shards[0]
    with pytest.raises(ValueError, match="with the directory its shard table is in"):
        SnapshotManifest.from_dict(json.loads((tmp_path / "manifest.json").read_text()))
