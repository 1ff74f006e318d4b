"""`corpus takedown`: documents named by id or URL leave a new version at once, their tokens are zeroed
in the one shard that holds each (no other byte of the build changes), and a run moves onto the new
version at a checkpoint reading every other selected position exactly once, the documents never.

The id snapshot makes every token a distinct id, so "never the document" is checked token by token.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from snapshot_factory import CAPS, consume, write_id_snapshot
from test_loader_versions import SELECTION, doc_tokens, make, make_version

from cli.main import main as corpus
from corpus.formats.block_layout import DOCUMENTS
from corpus.formats.megatron import read_index
from corpus.version.open import open_version


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("takedown") / "snap"
    write_id_snapshot(root, {"code": 3, "web": 7, "wiki": 5}, block_layout=DOCUMENTS)  # as write_shards
    return root


@pytest.fixture
def snap(pristine: Path, tmp_path: Path) -> Path:
    """A copy of its own: a takedown rewrites the build's shards."""
    return Path(shutil.copytree(pristine, tmp_path / "snap"))


@pytest.fixture
def wide(snap: Path, tmp_path: Path) -> Path:
    return make_version(snap, tmp_path / "wide", SELECTION)


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def selected_doc(version_dir: Path, bucket: str, nth: int = 0) -> tuple[str, int, str, str]:
    """(shard, index, doc_id, url) of the ``nth`` selected document of ``bucket`` with tokens."""
    v = open_version(version_dir)
    found = []
    for s in v.shards:
        if s.bucket != bucket:
            continue
        rows = pq.read_table(s.metadata, columns=["index", "doc_id", "url", "tokens"]).to_pylist()
        sel = v.selected(s)
        found += [
            (s.name, r["index"], r["doc_id"], r["url"]) for r in rows if sel[r["index"]] and r["tokens"]
        ]
    return found[nth]


def doc_ids_of(snap: Path, shard: str, index: int) -> set[int]:
    """The token ids of one document as the build stores them now."""
    v = open_version(snap)
    s = next(s for s in v.base.shards if s.path.endswith(f"/{shard}.bin"))
    idx = read_index(snap / s.files["idx"])
    toks = np.fromfile(snap / s.path, dtype=idx.dtype)
    start = int(idx.offsets[index]) // idx.dtype.itemsize
    return {int(t) for t in toks[start : start + int(idx.lengths[index])]}


def take_down(
    version: Path, out: Path, *, ids: list[str] = (), urls: list[str] = (), reason="DMCA #4"
) -> int:
    listing = out.with_name(out.name + ".list")
    listing.write_text("# one per line\n" + "\n".join([*ids, *urls]) + "\n")
    which = "--urls" if urls else "--doc-ids"
    return corpus(["takedown", str(version), which, str(listing), "--reason", reason, "--out", str(out)])


def test_a_takedown_deselects_the_document_and_zeroes_its_tokens_in_its_shard_only(
    snap, wide, tmp_path, capsys
):
    shard, index, doc_id, _ = selected_doc(wide, "web", 3)
    ids = doc_ids_of(snap, shard, index)
    before = digests(snap)
    assert take_down(wide, tmp_path / "td", ids=[doc_id]) == 0

    after = digests(snap)
    changed = sorted(k for k in before if before[k] != after[k])
    assert changed == [f"shards/web/{shard}.bin"]
    added = sorted(set(after) - set(before))
    prefix = f"shards/web/{shard}.{after[f'shards/web/{shard}.bin'][:16]}"
    assert added == [f"{prefix}.blocks", f"{prefix}.meta.json", "takedowns.jsonl"]
    assert doc_ids_of(snap, shard, index) == {0}, "the document's tokens are zeros"

    old, new = open_version(wide), open_version(tmp_path / "td")
    for s in new.shards:
        expect = old.selected(s).copy()
        if s.name == shard:
            assert expect[index]
            expect[index] = False
        assert (new.selected(s) == expect).all(), s.name
    (record,) = new.manifest["takedowns"]
    base = next(s for s in new.base.shards if s.path.endswith(f"/{shard}.bin"))
    assert record["name"] == shard and record["doc_ids"] == [doc_id] and record["indices"] == [index]
    assert record["reason"] == "DMCA #4" and record["old_sha256"] == base.sha256
    assert record["sha256"] == after[f"shards/web/{shard}.bin"] != base.sha256
    assert record["blocks"] == added[0] and record["blocks_sha256"] == after[added[0]]
    assert record["meta"] == added[1]
    meta = json.loads((snap / added[1]).read_text())
    assert (meta["sha256"], meta["blocks_sha256"]) == (record["sha256"], record["blocks_sha256"])
    assert record["bytes_zeroed"] == 4 * len(ids)
    (logged,) = [json.loads(line) for line in (snap / "takedowns.jsonl").read_text().splitlines()]
    assert logged == record, "the build's own log, what a build made against it reads"
    assert new.base.snapshot_id == old.base.snapshot_id, "the build's manifest is never changed"
    assert corpus(["diff", str(wide), str(tmp_path / "td")]) == 1
    said = capsys.readouterr().out.splitlines()
    assert f"takedown added: 1 document(s) of {shard} (DMCA #4)" in said
    assert f"bucket web: +0 docs / +0 tokens, -1 docs / -{len(ids)} tokens" in said
    tokens = next(e for e in new.entries if e["name"] == shard)["selected_tokens"]
    assert tokens == next(e for e in old.entries if e["name"] == shard)["selected_tokens"] - len(ids)


def test_documents_are_named_by_url_and_a_rerun_finishes_the_same_version(snap, wide, tmp_path, capsys):
    picks = [selected_doc(wide, "wiki", k) for k in (0, 5)]
    assert take_down(wide, tmp_path / "td", urls=[p[3] for p in picks]) == 0
    first = capsys.readouterr().out
    assert "takedown: 2 document(s)" in first
    now = digests(snap)
    assert take_down(wide, tmp_path / "td", urls=[p[3] for p in picks]) == 0, "a retried job succeeds"
    again = capsys.readouterr().out
    assert again.splitlines()[-1] == first.splitlines()[-1] and "in 0 shard file(s)" in again
    assert digests(snap) == now
    removed = open_version(tmp_path / "td").removed
    expect: dict[str, list[int]] = {}
    for p in picks:
        expect.setdefault(p[0], []).append(p[1])
    assert {k: v.tolist() for k, v in removed.items()} == {k: sorted(v) for k, v in expect.items()}


def test_what_cannot_be_taken_down_is_refused_in_one_line_and_nothing_changes(snap, wide, tmp_path, capsys):
    before = digests(snap)
    _, _, doc_id, _ = selected_doc(wide, "code")

    def refused(**kw) -> str:
        assert take_down(**kw) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        return err

    assert "live shards: no-such-doc; nothing taken down" in refused(
        version=wide, out=tmp_path / "a", ids=[doc_id, "no-such-doc"]
    )
    assert "--reason must say why" in refused(version=wide, out=tmp_path / "b", ids=[doc_id], reason="  ")
    assert "is a build, not a version" in refused(version=snap, out=tmp_path / "c", ids=[doc_id])
    assert digests(snap) == before and not any((tmp_path / n).exists() for n in "abc")
    assert take_down(wide, tmp_path / "d", ids=[doc_id]) == 0
    again = refused(version=tmp_path / "d", out=tmp_path / "e", ids=[doc_id])
    assert f"document {doc_id} (shard code-" in again and "is already taken down" in again


def test_every_version_made_from_a_takedown_keeps_the_documents_out(snap, wide, tmp_path):
    shard, index, doc_id, _ = selected_doc(wide, "web", 1)
    assert take_down(wide, tmp_path / "td", ids=[doc_id]) == 0
    # a selection of the build that would keep everything, made from the takedown's version
    assert (
        corpus(["version", str(tmp_path / "td"), "--select-inline", "", "--out", str(tmp_path / "all")]) == 0
    )
    v = open_version(tmp_path / "all")
    ref = next(s for s in v.shards if s.name == shard)
    assert not v.selected(ref)[index] and v.selected(ref).sum() == ref.docs - 1
    assert v.manifest["takedowns"] == open_version(tmp_path / "td").manifest["takedowns"]
    # the version step on ranks leaves them out too: the same version
    args = ["version", str(tmp_path / "td"), "--select-inline", "", "--out", str(tmp_path / "r2")]
    assert corpus([*args, "--ranks", "2"]) == 0
    assert open_version(tmp_path / "r2").snapshot_id == v.snapshot_id
    # a second takedown in the same shard chains the digests
    _, index2, doc2, _ = next(
        d for k in range(40) if (d := selected_doc(tmp_path / "all", "web", k))[0] == shard
    )
    assert take_down(tmp_path / "all", tmp_path / "td2", ids=[doc2]) == 0
    first, second = open_version(tmp_path / "td2").manifest["takedowns"]
    assert second["old_sha256"] == first["sha256"] and second["indices"] == [index2]


@pytest.mark.parametrize(("steps", "world", "new_world"), [(6, 3, 2), (15, 2, 4)])
def test_a_run_moves_onto_the_takedown_at_a_checkpoint_reading_every_other_position_once(
    snap, wide, tmp_path, steps, world, new_world
):
    picks = [selected_doc(wide, b, 2) for b in ("web", "wiki")]
    gone = set().union(*(doc_ids_of(snap, p[0], p[1]) for p in picks))
    kept_before = doc_tokens(wide, snap)
    first = [make(wide, r, world) for r in range(world)]
    before, after = Counter(), Counter()
    consume(first, before, steps=steps)
    record = first[0].global_record([ld.local_state() for ld in first])

    assert take_down(wide, tmp_path / "td", ids=[p[2] for p in picks]) == 0
    resumed = [make(tmp_path / "td", r, new_world) for r in range(new_world)]
    for ld in resumed:
        ld.load_record(record)
    consume(resumed, after)
    assert not any(ld.store.skipped for ld in resumed), (
        "the rewritten shards verify against their new digests"
    )
    assert not any(after[t] for t in gone)
    for bucket, cap in CAPS.items():
        kept = kept_before[bucket] - gone
        assert {before[t] + after[t] for t in kept} == {cap}, bucket


def test_a_takedown_of_a_version_with_buckets_by_predicate_keeps_them_as_made_the_document_in_none(
    snap, tmp_path
):
    from test_predicate_buckets import BUCKETS, ROW_RULES

    made = tmp_path / "b"
    assert corpus(["version", str(snap), "--select-inline", ROW_RULES + BUCKETS, "--out", str(made)]) == 0
    v = open_version(made)
    shard = next(s for s in v.shards if v.bucket_selected(s, "hq").any())
    index = int(np.flatnonzero(v.bucket_selected(shard, "hq"))[0])
    doc_id = pq.read_table(shard.metadata, columns=["doc_id"])["doc_id"][index].as_py()
    assert take_down(made, tmp_path / "td", ids=[doc_id]) == 0
    td = open_version(tmp_path / "td")
    assert td.manifest["buckets"] == v.manifest["buckets"], "the quantiles as resolved"
    for s in v.shards:
        for b in td.bucket_names:
            expect = v.bucket_selected(s, b).copy()
            if s.name == shard.name:
                expect[index] = False
            assert (td.bucket_selected(s, b) == expect).all(), (s.name, b)
    entry = td.entry(shard)
    before = v.entry(shard)
    assert entry["buckets"]["hq"]["docs"] == before["buckets"]["hq"]["docs"] - 1
