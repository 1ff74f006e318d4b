"""The eval table's Bloom filter (corpus.formats.blocked_bloom): written from sorted hashes a batch at a
time, holding one batch, with the bits an independent fill of the same positions gives."""

from __future__ import annotations

import io

import numpy as np
import pytest

from corpus.formats.blocked_bloom import (
    BLOCK_BITS,
    BLOCK_BYTES,
    HEADER,
    BlockedBloom,
    BlockedBloomWriter,
    BlockedSpec,
    bits_in_block,
    block_of,
)

SPEC = BlockedSpec.from_fp_rate(0.01)


def sorted_keys(n: int, seed: int) -> np.ndarray:
    return np.unique(np.random.default_rng(seed).integers(0, 2**64, size=n, dtype=np.uint64))


def written(keys: np.ndarray, batch: int) -> bytes:
    out = io.BytesIO()
    w = BlockedBloomWriter(out, keys.shape[0], SPEC)
    for at in range(0, keys.shape[0], batch):
        w.add_sorted(keys[at : at + batch])
    w.finish()
    return out.getvalue()


def mapped(tmp_path, data: bytes) -> BlockedBloom:
    (tmp_path / "f.bloom").write_bytes(data)
    return BlockedBloom.map(tmp_path / "f.bloom")


def test_the_bits_are_those_of_every_keys_positions_in_its_block_however_the_keys_are_batched():
    keys = sorted_keys(6_000, 1)
    blocks = SPEC.blocks_for(keys.shape[0])
    bits = np.zeros(blocks * BLOCK_BITS, dtype=bool)
    for k in keys:  # one key at a time, from the definitions
        bits[int(block_of(k[None], blocks)[0]) * BLOCK_BITS + bits_in_block(k[None], SPEC.hashes)[:, 0]] = (
            True
        )
    expected = np.packbits(bits, bitorder="little").tobytes()
    for batch in (1, 97, 4_096, keys.shape[0]):
        data = written(keys, batch)
        assert data[HEADER.itemsize :] == expected, batch


def test_every_added_hash_may_be_present_and_about_one_percent_of_others_may(tmp_path):
    keys = sorted_keys(100_000, 2)
    f = mapped(tmp_path, written(keys, 8_192))
    assert f.might_contain(keys).all()
    others = np.random.default_rng(3).integers(0, 2**64, size=400_000, dtype=np.uint64)
    assert 0.003 < f.might_contain(others).mean() < 0.013


def test_the_writer_holds_one_batch_of_blocks_never_the_filter():
    keys = sorted_keys(200_000, 4)
    out = io.BytesIO()
    w = BlockedBloomWriter(out, keys.shape[0], SPEC)
    held = []
    for at in range(0, keys.shape[0], 2_048):
        batch = keys[at : at + 2_048]
        w.add_sorted(batch)
        spanned = int(block_of(batch[-1:], w.blocks)[0] - block_of(batch[:1], w.blocks)[0]) + 1
        held.append(w.pending.nbytes)
        assert w.pending.nbytes <= spanned * BLOCK_BYTES
    w.finish()
    assert max(held) * 50 < w.blocks * BLOCK_BYTES == len(out.getvalue()) - HEADER.itemsize


def test_unsorted_repeated_or_miscounted_hashes_are_refused():
    keys = sorted_keys(1_000, 5)
    with pytest.raises(ValueError, match="ascending"):
        BlockedBloomWriter(io.BytesIO(), 1_000, SPEC).add_sorted(keys[::-1])
    w = BlockedBloomWriter(io.BytesIO(), 1_000, SPEC)
    w.add_sorted(keys[:10])
    with pytest.raises(ValueError, match="ascending"):
        w.add_sorted(keys[9:])
    w = BlockedBloomWriter(io.BytesIO(), 1_000, SPEC)
    w.add_sorted(keys[:999])
    with pytest.raises(ValueError, match="sized for 1000 hashes and given 999"):
        w.finish()


def test_a_truncated_or_foreign_file_is_refused(tmp_path):
    data = written(sorted_keys(1_000, 6), 100)
    with pytest.raises(ValueError, match="blocks need"):
        mapped(tmp_path, data[:-1])
    with pytest.raises(ValueError, match="magic"):
        mapped(tmp_path, b"CPBLOOM1" + data[8:])
