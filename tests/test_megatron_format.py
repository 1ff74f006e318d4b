"""The indexed-shard format round-trips, matches Megatron-LM's header layout byte for byte, and its
.bin carries per-block digests that the snapshot manifest records."""

import hashlib
import json
import struct

import numpy as np
import pytest

from corpus.formats.megatron import (
    BLOCK_SIZE,
    IndexedShard,
    block_digests,
    read_index,
    token_dtype_for_vocab,
    write_indexed_shard,
)
from corpus.model import SnapshotManifest, SnapshotShard


@pytest.mark.parametrize("dtype", ["uint16", "int32"])
def test_round_trip(tmp_path, dtype):
    docs = [np.arange(n, dtype=dtype) + 7 for n in (5, 0, 3, 11)]
    write_indexed_shard(tmp_path / "s", docs, dtype)
    shard = IndexedShard(tmp_path / "s")
    assert len(shard) == 4
    for i, d in enumerate(docs):
        assert shard.document(i).tolist() == d.tolist()
    assert shard.index.num_tokens == 19


def test_header_fields_are_megatrons(tmp_path):
    write_indexed_shard(tmp_path / "s", [np.array([1, 2, 3], dtype="uint16")], "uint16")
    raw = (tmp_path / "s.idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    assert struct.unpack_from("<QBQQ", raw, 9) == (1, 8, 1, 2)
    idx = read_index(tmp_path / "s.idx")
    assert idx.offsets.tolist() == [0] and idx.doc_indices.tolist() == [0, 1]


def test_dtype_follows_vocabulary_size():
    assert token_dtype_for_vocab(50_280) == "uint16"
    assert token_dtype_for_vocab(65_535) == "uint16"
    assert token_dtype_for_vocab(100_277) == "int32"


def test_an_empty_shard_reads_as_empty(tmp_path):
    write_indexed_shard(tmp_path / "e", [], "uint16")
    shard = IndexedShard(tmp_path / "e")
    assert len(shard) == 0 and shard.index.num_tokens == 0


def test_block_digests_cover_the_bin_block_by_block(tmp_path):
    docs = [np.arange(n, dtype="uint16") for n in (7, 3, 9)]  # 19 tokens, 38 bytes
    bin_path, _ = write_indexed_shard(tmp_path / "s", docs, "uint16")
    raw = bin_path.read_bytes()
    digests = block_digests(bin_path, block_size=16)
    assert digests == [hashlib.sha256(raw[i : i + 16]).hexdigest() for i in (0, 16, 32)]
    assert len(raw[32:]) == 6  # the last block is short, not padded
    assert block_digests(bin_path, block_size=64) == [hashlib.sha256(raw).hexdigest()]


def test_an_empty_bin_has_no_blocks_and_a_bad_block_size_is_refused(tmp_path):
    bin_path, _ = write_indexed_shard(tmp_path / "e", [], "uint16")
    assert block_digests(bin_path) == []
    with pytest.raises(ValueError, match="block_size must be positive"):
        block_digests(bin_path, block_size=0)


def test_block_digests_round_trip_through_the_snapshot_manifest():
    shard = SnapshotShard(
        "shards/web-00000.bin",
        "c" * 64,
        "web",
        docs=5,
        tokens=1000,
        block_size=BLOCK_SIZE,
        block_sha256=("a" * 64, "b" * 64),
    )
    m = SnapshotManifest(shards=(shard,), stage_versions={}, seed=7)
    again = SnapshotManifest.from_dict(json.loads(json.dumps(m.to_dict())))
    assert again == m and again.shards[0].block_sha256 == ("a" * 64, "b" * 64)
    assert again.snapshot_id == m.snapshot_id


def test_a_manifest_written_before_block_digests_loads_with_the_same_id():
    old = SnapshotShard("shards/web-00000.bin", "c" * 64, "web", docs=5, tokens=1000)
    d = SnapshotManifest(shards=(old,), stage_versions={}, seed=7).to_dict()
    assert "block_size" not in d["shards"][0]  # exactly the shard fields of the earlier format
    again = SnapshotManifest.from_dict(json.loads(json.dumps(d)))
    assert again.shards[0].block_size == 0 and again.shards[0].block_sha256 == ()
