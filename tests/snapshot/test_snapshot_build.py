"""The snapshot end to end on real MPI ranks: decontaminate, tokenize, write_shards, assembly.

The corpus is real Perl documentation with real benchmark items pasted into a few documents: gsm8k
and ARC are in the eval registry, humaneval is not (it stands for a benchmark published later).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from corpus.formats.docshard import iter_records
from corpus.model import Document
from corpus.select.selection import Selection, parse_inline
from corpus.snapshot.lookup import Snapshot
from corpus.snapshot.validate import validate_snapshot
from corpus.text.tokenizer import PinnedTokenizer
from corpus.version.plan import plan_version
from hpc_jobs.write_shards.census import shuffle_key
from tests.conftest import run_corpus, run_mpi
from tests.dedup.stage_io import output_digests
from tests.documents import with_new_text
from tests.snapshot.conftest import (
    CL100K,
    EVALS,
    OLMO,
    make_stage_dir,
    perl_docs,
    run_snapshot_stages,
    split,
    write_config,
)
from tests.snapshot.test_decont import item, plant
from tests.support.interruptions import assert_resumes_after_interruption

TARGET = 8000
#: small index parts, so that the indexes are read across several parts and every step of the global
#: phases has several parts per rank (the number of parts follows from the data and these)
DOC_GRAM_PART_ROWS, DOC_INDEX_PART_DOCS = 2000, 8
REGISTRY = ("gsm8k", "arc_easy", "arc_challenge")
PLANTED = {4: ("gsm8k", "gsm8k-0"), 10: ("arc_easy", "arc_easy-3"), 16: ("arc_challenge", "arc_challenge-7")}
LATER = {7: "HumanEval/5", 13: "HumanEval/42"}
#: a paraphrase: every 12th word changed, so no run of 15 8-grams is left, but 5-grams cover most words
PARAPHRASED = {19: ("gsm8k", "gsm8k-5")}


def paraphrase(text: str) -> str:
    return " ".join(w + "s" if i % 12 == 11 else w for i, w in enumerate(text.split()))


def corpus_docs() -> list[Document]:
    docs = perl_docs()
    for i, (bench, item_id) in {**PLANTED, **{k: ("humaneval", v) for k, v in LATER.items()}}.items():
        d = docs[i]
        docs[i] = with_new_text(d, plant(d.text, item(bench, item_id)), "license_hint", "dup_cluster_id")
    for i, (bench, item_id) in PARAPHRASED.items():
        d = docs[i]
        text = plant(d.text, paraphrase(item(bench, item_id)))
        docs[i] = with_new_text(d, text, "license_hint", "dup_cluster_id")
    return docs


def registry_dir(root: Path) -> Path:
    d = root / "evals"
    d.mkdir(parents=True, exist_ok=True)
    for name in REGISTRY:
        shutil.copy(EVALS / f"{name}.jsonl", d / f"{name}.jsonl")
    return d


def build(
    root: Path, ranks: int, seed: int = 7, tokenizer: Path = OLMO, reuse: Path | None = None, sample: int = 1
) -> Path:
    """A build directory with the snapshot stages run on ``ranks`` ranks (earlier stages copied from
    ``reuse``; ``sample``: the per-document index's doc_gram_sample)."""
    b = root / f"build-r{ranks}-s{seed}-{tokenizer.name.split('.')[0]}{f'-x{sample}' if sample > 1 else ''}"
    make_stage_dir(b / "stages" / "minhash_dedup", split(corpus_docs(), 4))
    if reuse is not None:
        for stage in ("decontaminate", "tokenize"):
            if (reuse / "stages" / stage).exists():
                shutil.copytree(reuse / "stages" / stage, b / "stages" / stage)
    cfg = write_config(
        b / "config.toml",
        seed=seed,
        decontaminate={
            "eval_dir": str(registry_dir(root)),
            "doc_gram_part_rows": DOC_GRAM_PART_ROWS,
            "doc_gram_sample": sample,
        },
        tokenize={"tokenizer": str(tokenizer)},
        write_shards={
            "shard_target_tokens": TARGET,
            "bucket_of_source": {"perl-mirror": "mirror"},
            "doc_index_part_docs": DOC_INDEX_PART_DOCS,
        },
    )
    run_snapshot_stages(b, ranks, cfg)
    return b


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("snapshots")


@pytest.fixture(scope="module")
def built(root) -> Path:
    return build(root, ranks=2)


@pytest.fixture(scope="module")
def snap(built) -> Snapshot:
    return Snapshot(built / "snapshot")


def read_megatron(prefix: Path) -> tuple[np.dtype, list[np.ndarray]]:
    """An independent reader of Megatron-LM's MMIDIDX format, written from its specification."""
    raw = prefix.with_suffix(".idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    version, code, n_seq, n_doc = struct.unpack("<QBQQ", raw[9:34])
    assert version == 1 and n_doc == n_seq + 1
    dtype = np.dtype(
        {
            1: np.uint8,
            2: np.int8,
            3: np.int16,
            4: np.int32,
            5: np.int64,
            6: np.float64,
            7: np.float32,
            8: np.uint16,
        }[code]
    )
    pos = 34
    sizes = struct.unpack_from(f"<{n_seq}i", raw, pos)
    pos += 4 * n_seq
    pointers = struct.unpack_from(f"<{n_seq}q", raw, pos)
    pos += 8 * n_seq
    doc_idx = struct.unpack_from(f"<{n_doc}q", raw, pos)
    assert list(doc_idx) == list(range(n_doc)) and pos + 8 * n_doc == len(raw)
    data = prefix.with_suffix(".bin").read_bytes()
    assert len(data) == sum(sizes) * dtype.itemsize
    return dtype, [
        np.frombuffer(data, dtype=dtype, count=n, offset=p) for n, p in zip(sizes, pointers, strict=True)
    ]


def kept_docs(build_dir: Path) -> dict[str, Document]:
    m = json.loads((build_dir / "stages" / "decontaminate" / "manifest.json").read_text())
    return {
        r["doc_id"]: Document.from_dict(r)
        for o in m["outputs"]
        for r in iter_records(build_dir / "stages" / "decontaminate" / o["path"])
    }


def check_shards_against_an_independent_reader(
    snap: Snapshot, tokenizer: Path, dtype: str, seed: int
) -> None:
    tok = PinnedTokenizer(tokenizer)
    docs = kept_docs(snap.dir.parent)
    seen = []
    for s in snap.manifest.shards:
        meta = json.loads((snap.dir / s.files["meta"]).read_text())
        got_dtype, arrays = read_megatron(snap.dir / s.path.removesuffix(".bin"))
        assert got_dtype == np.dtype(dtype) == np.dtype(snap.manifest.token_dtype)
        assert len(arrays) == s.docs == len(meta["doc_ids"]) and sum(a.shape[0] for a in arrays) == s.tokens
        expected = tok.encode_batch([docs[d].text for d in meta["doc_ids"]])
        assert all(np.array_equal(a, e) for a, e in zip(arrays, expected, strict=True))
        assert all(a[-1] == tok.eos_id for a in arrays)
        keys = [shuffle_key(d, seed) for d in meta["doc_ids"]]
        assert keys == sorted(keys), "documents in a shard are in shuffle-key order"
        seen += meta["doc_ids"]
    assert sorted(seen) == sorted(docs), "every kept document is in exactly one shard"


def test_planted_contamination_is_reported_stored_and_excluded_by_a_version(built, snap):
    report = snap.contamination_report()
    assert {b: r["docs_flagged"] for b, r in report["benchmarks"].items()} == {
        "arc_challenge": 1,
        "arc_easy": 1,
        "gsm8k": 1,
    }
    assert all(r["tokens_flagged"] > 0 and r["longest_run"] >= 1 for r in report["benchmarks"].values())
    assert report["benchmarks"]["gsm8k"]["longest_run"] >= 10
    assert report["docs_scanned"] == 60 and report["docs_flagged"] == 3
    flagged = {d["doc_id"]: d["matches"] for d in report["flagged_docs"] if d["matches"]}
    planted_ids = {corpus_docs()[i].doc_id: bench for i, (bench, _) in PLANTED.items()}
    assert {k: list(v) for k, v in flagged.items()} == {k: [b] for k, b in planted_ids.items()}
    # the paraphrase: no exact hit, the fuzzy tier's alone, reported apart
    fuzzy = {d["doc_id"]: d["fuzzy"] for d in report["flagged_docs"] if d["fuzzy"]}
    (paraphrased,) = [corpus_docs()[i].doc_id for i in PARAPHRASED]
    assert list(fuzzy) == [paraphrased] and fuzzy[paraphrased]["gsm8k"]["item"] == "gsm8k-5"
    assert 0.55 <= fuzzy[paraphrased]["gsm8k"]["share"] < 1 and report["docs_fuzzy_only"] == 1
    assert report["benchmarks"]["gsm8k"]["docs_fuzzy"] == report["benchmarks"]["gsm8k"]["items_fuzzy"] == 1
    planned = plan_version(snap.dir, Selection())  # contaminated documents are excluded by default
    stored, excluded = set(), set()
    for name, s in zip(snap.names, snap.manifest.shards, strict=True):
        doc_ids = json.loads((snap.dir / s.files["meta"]).read_text())["doc_ids"]
        stored |= set(doc_ids)
        excluded |= {d for d, kept in zip(doc_ids, planned.bits[name], strict=True) if not kept}
    assert len(stored) == 60 and excluded == set(flagged) | {paraphrased}, (
        "flagged documents, the fuzzy tier's too, are candidates a version excludes"
    )
    kept = plan_version(snap.dir, parse_inline("include_fuzzy_contaminated = true"))
    assert sum(int((~b).sum()) for b in kept.bits.values()) == 3, (
        "the fuzzy tier's hit is the version's choice"
    )
    assert kept.manifest["selection"]["include_fuzzy_contaminated"] is True
    assert snap.manifest.extra["artifacts"]["contamination_report"]["path"] == "decont/report.json"
    versions = snap.manifest.stage_versions
    assert versions["decontaminate"]["eval_registry_hash"].startswith("sha256:")
    assert versions["tokenize"]["tokenizer_hash"] == "sha256:" + snap.manifest.tokenizer["sha256"]


def test_shards_are_megatron_files_an_independent_reader_agrees_with(snap):
    check_shards_against_an_independent_reader(snap, OLMO, "uint16", seed=7)
    tokenizer = snap.manifest.tokenizer
    assert (tokenizer["eos_id"], tokenizer["vocab_size"], tokenizer["path"]) == (
        50279,
        50280,
        "tokenizer/gpt-neox-olmo-dolma-v1_5.tokenizer.json",
    )


def test_shards_are_homogeneous_by_bucket_and_cut_at_the_target_size(built, snap):
    docs = kept_docs(built)
    by_bucket: dict[str, list] = {}
    for s in snap.manifest.shards:
        meta = json.loads((snap.dir / s.files["meta"]).read_text())
        buckets = {
            "mirror" if docs[d].source == "perl-mirror" else docs[d].source_tier for d in meta["doc_ids"]
        }
        assert buckets == {s.bucket}
        by_bucket.setdefault(s.bucket, []).append((s.tokens, max(len(docs[d].text) for d in meta["doc_ids"])))
    assert sorted(by_bucket) == ["curated", "mirror"]
    for shards in by_bucket.values():
        for tokens, longest_doc_chars in shards[:-1]:  # the last shard of a bucket takes the rest
            assert abs(tokens - TARGET) <= longest_doc_chars  # within one document of the target


def test_the_snapshot_validates_and_a_damaged_copy_does_not(snap, tmp_path):
    assert validate_snapshot(snap.dir) == []
    copy = tmp_path / "copy"
    shutil.copytree(snap.dir, copy)
    bin_path = copy / snap.manifest.shards[0].path
    data = bytearray(bin_path.read_bytes())
    data[10] ^= 0xFF
    bin_path.write_bytes(bytes(data))
    (copy / "decont" / "report.json").unlink()
    lineage = snap.manifest.shards[-1].files["lineage"]
    (copy / lineage).write_text("{}\n")
    artifacts = snap.manifest.extra["artifacts"]
    gram_parts = artifacts["doc_gram_index"]["parts"]
    gram_part = copy / gram_parts[1]["path"]
    grams = bytearray(gram_part.read_bytes())
    grams[0] ^= 0x01
    gram_part.write_bytes(bytes(grams))
    short_part = copy / gram_parts[2]["path"]
    short_part.write_bytes(short_part.read_bytes()[:-16])  # one (8-gram, document) record gone
    doc_part = copy / artifacts["doc_index"]["parts"][0]["path"]
    doc_part.write_bytes(doc_part.read_bytes()[:-40])
    problems = validate_snapshot(copy)
    assert any("sha256 does not match the manifest" in p for p in problems)
    assert any("contamination_report" in p and "missing" in p for p in problems)
    assert any(p.startswith(lineage) for p in problems)
    assert any(p.startswith(f"artifact doc_gram_index ({gram_parts[1]['path']}): sha256") for p in problems)
    assert any(
        p == f"artifact doc_gram_index ({gram_parts[2]['path']}): {16 * gram_parts[2]['rows'] - 16} bytes, "
        f"the manifest says {16 * gram_parts[2]['rows']}"
        for p in problems
    )
    assert any(
        p.startswith(f"artifact doc_index ({artifacts['doc_index']['parts'][0]['path']}): ") and "bytes" in p
        for p in problems
    )


def test_trace_returns_the_document_behind_random_token_positions(built, snap):
    tok = PinnedTokenizer(OLMO)
    docs = kept_docs(built)
    rng = np.random.default_rng(12345)
    for _ in range(60):
        i = int(rng.integers(len(snap.manifest.shards)))
        offset = int(rng.integers(snap.manifest.shards[i].tokens))
        t = snap.trace(i, offset)
        doc = docs[t["doc"]["doc_id"]]
        tokens = tok.encode_batch([doc.text])[0]
        assert t["doc_tokens"] == tokens.shape[0]
        assert t["token_id"] == int(tokens[t["offset_in_doc"]])
        assert (t["doc"]["url"], t["doc"]["crawl_date"], t["doc"]["license_hint"]) == (
            doc.url,
            doc.crawl_date,
            doc.license_hint,
        )
        assert t["doc"]["dup_cluster_id"] == doc.dup_cluster_id
        assert snap.locate(doc.doc_id) == (t["shard"], t["doc_index"])


def test_trace_command_finds_the_snapshot_by_id_under_a_root(built, snap, root):
    sid = snap.snapshot_id
    proc = run_corpus(
        "trace",
        "--snapshot",
        sid[:19],
        "--root",
        str(root),
        "--shard",
        "mirror-00000",
        "--offset",
        "0",
        "--json",
    )
    out = json.loads(proc.stdout)
    assert out["snapshot_id"] == sid and out["shard"] == "mirror-00000" and out["offset_in_doc"] == 0
    assert out["doc"]["source"] == "perl-mirror" and out["doc"]["url"].startswith(
        "https://mirror.example.net/"
    )
    by_id = json.loads(
        run_corpus("trace", "--snapshot", str(built), "--doc-id", out["doc"]["doc_id"], "--json").stdout
    )
    assert (by_id["shard"], by_id["doc_index"], by_id["offset"]) == ("mirror-00000", 0, 0)
    bad = run_corpus(
        "trace",
        "--snapshot",
        "sha256:" + "0" * 64,
        "--root",
        str(root),
        "--shard",
        "0",
        "--offset",
        "0",
        check=False,
    )
    assert bad.returncode == 2 and "no snapshot" in bad.stderr


def test_a_later_benchmark_is_checked_against_the_retained_index(snap, root, tmp_path):
    proc = run_corpus(
        "contamination",
        "--benchmark",
        str(EVALS / "humaneval.jsonl"),
        "--snapshot",
        snap.snapshot_id,
        "--root",
        str(root),
        "--json",
    )
    (result,) = json.loads(proc.stdout)["benchmarks"]
    assert sorted(result["flagged_ids"]) == sorted(LATER.values())
    again = run_corpus(
        "contamination", "--benchmark", str(EVALS / "gsm8k.jsonl"), "--snapshot", str(snap.dir), "--json"
    )
    # the index holds every candidate, the flagged ones too: a check answers for everything stored
    assert json.loads(again.stdout)["benchmarks"][0]["flagged_ids"] == ["gsm8k-0"]
    table = run_corpus("contamination", "--snapshot", str(snap.dir)).stdout
    assert "gsm8k" in table and "3 of 60 documents flagged" in table
    # the index is the snapshot's own: a copy away from its build (no stages/ beside it) checks the same
    away = tmp_path / "elsewhere" / "snapshot"
    shutil.copytree(snap.dir, away)
    assert not (away.parent / "stages").exists()
    copied = json.loads(
        run_corpus(
            "contamination", "--benchmark", str(EVALS / "humaneval.jsonl"), "--snapshot", str(away), "--json"
        ).stdout
    )
    assert copied["benchmarks"] == json.loads(proc.stdout)["benchmarks"]
    listing = snap.manifest.extra["artifacts"]["doc_gram_index"]
    assert copied["index_rows"] == listing["rows"] == sum(p["rows"] for p in listing["parts"])
    assert (listing["rule"], listing["n"], listing["min_run"], listing["min_item_words"]) == (
        "passage-8gram-set-run/1",
        8,
        15,
        8,
    )
    assert all(
        p["path"].startswith("decont/8gram_docs/g") and p["path"].endswith(".dgr") for p in listing["parts"]
    )
    assert (
        not (snap.dir / "decont" / "13grams").exists()
        and "ngram_index" not in snap.manifest.extra["artifacts"]
    )


def test_a_sampled_index_keeps_a_share_of_the_records_and_is_checked_by_the_sampled_rule(snap, root):
    """doc_gram_sample = 4: the build flags what it flags with every 8-gram (its scan is unchanged), its
    index keeps about a quarter of the records, and a later benchmark is checked by the sampled rule,
    which still finds the planted items."""
    sampled = Snapshot(build(root, ranks=1, sample=4) / "snapshot")
    full, listing = (
        snap.manifest.extra["artifacts"]["doc_gram_index"],
        sampled.manifest.extra["artifacts"]["doc_gram_index"],
    )
    assert (full["sample"], listing["sample"]) == (1, 4)
    assert 0.15 < listing["rows"] / full["rows"] < 0.35
    assert sampled.contamination_report()["benchmarks"] == snap.contamination_report()["benchmarks"]
    proc = run_corpus(
        "contamination",
        "--benchmark",
        str(EVALS / "humaneval.jsonl"),
        "--snapshot",
        str(sampled.dir),
        "--json",
    )
    out = json.loads(proc.stdout)
    assert (out["rule"], out["sample"], out["index_rows"]) == (
        "passage-sampled-8gram-hits/1",
        4,
        listing["rows"],
    )
    assert sorted(out["benchmarks"][0]["flagged_ids"]) == sorted(LATER.values())
    table = run_corpus(
        "contamination", "--benchmark", str(EVALS / "humaneval.jsonl"), "--snapshot", str(sampled.dir)
    )
    assert "one 8-gram in 4 kept" in table.stdout


@pytest.mark.parametrize("ranks", [1, pytest.param(4, marks=pytest.mark.slow)])
def test_same_snapshot_id_on_any_rank_count(built, snap, root, ranks):
    other = build(root, ranks=ranks)
    assert json.loads((other / "snapshot" / "manifest.json").read_text())["snapshot_id"] == snap.snapshot_id


def test_a_new_seed_reshuffles_and_gives_a_new_snapshot_id(built, snap, root):
    other = Snapshot(build(root, ranks=2, seed=8, reuse=built) / "snapshot")
    assert other.snapshot_id != snap.snapshot_id
    assert other.manifest.stage_versions["tokenize"] == snap.manifest.stage_versions["tokenize"]
    order = {s.bucket: [] for s in snap.manifest.shards}
    new_order = {s.bucket: [] for s in other.manifest.shards}
    for sn, dest in ((snap, order), (other, new_order)):
        for s in sn.manifest.shards:
            dest[s.bucket] += json.loads((sn.dir / s.files["meta"]).read_text())["doc_ids"]
    assert {b: sorted(v) for b, v in order.items()} == {b: sorted(v) for b, v in new_order.items()}
    assert order != new_order


def test_a_large_vocabulary_gives_int32_shards(built, root):
    other = Snapshot(build(root, ranks=1, tokenizer=CL100K, reuse=built) / "snapshot")
    assert other.manifest.token_dtype == "int32" and other.manifest.tokenizer["eos_id"] == 100_256
    check_shards_against_an_independent_reader(other, CL100K, "int32", seed=7)


@pytest.mark.parametrize("append_eos", ["auto", "yes"])
def test_the_trace_of_the_loaders_view_is_what_the_loader_reads(snap, append_eos):
    from cli.commands.trace import describe_source
    from loader.dataset import SnapshotLoader
    from loader.trace import loader_at

    seq_len, batch = 256, 2
    eos = None if append_eos == "auto" else True
    rng = np.random.default_rng(7)
    for rank, world, step in ((0, 1, 0), (1, 2, 3), (2, 3, 5)):
        loader = SnapshotLoader(
            snap.dir,
            None,
            seed=11,
            seq_len=seq_len,
            batch_size=batch,
            dp_rank=rank,
            dp_world=world,
            append_eos=eos,
        )
        loader.seek(step)
        tokens = loader.next_batch().tokens.numpy()
        traced = loader_at(
            snap.dir, step, rank, world, seed=11, seq_len=seq_len, batch_size=batch, append_eos=eos
        ).traced_batch()
        for p in rng.integers(seq_len * batch, size=10):
            src = traced.source(int(p))
            out = describe_source(snap, src)
            expected = (
                snap.manifest.tokenizer["eos_id"]
                if src.appended_eos
                else snap.trace(src.shard, out["offset"])["token_id"]
            )
            assert tokens.reshape(-1)[p] == expected


def test_a_degenerate_shard_stops_the_build_with_a_report(tmp_path):
    docs = perl_docs(n=6)
    junk = Document.create(
        text="ha " * 6000,
        source="junk-site",
        source_tier="web",
        url="https://junk.example/",
        crawl_date="2026-06-01",
        raw_digest="0" * 64,
    )
    make_stage_dir(tmp_path / "stages" / "minhash_dedup", {"part-0": docs, "part-1": [junk]})
    cfg = write_config(
        tmp_path / "c.toml",
        decontaminate={"eval_dir": str(registry_dir(tmp_path))},
        write_shards={"bucket_of_source": {"junk-site": "junk"}},
    )
    prev = tmp_path / "stages" / "minhash_dedup"
    for name in ("decontaminate", "tokenize"):
        run_mpi(
            1,
            "-m",
            f"hpc_jobs.{name}",
            "--in",
            str(prev),
            "--out",
            str(tmp_path / "stages" / name),
            "--config",
            str(cfg),
        )
        prev = tmp_path / "stages" / name
    out = tmp_path / "stages" / "write_shards"
    proc = run_mpi(
        2,
        "-m",
        "hpc_jobs.write_shards",
        "--in",
        str(prev),
        "--out",
        str(out),
        "--config",
        str(cfg),
        check=False,
    )
    assert proc.returncode != 0
    assert "1 of 3 shards failed validation" in proc.stderr and "junk-00000" in proc.stderr
    assert "repeats" in proc.stderr and "top token" in proc.stderr
    report = json.loads((out / "validation.json").read_text())
    assert report["passed"] is False and report["shards"]["curated-00000"]["failures"] == []
    assert not (out / "manifest.json").exists() and not (out / "work" / "phase" / "complete.json").exists()
    assert not (out / "megatron").exists(), "no shard is published before every shard passed validation"


#: (stage, step, signal, rank, parts done before it): a kill -9 and a SIGUSR1 inside the global phases
INTERRUPTIONS = [
    ("decontaminate", "doc_grams", "KILL", 1, 2),
    ("decontaminate", "doc_grams", "USR1", 0, 1),
    ("write_shards", "shards", "KILL", 1, 1),
    ("write_shards", "doc_index", "USR1", 1, 1),
]


def test_the_indexes_and_the_phases_have_several_parts(built, snap):
    """What the lookups above and the interruptions below rely on, so that they can fail."""
    artifacts = snap.manifest.extra["artifacts"]
    assert len(artifacts["doc_gram_index"]["parts"]) >= 8 and len(artifacts["doc_index"]["parts"]) >= 4
    assert sum(p["docs"] for p in artifacts["doc_index"]["parts"]) == snap.manifest.extra["docs"] == 60
    for stage, step, *_ in INTERRUPTIONS:
        parts = list((built / "stages" / stage / "work" / "phase" / step).glob("*.done.json"))
        assert len(parts) >= 4, f"{stage}/{step}: {len(parts)} parts"


@pytest.mark.parametrize(("stage", "step", "sig", "rank", "after"), INTERRUPTIONS)
def test_an_interrupted_global_phase_resumes_from_its_completed_parts(
    stage, step, sig, rank, after, built, tmp_path, monkeypatch
):
    """The rerun redoes no completed part (counted from the markers on disk) and the stage's outputs
    (shards, lineage, both indexes and every digest its manifest lists) are byte-identical."""
    upstream = {"decontaminate": "minhash_dedup", "write_shards": "tokenize"}[stage]
    assert_resumes_after_interruption(
        stage,
        step,
        sig,
        rank,
        built / "stages" / upstream,
        tmp_path / stage,
        output_digests(built / "stages" / stage),
        monkeypatch,
        config=built / "config.toml",
        after_parts=after,
    )


def test_contamination_of_a_run_names_the_flagged_documents_it_read_and_the_step_it_first_did(snap, tmp_path):
    from loader.dataset import SnapshotLoader
    from loader.provenance import Padding

    seq_len, batch, world, steps = 128, 2, 2, 24
    loaders = [
        SnapshotLoader(snap.dir, None, seed=3, seq_len=seq_len, batch_size=batch, dp_rank=r, dp_world=world)
        for r in range(world)
    ]
    doc_ids = [json.loads((snap.dir / s.files["meta"]).read_text())["doc_ids"] for s in snap.manifest.shards]
    delivered: dict[str, int] = {}  # doc_id -> the first step the loader read a token of it
    for step in range(steps):
        for ld in loaders:
            traced = ld.traced_batch()
            for p in range(seq_len * batch):
                try:
                    src = traced.source(p)
                except Padding:
                    continue
                if not src.appended_eos:
                    delivered.setdefault(doc_ids[src.shard][src.doc], step)
    record = tmp_path / "record.json"
    record.write_text(json.dumps(loaders[0].global_record([ld.local_state() for ld in loaders])))

    def answered(*extra: str) -> dict[str, dict[str, int | None]]:
        args = ["contamination", "--snapshot", str(snap.dir), "--record", str(record), *extra]
        out = json.loads(run_corpus(*args, "--json").stdout)
        assert out["step"] == steps and out["world"] == world
        return {
            b["benchmark"]: {
                d["doc_id"]: d["first_read"]["step"] if d["read"] else None for d in b["documents"]
            }
            for b in out["benchmarks"]
        }

    flagged = {
        (bench, d["doc_id"]) for d in snap.contamination_report()["flagged_docs"] for bench in d["matches"]
    }
    by_build = answered()
    assert {(b, d) for b, docs in by_build.items() for d in docs} == flagged
    assert {(b, d): s for b, docs in by_build.items() for d, s in docs.items()} == {
        (b, d): delivered.get(d) for b, d in flagged
    }
    assert any(s is not None for docs in by_build.values() for s in docs.values())
    assert answered("--benchmark", str(EVALS / "gsm8k.jsonl")) == {"gsm8k": by_build["gsm8k"]}
    text = run_corpus("contamination", "--snapshot", str(snap.dir), "--record", str(record)).stdout
    assert f"run up to step {steps} ({world} ranks" in text and "1 flagged documents" in text
