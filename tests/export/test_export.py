"""`corpus export` writes a version's selected documents, and only those, in the formats other tools read;
the tests read each export with that tool's own client: Megatron-Core's IndexedDataset, Hugging Face
datasets and DuckDB on the Parquet, datatrove's JsonlReader on the JSONL. The same version gives the
same bytes on any rank count, an interrupted export resumes, a tombstoned shard is never exported."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pytest

from corpus.export.export import begin, export_unit, request
from corpus.export.files import PARTS
from corpus.export.units import export_units
from corpus.formats.megatron import IndexedShard
from corpus.model.digest import sha256_hex
from corpus.model.manifest import read_snapshot_manifest
from corpus.snapshot.validate import validate_snapshot
from corpus.version.open import open_version
from corpus.version.query import connect
from tests.conftest import ROOT, run_corpus

SAMPLE = [ROOT / "sample" / name for name in ("web", "curated", "edge")]


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    """The bundled sample, built on 2 ranks: its default version selects some of its candidates."""
    out = tmp_path_factory.mktemp("export") / "build"
    run_corpus("build", "--input", *map(str, SAMPLE), "--out", str(out), "--ranks", "2")
    return out


def exported_manifest(snapshot: Path) -> dict:
    """An exported snapshot's manifest as JSON has it, with its shard entries (kept beside it) listed."""
    listed = [s.to_dict() for s in read_snapshot_manifest(snapshot).shards]
    return {**json.loads((snapshot / "manifest.json").read_text()), "shards": listed}


def export(version: Path, fmt: str, out: Path, *extra: str, check: bool = True):
    proc = run_corpus("export", str(version), "--format", fmt, "--out", str(out), *extra, check=check)
    if check:
        assert proc.stdout.splitlines()[-1].startswith("export_id sha256:"), proc.stdout
    return proc


def selected_docs(version: Path) -> dict[str, dict]:
    """doc_id -> (bucket, tokens) of every document the version selects, from its metadata table."""
    con = connect(open_version(version))
    rows = con.execute("SELECT doc_id, shard, tokens FROM docs WHERE selected").fetchall()
    return {doc_id: {"shard": shard, "tokens": tokens} for doc_id, shard, tokens in rows}


def rejected_count(version: Path) -> int:
    return (
        connect(open_version(version)).execute("SELECT count(*) FROM docs WHERE NOT selected").fetchone()[0]
    )


def candidate_tokens(build: Path) -> dict[str, np.ndarray]:
    """Every stored document's tokens, by doc_id, read from the candidates' own shards."""
    cand = build / "candidates"
    out = {}
    for meta in sorted((cand / "shards").glob("*.meta.json")):
        shard = IndexedShard(meta.with_name(meta.name.removesuffix(".meta.json")))
        for i, doc_id in enumerate(json.loads(meta.read_text())["doc_ids"]):
            out[doc_id] = np.array(shard.document(i))
    return out


def test_megatron_export_holds_exactly_the_selected_documents_as_megatron_core_reads_them(build, tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    export(build, "megatron", tmp_path / "m")
    manifest = exported_manifest(tmp_path / "m")
    selected, stored = selected_docs(build), candidate_tokens(build)
    assert rejected_count(build) > 0  # the candidates hold documents the version does not select
    seen = {}
    for shard in manifest["shards"]:
        prefix = str(tmp_path / "m" / shard["path"].removesuffix(".bin"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dataset = IndexedDataset(prefix)
        doc_ids = json.loads((tmp_path / "m" / shard["files"]["meta"]).read_text())["doc_ids"]
        assert len(dataset) == len(doc_ids) == shard["docs"]
        for i, doc_id in enumerate(doc_ids):
            assert np.array_equal(dataset[i], stored[doc_id]), doc_id  # the candidates' (the loader's) ids
            seen[doc_id] = int(dataset.sequence_lengths[i])
    assert seen == {d: s["tokens"] for d, s in selected.items()}
    v = open_version(build)
    assert manifest["extra"]["docs"] == sum(d for _, d, _ in v.selected_counts()) == len(selected)
    assert manifest["extra"]["tokens"] == sum(t for _, _, t in v.selected_counts())
    assert manifest["extra"]["export"]["version_id"] == v.snapshot_id
    # the blend: one weight per prefix, by tokens, and the file Megatron's --data-args-path reads
    weights = [w for w, _ in manifest["extra"]["blend"]]
    assert abs(sum(weights) - 1) < 1e-9
    args = (tmp_path / "m" / "megatron" / "data-args.txt").read_text().split()
    assert [float(w) for w in args[::2]] == weights
    assert all(Path(p + ".bin").is_file() for p in args[1::2])


def test_a_megatron_export_is_a_snapshot_that_validates_traces_and_queries(build, tmp_path):
    export(build, "megatron", tmp_path / "m")
    assert validate_snapshot(tmp_path / "m") == []
    manifest = exported_manifest(tmp_path / "m")
    shard = manifest["shards"][-1]
    name = Path(shard["path"]).name.removesuffix(".bin")
    traced = json.loads(
        run_corpus("trace", "--snapshot", str(tmp_path / "m"), "--shard", name, "--offset", "5").stdout
    )
    first = json.loads((tmp_path / "m" / shard["files"]["meta"]).read_text())["doc_ids"][0]
    assert traced["doc"]["doc_id"] == first and traced["doc_index"] == 0
    url = duckdb.sql(
        f"SELECT url FROM read_parquet('{tmp_path / 'm' / shard['files']['metadata']}') WHERE index = 0"
    ).fetchall()[0][0]
    assert traced["doc"]["url"] == url
    counted = run_corpus("query", str(tmp_path / "m"), "SELECT count(*) AS n FROM docs", "--json").stdout
    assert json.loads(counted)[0]["n"] == len(selected_docs(build))
    # this project's loader reads the export as a snapshot: every token it delivers is an exported one
    from loader import SnapshotLoader

    exported = np.concatenate(
        [np.fromfile(tmp_path / "m" / s["path"], dtype=manifest["token_dtype"]) for s in manifest["shards"]]
    )
    weights = {b: 1.0 for b in manifest["extra"]["buckets"]}
    batch = next(
        iter(SnapshotLoader(tmp_path / "m", dp_rank=0, dp_world=1, seq_len=64, batch_size=2, mixture=weights))
    )
    assert set(np.asarray(batch.tokens).ravel().tolist()) <= set(exported.tolist())


def test_parquet_export_is_read_by_datasets_and_duckdb_with_each_documents_own_text(build, tmp_path):
    import datasets

    export(build, "parquet", tmp_path / "p")
    selected = selected_docs(build)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = datasets.load_dataset(str(tmp_path / "p"), split="train")  # the README's configs
    assert sorted(rows["doc_id"]) == sorted(selected)
    for row in rows:
        assert sha256_hex(row["text"]) == row["text_digest"]
    by_glob = datasets.load_dataset("parquet", data_files=str(tmp_path / "p/data/*/*.parquet"), split="train")
    assert by_glob.num_rows == len(selected)
    per_bucket = duckdb.sql(
        f"SELECT bucket, count(*), sum(tokens) FROM '{tmp_path}/p/data/*/*.parquet' GROUP BY 1 ORDER BY 1"
    ).fetchall()
    v = open_version(build)
    want = Counter()
    for shard, docs, tokens in v.selected_counts():
        want[(shard.bucket, "docs")] += docs
        want[(shard.bucket, "tokens")] += tokens
    assert per_bucket == [(b, want[(b, "docs")], want[(b, "tokens")]) for b, _, _ in per_bucket]
    assert {b for b, _, _ in per_bucket} == {s.bucket for s, docs, _ in v.selected_counts() if docs}


def test_jsonl_export_is_read_by_datatrove_in_the_dolma_shape(build, tmp_path):
    from datatrove.pipeline.readers import JsonlReader

    export(build, "jsonl", tmp_path / "j", "--added", "2026-12-05")
    docs = list(JsonlReader(str(tmp_path / "j" / "data"), glob_pattern="*/*.jsonl.zst").run())
    assert sorted(d.id for d in docs) == sorted(selected_docs(build))
    assert all(d.text for d in docs)
    import zstandard

    first = next((tmp_path / "j" / "data").glob("*/*.jsonl.zst"))
    text = zstandard.ZstdDecompressor().decompressobj().decompress(first.read_bytes()).decode()
    record = json.loads(text.splitlines()[0])
    assert list(record) == ["id", "text", "source", "added", "created", "metadata"]
    assert record["added"] == "2026-12-05" and sha256_hex(record["text"]) == record["metadata"]["text_digest"]


@pytest.mark.parametrize(("fmt", "ranks"), [("parquet", "3"), ("megatron", "2")])
def test_the_same_version_gives_the_same_export_bytes_on_any_rank_count(build, tmp_path, fmt, ranks):
    one = export(build, fmt, tmp_path / "one").stdout.splitlines()[-1]
    many = export(build, fmt, tmp_path / "many", "--ranks", ranks).stdout.splitlines()[-1]
    assert one == many
    files = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file())
    assert files == sorted(
        p.relative_to(tmp_path / "many") for p in (tmp_path / "many").rglob("*") if p.is_file()
    )
    for rel in files:
        if rel.name != "data-args.txt":  # where the export lies, for Megatron's command line
            assert (tmp_path / "one" / rel).read_bytes() == (tmp_path / "many" / rel).read_bytes(), rel


def test_an_interrupted_export_resumes_with_the_bytes_of_an_uninterrupted_one(build, tmp_path):
    clean = export(build, "jsonl", tmp_path / "clean").stdout.splitlines()[-1]
    out = tmp_path / "cut"
    v = open_version(build)
    req = request(v, "jsonl", None, None)
    assert begin(out, req)
    units = export_units(v)
    export_unit(v, units[0], req, out, [])  # one unit done before the kill ...
    scratch = out / PARTS / f"{units[-1].name}.tmp" / "data"
    scratch.mkdir(parents=True)
    (scratch / "half-written").write_bytes(b"\x28\xb5")  # ... another cut mid-write
    assert export(build, "jsonl", out).stdout.splitlines()[-1] == clean
    assert not (out / PARTS).exists()
    again = export(build, "jsonl", out)
    assert "complete already" in again.stdout + again.stderr


def test_a_tombstoned_shard_is_never_exported(build, tmp_path):
    v = open_version(build)
    web = next(s.name for s in v.shards if s.bucket == "web")
    run_corpus("tombstone", str(build), "--shard", web, "--reason", "takedown", "--out", str(tmp_path / "v"))
    export(tmp_path / "v", "megatron", tmp_path / "m")
    manifest = exported_manifest(tmp_path / "m")
    assert manifest["shards"] and all(web not in s["path"] for s in manifest["shards"])
    assert set(manifest["extra"]["buckets"]) == {s.bucket for s in v.shards} - {"web"}


def test_buckets_by_predicate_are_the_exports_buckets(build, tmp_path):
    sel = '[policy]\n[[buckets]]\nname = "long"\nwhere = "tokens >= 2000"\n[[buckets]]\nname = "short"\n'
    run_corpus("version", str(build), "--select-inline", sel, "--out", str(tmp_path / "v"))
    export(tmp_path / "v", "parquet", tmp_path / "p")
    got = duckdb.sql(
        f"SELECT bucket, count(*), min(tokens), max(tokens) FROM '{tmp_path}/p/data/*/*.parquet' GROUP BY 1"
    ).fetchall()
    counts = {b: n for b, n, _, _ in got}
    v = open_version(tmp_path / "v")
    for bucket in ("long", "short"):
        assert counts.get(bucket, 0) == sum(d for _, b, d, _ in v.bucket_counts() if b == bucket)
    assert all(lo >= 2000 for b, _, lo, _ in got if b == "long")
    assert all(hi < 2000 for b, _, _, hi in got if b == "short")


def test_refusals_are_one_line_and_write_nothing(build, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    proc = export(build, "jsonl", tmp_path / "full", check=False)
    assert proc.returncode == 2 and "not empty" in proc.stderr
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == ["x"]
    proc = export(build, "megatron", tmp_path / "w", "--weights", "web=1,books=2", check=False)
    assert proc.returncode == 2 and "unknown bucket(s) books" in proc.stderr
    assert not (tmp_path / "w").exists()
    export(build, "jsonl", tmp_path / "j")
    proc = export(build, "parquet", tmp_path / "j", check=False)
    assert proc.returncode == 2 and "holds another export (jsonl of" in proc.stderr
