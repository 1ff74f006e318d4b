"""The indexed-shard format round-trips and matches Megatron-LM's header layout byte for byte."""

import struct

import numpy as np
import pytest

from corpus.megatron import IndexedShard, read_index, token_dtype_for_vocab, write_indexed_shard


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
