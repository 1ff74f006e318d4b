"""The indexed-shard format round-trips, matches Megatron-LM's header layout byte for byte, and its
.bin carries per-block digests that the snapshot manifest records."""

import hashlib
import json
import struct

import numpy as np
import pytest

from corpus.formats.block_layout import DOCUMENTS, FIXED, BlockLayout, DocumentBlockHasher, LayoutHasher
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


def test_document_blocks_tile_the_bin_and_never_hold_two_documents(tmp_path):
    """corpus.formats.block_layout: in the documents layout each document's bytes are cut into blocks of at
    most block_size (an empty document has none), the blocks tile the file, and a byte range's blocks are
    those of the documents it touches; fixed blocks are as block_digests cuts them."""
    docs = [np.arange(n, dtype="uint16") for n in (7, 0, 3, 20, 1)]  # 31 tokens: 14, 0, 6, 40, 2 bytes
    bin_path, idx_path = write_indexed_shard(tmp_path / "s", docs, "uint16")
    raw, index = bin_path.read_bytes(), read_index(idx_path)
    layout = BlockLayout.of(DOCUMENTS, 16, len(raw), index.offsets, index.lengths, 2)
    assert layout.starts.tolist() == [0, 14, 20, 36, 52, 60]  # the 40-byte document in 16 + 16 + 8
    spans = [layout.span(b) for b in range(layout.count)]
    assert spans[-1][1] == len(raw) and all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert list(layout.covering(14, 20)) == [1] and list(layout.covering(13, 21)) == [0, 1, 2]
    assert list(layout.covering(40, 41)) == [3] and list(layout.covering(5, 5)) == []
    hasher = DocumentBlockHasher(16)
    for d in docs:
        hasher.add_document(d.tobytes())
    expected = [hashlib.sha256(raw[a:b]).hexdigest() for a, b in spans]
    assert hasher.block_digests() == expected
    for step in (1, 5, 64):  # fed in chunks of any size, the same digests
        streamed = LayoutHasher(layout)
        for at in range(0, len(raw), step):
            streamed.update(raw[at : at + step])
        assert streamed.block_digests() == expected
    fixed = BlockLayout.of(FIXED, 16, len(raw), index.offsets, index.lengths, 2)
    assert [hashlib.sha256(raw[a:b]).hexdigest() for a, b in map(fixed.span, range(fixed.count))] == (
        block_digests(bin_path, block_size=16)
    )
    assert list(fixed.covering(14, 20)) == [0, 1]
    with pytest.raises(ValueError, match="unknown block layout"):
        BlockLayout.of("pages", 16, len(raw), index.offsets, index.lengths, 2)


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
