"""A version keeps its shard entries in a table beside its manifest (``corpus-version/2``): the id is
checked from ``manifest.json`` alone, a loader rank starts without parsing an entry (of the version or of
its build) and parses those of the shards it reads, each checked when read; versions written before the
table (``corpus-version/1``) open and read as they did."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from snapshot_factory import write_id_snapshot
from test_loader_versions import SELECTION, make_version

from corpus.formats.snapshot_manifest import write_snapshot_manifest
from corpus.model.digest import json_digest
from corpus.model.errors import UserError
from corpus.select.selection import parse_inline
from corpus.version.open import LISTED_FORMAT, open_version
from corpus.version.query import evaluate
from corpus.version.write import version_manifest
from loader.versions import LoaderVersion


def split_build(root: Path, shards: int) -> Path:
    """A snapshot of ``shards`` web shards whose manifest keeps its shard table beside it, as a build's."""
    m = write_id_snapshot(root, {"web": shards}, seed=3)
    (root / "manifest.json").unlink()
    write_snapshot_manifest(root, replace(m, split=True))
    return root


@pytest.fixture(scope="module")
def split_version(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("table")
    return make_version(split_build(root / "snap", 6), root / "v", SELECTION)


def test_a_version_reads_back_its_entries_from_the_table_with_its_id(split_version):
    d = json.loads((split_version / "manifest.json").read_text())
    assert d["format"] == "corpus-version/2" and "shards" not in d
    assert d["shard_table"]["count"] == 6 and (split_version / "shards.keys").stat().st_size == 6 * 93
    v = open_version(split_version)
    sel = parse_inline(SELECTION)
    made = version_manifest(v, sel, evaluate(v, sel), [])
    assert made["snapshot_id"] == v.snapshot_id == d["snapshot_id"]
    assert list(v.entries) == made["shards"] and v.entries[2] == made["shards"][2]
    assert (d["selected_docs"], d["selected_tokens"]) == (
        sum(e["selected_docs"] for e in made["shards"]),
        sum(e["selected_tokens"] for e in made["shards"]),
    )
    assert [(s.name, docs) for s, docs, _ in v.selected_counts()] == [
        (e["name"], e["selected_docs"]) for e in made["shards"]
    ]


def test_a_version_manifest_does_not_grow_with_the_shards(tmp_path):
    sizes = []
    for n in (2, 12):
        v = make_version(split_build(tmp_path / f"s{n}", n), tmp_path / f"v{n}", SELECTION)
        sizes.append(len((v / "manifest.json").read_bytes()))
    assert abs(sizes[1] - sizes[0]) < 40  # counts and totals, never an entry per shard


def test_a_loader_rank_starts_parsing_no_entry_and_parses_those_of_the_shards_it_reads(split_version):
    lv = LoaderVersion.open(split_version)
    entries, base_lines = lv.version.entries, lv.version.base.shards
    assert entries._made == {} and base_lines._made == {}
    assert [k.docs for k in lv.stream_shards] == [e["selected_docs"] for e in json_lines(split_version)]
    bits = lv.selected(4)
    assert set(entries._made) == {4} and set(base_lines._made) == {4}
    assert int(bits.sum()) == lv.stream_shards[4].docs


def test_a_tampered_entry_is_refused_when_its_shard_is_read_and_its_neighbours_still_read(
    tmp_path, split_version
):
    v = tmp_path / "v"
    shutil.copytree(split_version, v)
    lines = (v / "shards.jsonl").read_bytes().splitlines(keepends=True)
    entry = json.loads(lines[3])
    lines[3] = lines[3].replace(entry["bitmap_sha256"].encode(), b"0" * 64)  # the same length
    (v / "shards.jsonl").write_bytes(b"".join(lines))
    rebase(v, split_version)
    lv = LoaderVersion.open(v)
    assert lv.selected(2).shape == (lv.version.shards[2].docs,)
    with pytest.raises(UserError, match="shard 3's line does not match its key"):
        lv.selected(3)
    keys = bytearray((v / "shards.keys").read_bytes())
    keys[200] ^= 1
    (v / "shards.keys").write_bytes(bytes(keys))
    with pytest.raises(UserError, match="shards.keys does not match the manifest's keys_sha256"):
        LoaderVersion.open(v)


def test_a_shard_whose_metadata_changed_is_refused_when_read_naming_it(tmp_path):
    snap = split_build(tmp_path / "snap", 3)
    version = make_version(snap, tmp_path / "v", "")
    meta = open_version(version).shards[1].meta
    facts = json.loads(meta.read_text())
    meta.write_text(json.dumps({**facts, "metadata_sha256": "0" * 64}))
    v = open_version(version)  # the build's id is unchanged: the version opens
    assert v.selected(v.shards[0]).shape == (v.shards[0].docs,)
    with pytest.raises(UserError, match=r"shard web-00001 of its build has changed \(digests differ\)"):
        v.selected(v.shards[1])


def test_a_version_written_before_the_table_opens_and_reads_as_it_did(tmp_path, split_version):
    old = tmp_path / "old"
    shutil.copytree(split_version / "selection", old / "selection")
    d = json.loads((split_version / "manifest.json").read_text())
    listed = {k: v for k, v in d.items() if k not in ("snapshot_id", "run_info", "shard_table")}
    listed = {**listed, "format": LISTED_FORMAT, "shards": json_lines(split_version)}
    del listed["selected_docs"], listed["selected_tokens"]  # not in the listed form
    (old / "manifest.json").write_text(json.dumps({**listed, "snapshot_id": json_digest(listed)}))
    rebase(old, split_version)
    then, now = LoaderVersion.open(old), LoaderVersion.open(split_version)
    assert then.snapshot_id != now.snapshot_id and then.version.manifest["format"] == LISTED_FORMAT
    assert then.stream_shards == now.stream_shards
    for i in range(len(now.stream_shards)):
        assert np.array_equal(then.selected(i), now.selected(i))


def rebase(copy: Path, version: Path) -> None:
    """``copy``'s manifest pointed at ``version``'s build (``run_info``, which the id does not digest)."""
    d = json.loads((copy / "manifest.json").read_text())
    base = json.loads((version / "manifest.json").read_text())["run_info"]["base"]
    d["run_info"] = {"base": str((version / base).resolve())}
    (copy / "manifest.json").write_text(json.dumps(d))


def json_lines(version: Path) -> list[dict]:
    return [json.loads(line) for line in (version / "shards.jsonl").read_text().splitlines()]
