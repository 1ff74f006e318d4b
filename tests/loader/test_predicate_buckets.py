"""A version with buckets by predicate, made by ``corpus version`` from a real snapshot's metadata table
and read by the loader: disjoint first-match buckets whose counts reconcile, quantiles resolved as DuckDB
resolves them, one stream per (shard, bucket) pair read exactly once per epoch on any world size, recipes
and recipe-audit by bucket name, moves between versions only with the same buckets, tombstones and trace.

The snapshot's tokens are distinct ids, so "every document of a bucket exactly once and nothing outside
it" is checked token by token, per bucket, from the bucket the loader names for each delivered row.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from snapshot_factory import EOS, phase_toml, recipe_toml, write_lineage_snapshot

from cli.commands.recipe_audit import audit_recipe
from cli.commands.trace import describe_source
from cli.main import main as corpus
from corpus.formats.megatron import read_index
from corpus.model.errors import UserError
from corpus.select.recipe import RecipeError, parse_recipe
from corpus.select.selection import parse_inline
from corpus.snapshot.lookup import Snapshot
from corpus.version.buckets import UNBUCKETED
from corpus.version.open import open_version
from corpus.version.plan import PREDICATE_GROUP, make_version
from loader import SnapshotLoader
from loader.dataset import ResumeRefused
from loader.trace import loader_at, trace_position
from loader.versions import LoaderVersion

ROW_RULES = 'exclude_hosts = ["b.example.org"]\n'
BUCKETS = """
[[buckets]]
name = "hq"
where = "source IN ('web', 'wiki') AND quality >= q60"
[[buckets]]
name = "fr"
where = "lang = 'fr'"
[[buckets]]
name = "long"
where = "tokens >= 20"
"""
NAMES = ("hq", "fr", "long")
OPTS = dict(seed=5, seq_len=16, batch_size=2, run_len=2, chunk_tokens=24)


@pytest.fixture(scope="module")
def snap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The id snapshot's three physical buckets, with a tokenizer to pin recipes to and lineage to trace."""
    return write_lineage_snapshot(tmp_path_factory.mktemp("predicate-snapshot"))


@pytest.fixture(scope="module")
def version(snap: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("predicate-version") / "v"
    make_version(snap, parse_inline(ROW_RULES + BUCKETS), out)
    return out


def metadata(v) -> dict[str, np.ndarray]:
    """The metadata table's columns the buckets name, one row per stored document (shard-major), and
    whether the version selected it."""
    files = [str(s.metadata) for s in v.shards]
    cols = duckdb.execute(
        'SELECT shard, "index", source, lang, quality, tokens FROM read_parquet(?) ORDER BY shard, "index"',
        [files],
    ).fetchnumpy()
    cols["selected"] = np.concatenate([v.selected(s) for s in sorted(v.shards, key=lambda s: s.name)])
    return cols


def test_buckets_are_disjoint_first_match_subsets_of_the_selection_and_the_rest_is_counted_unbucketed(
    version,
):
    v = open_version(version)
    m = metadata(v)
    sel = m["selected"]
    con = duckdb.connect()
    con.register(
        "selected_docs", pa.table({k: m[k] for k in ("source", "lang", "quality", "tokens")}).filter(sel)
    )
    q60 = con.execute(
        "SELECT quantile_disc(quality, 0.6) FROM selected_docs WHERE source IN ('web', 'wiki')"
    ).fetchall()[0][0]
    assert v.manifest["buckets"][0]["resolved"] == {"quality": {"q60": q60}}
    hq = np.isin(m["source"], ["web", "wiki"]) & (m["quality"] >= q60)
    want = np.select([hq, m["lang"] == "fr", m["tokens"] >= 20], [0, 1, 2], -1)
    want[~sel] = -1
    got = np.full(sel.shape[0], -1)
    at = 0
    for s in sorted(v.shards, key=lambda s: s.name):
        pairs = [v.bucket_selected(s, b) for b in NAMES]
        assert (sum(p.astype(int) for p in pairs) <= 1).all(), f"buckets overlap in {s.name}"
        assert all((p & ~v.selected(s)).sum() == 0 for p in pairs), (
            f"a bucket outside the selection in {s.name}"
        )
        for k, p in enumerate(pairs):
            got[at : at + s.docs][p] = k
        at += s.docs
    assert got.tolist() == want.tolist()
    unbucketed = sel & (want == -1)
    assert all((want == k).any() for k in range(3)) and unbucketed.any()  # every case is exercised
    assert (v.manifest["unbucketed_docs"], v.manifest["unbucketed_tokens"]) == (
        int(unbucketed.sum()),
        int(m["tokens"][unbucketed].sum()),
    )
    counts = Counter()
    for _, b, docs, tokens in v.bucket_counts():
        counts[b, "docs"] += docs
        counts[b, "tokens"] += tokens
    for k, b in enumerate(NAMES):
        assert (counts[b, "docs"], counts[b, "tokens"]) == (
            int((want == k).sum()),
            int(m["tokens"][want == k].sum()),
        )


def test_the_dry_run_shows_each_bucket_and_the_unbucketed(snap, version, capsys):
    assert corpus(["version", str(snap), "--select-inline", ROW_RULES + BUCKETS, "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    v = open_version(version)
    assert list(out["kept"][PREDICATE_GROUP]) == [*NAMES, UNBUCKETED]
    assert out["kept"][PREDICATE_GROUP][UNBUCKETED]["docs"] == v.manifest["unbucketed_docs"]
    assert out["snapshot_id"] == v.snapshot_id and out["buckets"] == v.manifest["buckets"]


def test_a_bucket_the_selection_leaves_empty_is_refused_before_anything_is_written(snap, tmp_path):
    toml = BUCKETS + '[[buckets]]\nname = "huge"\nwhere = "tokens > 1000000"\n'
    with pytest.raises(
        UserError, match=r"keeps no document of bucket\(s\) huge, which the selection defines"
    ):
        make_version(snap, parse_inline(toml), tmp_path / "v")
    assert not (tmp_path / "v").exists()


def test_the_loader_has_one_stream_per_shard_and_bucket_empty_ones_included(version):
    lv = LoaderVersion.open(version)
    n = len(lv.manifest.shards)
    assert len(lv.stream_shards) == len(lv.stream_manifest.shards) == 3 * n
    assert [s.bucket for s in lv.stream_shards] == list(NAMES) * n
    assert lv.shard_of == tuple(i for i in range(n) for _ in NAMES)
    assert any(s.docs == 0 for s in lv.stream_shards)  # e.g. a code shard's hq stream
    v = lv.version
    for k, s in enumerate(lv.stream_shards):
        ref = next(r for r in v.shards if r.name == lv.name(k))
        assert lv.selected(k).tolist() == v.bucket_selected(ref, s.bucket).tolist()
        assert lv.stream_manifest.shards[k].path == lv.manifest.shards[lv.shard_of[k]].path


def bucket_tokens(version_dir: Path) -> dict[str, Counter]:
    """Per bucket, every token of its documents once and one EOS per document (one epoch)."""
    v = open_version(version_dir)
    out = {b: Counter() for b in NAMES}
    for shard, ref in zip(v.base.shards, v.shards, strict=True):
        idx = read_index(v.base_dir / shard.files["idx"])
        toks = np.fromfile(v.base_dir / shard.path, dtype=idx.dtype)
        for b in NAMES:
            docs = np.flatnonzero(v.bucket_selected(ref, b))
            for d in docs:
                start = int(idx.offsets[d]) // idx.dtype.itemsize
                out[b].update(int(t) for t in toks[start : start + int(idx.lengths[d])])
            out[b][EOS] += len(docs)
    return out


def read_by_bucket(
    loaders: list[SnapshotLoader], delivered: dict[str, Counter], steps: int | None = None
) -> None:
    """Step every rank together, counting each delivered token under the bucket its row came from."""
    n = 0
    while steps is None or n < steps:
        batches = [ld.next_batch() for ld in loaders]
        if all(b is None for b in batches):
            return
        for b in (b for b in batches if b is not None):
            for row, bucket in enumerate(b.buckets):
                delivered.setdefault(bucket, Counter()).update(b.tokens[row][b.loss_mask[row]].tolist())
        n += 1


def loaders(root: Path, world: int) -> list[SnapshotLoader]:
    return [SnapshotLoader(root, dp_rank=r, dp_world=world, epoch_caps=1, **OPTS) for r in range(world)]


def read_across_a_resume(
    first: Path, before: dict[str, Counter], steps: int, then: Path, after: dict[str, Counter]
) -> dict:
    """3 ranks read ``first`` for ``steps`` steps into ``before``; 2 ranks resume their record on ``then``
    and read it to the end into ``after``; the record."""
    ranks = loaders(first, 3)
    read_by_bucket(ranks, before, steps=steps)
    record = ranks[0].global_record([ld.local_state() for ld in ranks])
    resumed = loaders(then, 2)
    for ld in resumed:
        ld.load_record(record)
    read_by_bucket(resumed, after)
    return record


def test_three_ranks_read_every_document_of_each_bucket_once_and_nothing_outside_it(version):
    delivered: dict[str, Counter] = {}
    read_by_bucket(loaders(version, 3), delivered)
    assert delivered == bucket_tokens(version)


def test_a_resume_at_another_world_size_reads_each_bucket_exactly_once(version):
    delivered: dict[str, Counter] = {}
    read_across_a_resume(version, delivered, 7, version, delivered)
    assert delivered == bucket_tokens(version)


PREDICATE_PHASES = "".join(
    [
        phase_toml("main", 600, 16, {"hq": 0.4, "fr": 0.3, "long": 0.3}, run_len=2),
        phase_toml("anneal", 300, 8, {"hq": 0.7, "long": 0.3}, max_epochs={"hq": 2}),
    ]
)


def test_a_recipe_names_the_versions_buckets_and_one_naming_another_is_refused(version):
    v_id = open_version(version).snapshot_id
    with pytest.raises(
        RecipeError,
        match=r"name buckets the snapshot does not define: \['code', 'web', 'wiki'\] "
        r"\(it defines \['fr', 'hq', 'long'\]\)",
    ):
        SnapshotLoader.from_recipe(parse_recipe(recipe_toml(v_id)), version, dp_rank=0, dp_world=1)
    recipe = parse_recipe(recipe_toml(v_id, PREDICATE_PHASES))
    ld = SnapshotLoader.from_recipe(recipe, version, dp_rank=0, dp_world=1, run_len=2, chunk_tokens=24)
    assert set(ld.next_batch().buckets) <= set(NAMES)


def test_recipe_audit_on_the_version_reports_its_buckets(version, tmp_path, capsys):
    v_id = open_version(version).snapshot_id
    report = audit_recipe(
        parse_recipe(recipe_toml(v_id, PREDICATE_PHASES)), version, 3, batch_size=2, chunk_tokens=24
    )
    assert {r["bucket"] for r in report["buckets"]} == set(NAMES)
    (tmp_path / "r.toml").write_text(recipe_toml(v_id, PREDICATE_PHASES))
    assert (
        corpus(
            [
                "recipe-audit",
                str(tmp_path / "r.toml"),
                "--snapshot",
                str(version),
                "--world",
                "3",
                "--batch-size",
                "2",
                "--chunk-tokens",
                "24",
            ]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert all(f"\n  {b} " in table for b in NAMES)


def test_a_move_keeps_same_named_buckets_and_refuses_other_buckets_unless_told(snap, version, tmp_path):
    """Same bucket names: stream by stream, a document still in its bucket is read once in all, and after
    the move a bucket delivers only its new documents. Other buckets (here: the physical ones) are refused
    naming both lists, or start fresh epochs with allow_snapshot_mismatch."""
    stricter_dir, physical = tmp_path / "s", tmp_path / "p"
    stricter = make_version(snap, parse_inline(ROW_RULES + BUCKETS.replace("q60", "q80")), stricter_dir)
    assert (
        stricter.manifest["buckets"][0]["resolved"]
        != open_version(version).manifest["buckets"][0]["resolved"]
    )
    before, after = {}, {}
    record = read_across_a_resume(version, before, 5, stricter_dir, after)
    old, new = bucket_tokens(version), bucket_tokens(stricter_dir)
    for b in NAMES:
        assert not set(after.get(b, Counter())) - set(new[b]), b
        both = (set(old[b]) & set(new[b])) - {EOS}
        assert {before.get(b, Counter())[t] + after.get(b, Counter())[t] for t in both} == {1}, b
    make_version(snap, parse_inline(ROW_RULES), physical)
    with pytest.raises(
        ResumeRefused,
        match=r"with buckets \(hq, fr, long\), this loader reads .* with buckets "
        r"\(physical\).*allow_snapshot_mismatch=True",
    ):
        loaders(physical, 1)[0].load_record(record)
    fresh = loaders(physical, 1)[0]
    fresh.load_record(record, allow_snapshot_mismatch=True)
    assert fresh.step == record["step"] and fresh.next_batch() is not None


def test_a_tombstone_keeps_the_buckets_as_made_and_a_tampered_bucket_bitmap_is_refused(version, tmp_path):
    v = open_version(version)
    gone = v.shards[0].name
    assert (
        corpus(
            ["tombstone", str(version), "--shard", gone, "--reason", "takedown", "--out", str(tmp_path / "t")]
        )
        == 0
    )
    t = open_version(tmp_path / "t")
    assert t.manifest["buckets"] == v.manifest["buckets"]
    for old, new in zip(v.shards, t.shards, strict=True):
        for b in NAMES:
            want = np.zeros(old.docs, bool) if old.name == gone else v.bucket_selected(old, b)
            assert t.bucket_selected(new, b).tolist() == want.tolist()
    streams = LoaderVersion.open(tmp_path / "t").stream_shards
    assert (
        sum(s.docs for s in streams[:3])
        == 0
        < sum(s.docs for s in LoaderVersion.open(version).stream_shards[:3])
    )
    bitmap = tmp_path / "t" / t.entries[1]["buckets"]["fr"]["bitmap"]
    bitmap.write_bytes(bytes(len(bitmap.read_bytes())))
    with pytest.raises(
        UserError, match=rf"bitmap of shard {t.shards[1].name} bucket fr does not match its digest"
    ):
        open_version(tmp_path / "t").bucket_selected(t.shards[1], "fr")


def test_trace_names_the_shard_document_and_bucket_the_loader_read(snap, version):
    lv = LoaderVersion.open(version)
    for step, rank, position in ((3, 1, 5), (9, 2, 20)):
        ld = loader_at(version, step, rank, 3, epoch_caps=1, **OPTS)
        src = trace_position(ld, position)
        out = describe_source(Snapshot(lv.root), src, lv.shard_of)
        assert out["shard"] == lv.name(src.shard) and out["loader"]["bucket"] == src.bucket
        assert lv.bucket_of(out["shard"], out["doc_index"]) == src.bucket
        shard_tokens = np.fromfile(lv.root / lv.manifest.shards[lv.shard_of[src.shard]].path, dtype=np.int32)
        assert not src.appended_eos and src.token_id == int(shard_tokens[out["offset"]])
