"""Facts one stage hands another are typed: they round-trip through a manifest's JSON, and a manifest of
an older stage version that lacks them is a clear error naming the stage, not a KeyError."""

import pytest

from corpus.model import StageManifest
from corpus.model.facts import (
    DecontaminationFacts,
    FileRef,
    MissingFacts,
    PartitionedIndex,
    TokenShardListing,
    WriteShardsFacts,
    tokenizer_facts,
)
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
    assert facts.rule_settings() == {
        "rule": "passage-8gram-set-run/1",
        "n": 8,
        "min_run": 15,
        "min_item_words": 8,
    }
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
