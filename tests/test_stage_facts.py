"""Facts one stage hands another are typed: they round-trip through a manifest's JSON, a manifest of an
older stage version that lacks them is a clear error naming the stage, not a KeyError, and an optional
fact a manifest lacks reads as its one default (a snapshot manifest's too)."""

import pytest

from corpus.model import ShardRef, SnapshotManifest, SnapshotShard, StageManifest
from corpus.model.facts import (
    BaseCandidates,
    CodeFilesFacts,
    DecontaminationFacts,
    DedupFacts,
    FileRef,
    HoldoutFacts,
    MissingFacts,
    PartitionedIndex,
    ShardNumbering,
    SnapshotFacts,
    StageFacts,
    TokenShardListing,
    WriteShardsFacts,
    quality_model_hash,
    tokenizer_facts,
)
from corpus.snapshot.layout import BASE_DOC_INDEX
from corpus.text.normalize import NORMALIZATION_VERSION
from corpus.text.tokenizer import TokenizerInfo


def manifest(stage: str, extra: dict) -> StageManifest:
    return StageManifest(
        stage=stage,
        stage_version="1",
        config={},
        config_hash="h",
        inputs=(),
        outputs=(),
        side_outputs=(),
        shard_counts={},
        totals={},
        extra=extra,
    )


def test_write_shards_facts_round_trip_through_the_manifest_extra():
    index = PartitionedIndex(
        "docs", 2, 7, tuple((FileRef(f"lineage/doc_index/d{i}.docidx", f"{i:064x}"), i) for i in range(4))
    )
    shard = TokenShardListing(
        "web-00000", "web", 3, 120, {".bin": FileRef("megatron/web-00000.bin", "ab" * 32)}
    )
    facts = WriteShardsFacts((shard,), index)
    assert WriteShardsFacts.of(manifest("write_shards", facts.to_extra())) == facts


def test_decontamination_and_tokenizer_facts_round_trip():
    rows = PartitionedIndex(
        "rows",
        1,
        9,
        tuple((FileRef(f"doc_gram_index/g{i:05d}.dgr", "cd" * 32), 4 + i) for i in range(2)),
        "s/1",
        "gram <u8, doc <u8",
    )
    matching = {
        "rule": "passage-8gram-set-run/1",
        "ngram": 8,
        "min_run": 15,
        "min_item_words": 8,
        "scheme": "s/1",
    }
    facts = DecontaminationFacts("sha256:r", {"gsm8k": {"items": 3}}, matching, rows)
    assert DecontaminationFacts.of(manifest("decontaminate", facts.to_extra())) == facts
    settings = {"rule": "passage-8gram-set-run/1", "n": 8, "min_run": 15, "min_item_words": 8}
    assert facts.rule_settings() == settings | {"sample": 1}  # a stage before doc_gram_sample kept all
    sampled = DecontaminationFacts("sha256:r", {}, matching | {"doc_gram_sample": 64}, rows)
    assert sampled.rule_settings() == settings | {"sample": 64}
    info = TokenizerInfo("t.json", "ef" * 32, 50280, "<|endoftext|>", 0, "uint16")
    assert tokenizer_facts(manifest("tokenize", {"tokenizer": info.to_dict()})) == info


def test_missing_facts_name_the_stage_and_what_is_missing():
    with pytest.raises(MissingFacts, match="the write_shards stage .version 1. lists no doc_index"):
        WriteShardsFacts.of(manifest("write_shards", {"token_shards": []}))
    with pytest.raises(MissingFacts, match="expected the manifest of the tokenize stage"):
        tokenizer_facts(manifest("write_shards", {}))
    # an older decontaminate: a 13-gram index, no per-document one, no rule's settings
    v4 = {
        "eval_registry_hash": "sha256:r",
        "eval_registry": {},
        "matching": {"n": 13, "min_run": 10},
        "ngram_index": {},
    }
    with pytest.raises(
        MissingFacts, match=r"the decontaminate stage .version 1. lists no doc_gram_index: rerun"
    ):
        DecontaminationFacts.of(manifest("decontaminate", v4))
    with pytest.raises(MissingFacts, match="does not say its rule's rule, ngram, min_item_words"):
        DecontaminationFacts.of(manifest("decontaminate", {**v4, "doc_gram_index": {}}))


def snapshot(extra: dict, shards: int = 0) -> SnapshotManifest:
    shard = SnapshotShard("shards/web-00000.bin", "0" * 64, "web", 2, 20)
    return SnapshotManifest(shards=(shard,) * shards, stage_versions={}, seed=0, extra=extra)


def test_optional_facts_keep_their_defaults_where_a_manifest_lacks_them():
    bare = StageFacts.of(manifest("annotate", {}))
    assert (bare.skipped_records, bare.alarms) == (None, ())
    facts = StageFacts.of(manifest("ingest", {"skipped_records": {"request": 3}, "alarms": ["big"]}))
    assert (facts.skipped_records, facts.alarms) == ({"request": 3}, ("big",))
    full = DedupFacts.of(manifest("minhash_dedup", {}))
    assert full.normalization_version == NORMALIZATION_VERSION
    assert (full.base_duplicates, full.base_linked_docs, full.base_generations) == (None, None, None)
    delta = DedupFacts.of(
        manifest(
            "exact_dedup",
            {"normalization_version": "1", "index": {"base_generations": ["g1"], "base_duplicates": 4}},
        )
    )
    assert (delta.normalization_version, delta.base_generations, delta.base_duplicates) == ("1", ("g1",), 4)
    assert quality_model_hash(manifest("annotate", {})) is None
    assert quality_model_hash(manifest("annotate", {"quality_model_hash": "sha256:q"})) == "sha256:q"


def test_holdout_and_code_files_facts_are_none_where_ingest_recorded_none():
    assert HoldoutFacts.of(None, None) is None
    assert HoldoutFacts.of(manifest("ingest", {}), manifest("extract", {"holdout_docs": 2})) is None
    old = HoldoutFacts.of(manifest("ingest", {"holdout_docs": 3}), None)
    assert old == HoldoutFacts(3, "1", None, {})  # before the carving version was recorded: "1"
    held = HoldoutFacts.of(
        manifest("ingest", {"holdout_docs": 3, "holdout_version": "2"}),
        manifest("extract", {"holdout_docs": 2, "holdout_dropped": {"no_text": 1}}),
    )
    assert held == HoldoutFacts(3, "2", 2, {"no_text": 1})
    assert CodeFilesFacts.of(manifest("ingest", {})) is None
    assert CodeFilesFacts.of(manifest("ingest", {"code_files": {"repositories": 0}})) is None
    tally = {"repositories": 2, "quarantined_repositories": 0, "kept": {"files": 5}, "rejected": {}}
    code = CodeFilesFacts.of(manifest("ingest", {"code_files": tally}))
    assert code == CodeFilesFacts(2, 0, {"files": 5}, {}, {}, [])


def test_facts_read_from_the_wrong_stage_are_a_clear_error():
    with pytest.raises(MissingFacts, match="expected the manifest of the ingest or exact_dedup or"):
        DedupFacts.of(manifest("tokenize", {}))
    with pytest.raises(MissingFacts, match="expected the manifest of the extract stage, got annotate's"):
        HoldoutFacts.of(manifest("ingest", {"holdout_docs": 1}), manifest("annotate", {}))
    with pytest.raises(MissingFacts, match="expected the manifest of the annotate stage"):
        quality_model_hash(manifest("ingest", {}))


def test_snapshot_facts_of_a_delta_list_the_inherited_doc_indexes_first():
    part = {"path": "lineage/doc_index/d0.docidx", "sha256": "a" * 64, "docs": 2}
    own = {"parts": [part], "prefix_bits": 1, "record": "r", "docs": 2}
    based = [{**part, "path": f"base/{part['path']}", "index": k} for k in (0, 1)]
    extra = {
        "artifacts": {
            "doc_index": own,
            BASE_DOC_INDEX: {"parts": based, "prefix_bits": [0, 2], "record": "r", "docs": 4},
            "copies": {"parts": [{"path": "copies/a.jsonl.zst", "sha256": "b" * 64, "records": 3}]},
            "contamination_report": {"path": "decont/report.json", "sha256": "c" * 64},
        },
        "base": {"snapshot_id": "sha256:b", "shards": 1, "docs": 2, "tokens": 20},
    }
    facts = SnapshotFacts.of(snapshot(extra))
    assert [(ix.prefix_bits, ix.count, ix.parts[0][0].path) for ix in facts.doc_indexes()] == [
        (0, 2, "base/lineage/doc_index/d0.docidx"),
        (2, 2, "base/lineage/doc_index/d0.docidx"),
        (1, 2, "lineage/doc_index/d0.docidx"),
    ]
    assert facts.copies == (ShardRef("copies/a.jsonl.zst", "b" * 64, 3),)
    assert facts.contamination_report == FileRef("decont/report.json", "c" * 64)
    assert facts.base == BaseCandidates("sha256:b", 1, 2, 20)
    assert facts.base.to_dict() == extra["base"] and facts.doc_gram_index is None
    m = snapshot({"docs": 2, "tokens": 20}, shards=1)
    assert BaseCandidates.of(m) == BaseCandidates(m.snapshot_id, 1, 2, 20)


def test_snapshot_facts_default_to_nothing_and_name_what_is_missing():
    bare = SnapshotFacts.of(snapshot({}))
    assert (bare.artifacts, bare.base, bare.copies, bare.contamination_report) == ({}, None, (), None)
    with pytest.raises(MissingFacts, match="the snapshot lists no doc_index"):
        bare.doc_indexes()
    with pytest.raises(MissingFacts, match="list no docs, tokens: reassemble"):
        BaseCandidates.of(snapshot({}))


def test_write_shards_facts_carry_the_base_numbering_only_for_a_delta():
    index = PartitionedIndex("docs", 0, 0, ())
    numbering = ShardNumbering("sha256:b", 3, {"web": 2})
    delta = WriteShardsFacts((), index, numbering)
    assert delta.to_extra()["base"] == {"label": "sha256:b", "shards": 3, "next_number": {"web": 2}}
    assert WriteShardsFacts.of(manifest("write_shards", delta.to_extra())) == delta
    assert "base" not in WriteShardsFacts((), index).to_extra()
