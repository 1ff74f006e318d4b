"""Packing: whole documents best-fit into sequences, cu_seqlens at their boundaries, the same tokens once."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
from snapshot_factory import CAPS, EOS, MIXTURE, consume, stream_ids

from corpus.model import SnapshotManifest
from loader import ResumeRefused, SnapshotLoader, load_manifest
from loader.packing import best_fit_bins

SEQ_LEN = 32


def packed(snapshot, window: int = 16, rank: int = 0, world: int = 1, **kwargs) -> SnapshotLoader:
    settings = dict(epoch_caps=CAPS, run_len=2, chunk_tokens=48, packing_window=window, prefetch_steps=0)
    return SnapshotLoader(
        snapshot,
        MIXTURE,
        seed=3,
        seq_len=SEQ_LEN,
        batch_size=2,
        dp_rank=rank,
        dp_world=world,
        **{**settings, **kwargs},
    )


def documents(snapshot) -> set[tuple[int, ...]]:
    """Every document of the snapshot with its EOS, as the loader's stream holds it."""
    manifest = SnapshotManifest.from_dict(json.loads((snapshot / "manifest.json").read_text()))
    out = set()
    for shard in manifest.shards:
        stream = stream_ids(snapshot, shard)
        cuts = np.flatnonzero(stream == EOS) + 1
        out |= {tuple(d.tolist()) for d in np.split(stream, cuts) if d.size}
    return out


def segments(batch) -> list[tuple[int, ...]]:
    """The token runs between consecutive cu_seqlens boundaries, padding left out."""
    flat, valid = batch.tokens.reshape(-1).tolist(), batch.loss_mask.reshape(-1).tolist()
    cu = batch.cu_seqlens.tolist()
    return [tuple(flat[a:b]) for a, b in zip(cu, cu[1:], strict=False) if valid[a]]


def test_every_sequence_holds_whole_documents_or_seq_len_pieces_of_one(id_snapshot):
    docs = documents(id_snapshot)
    pieces = {d[i : i + SEQ_LEN] for d in docs for i in range(0, len(d), SEQ_LEN)}
    # chunks of a whole shard: no chunk boundary cuts a bin
    seen = [s for b in packed(id_snapshot, chunk_tokens=4096) for s in segments(b)]
    assert seen and all(s in docs or s in pieces for s in seen)
    # a document no longer than a sequence is never cut
    assert {s for s in seen if s in docs} == {d for d in docs if len(d) <= SEQ_LEN}


@pytest.mark.parametrize("world", [1, 3])
def test_where_a_chunk_boundary_cuts_a_bin_its_parts_are_parts_of_its_pieces(id_snapshot, world):
    docs = documents(id_snapshot)
    pieces = {d[i : i + SEQ_LEN] for d in docs for i in range(0, len(d), SEQ_LEN)}
    loaders = [packed(id_snapshot, rank=r, world=world) for r in range(world)]
    seen = [s for ld in loaders for b in ld for s in segments(b)]
    cut = [s for s in seen if s not in docs and s not in pieces]
    assert cut and all(any(_within(s, p) for p in pieces) for s in cut)
    # one cut a chunk boundary at most (the id snapshot's chunks are 48 positions, bins up to 32)
    chunks = sum(-(-(s.tokens + s.docs) // 48) for s in load_manifest(id_snapshot)[0].shards)
    assert len(cut) <= 2 * chunks * max(CAPS.values())
    assert (
        sum(ld.metrics()["packing_fragment_rate"] * ld.metrics()["packing_documents"] for ld in loaders) > 0
    )


def _within(part: tuple[int, ...], piece: tuple[int, ...]) -> bool:
    n = len(part)
    return any(piece[i : i + n] == part for i in range(len(piece) - n + 1))


@pytest.mark.parametrize("chunk_tokens", [4096, 48])
def test_cu_seqlens_are_the_document_boundaries_and_position_ids_restart_there(id_snapshot, chunk_tokens):
    for b in packed(id_snapshot, chunk_tokens=chunk_tokens):
        cu = b.cu_seqlens
        assert cu.dtype == torch.int32
        assert int(cu[0]) == 0 and int(cu[-1]) == b.tokens.numel()
        starts = set((b.position_ids.reshape(-1) == 0).nonzero().flatten().tolist())
        assert starts == set(cu[:-1].tolist())
        check_segments(b, whole=chunk_tokens == 4096)


def check_segments(b, whole: bool) -> None:
    """Every run between boundaries is one document's consecutive ids, EOS only last; with ``whole`` (no
    chunk boundary cuts a bin) it ends at its document's EOS or is a full seq_len piece."""
    flat, valid = b.tokens.reshape(-1).tolist(), b.loss_mask.reshape(-1).tolist()
    for a, e in zip(b.cu_seqlens.tolist(), b.cu_seqlens[1:].tolist(), strict=False):
        if not valid[a]:
            assert not any(valid[a:e])
            continue
        run = flat[a:e]
        body = run[:-1] if run[-1] == EOS else run
        assert EOS not in body and body == list(range(body[0], body[0] + len(body)) if body else [])
        assert not whole or run[-1] == EOS or e - a == SEQ_LEN


def test_the_same_seed_and_rank_give_the_same_sequences(id_snapshot):
    for rank in (0, 1):
        a, b = (list(packed(id_snapshot, rank=rank, world=2)) for _ in range(2))
        assert len(a) == len(b) and all(
            x.tokens.equal(y.tokens) and x.cu_seqlens.equal(y.cu_seqlens) and x.buckets == y.buckets
            for x, y in zip(a, b, strict=True)
        )


@pytest.mark.parametrize("world", [1, 3])
def test_packing_delivers_the_tokens_plain_concatenation_delivers_each_once(id_snapshot, world):
    plain, pack = Counter(), Counter()
    consume([packed(id_snapshot, window=0, rank=r, world=world) for r in range(world)], plain)
    consume([packed(id_snapshot, rank=r, world=world) for r in range(world)], pack)
    assert pack == plain


def test_padding_rate_is_reported_and_below_one_document_per_sequence(id_snapshot):
    loader = packed(id_snapshot)
    for _ in loader:
        pass
    m = loader.metrics()
    assert m["packing_sequences"] > 0 and m["packing_documents"] > 0
    assert 0 <= m["packing_padding_rate"] < m["packing_naive_padding_rate"] / 4
    assert 0 < m["packing_truncation_rate"] < 1  # the id snapshot has documents longer than 32


def test_a_wider_window_pads_no_more_than_a_window_of_one(id_snapshot):
    rates = []
    for window in (1, 32):
        loader = packed(id_snapshot, window=window)
        for _ in loader:
            pass
        rates.append(loader.metrics()["packing_padding_rate"])
    assert rates[1] <= rates[0]


def test_packing_is_off_by_default_and_the_plain_stream_is_unchanged(id_snapshot):
    a, b = (
        packed(id_snapshot, window=0),
        SnapshotLoader(
            id_snapshot,
            MIXTURE,
            seed=3,
            seq_len=SEQ_LEN,
            batch_size=2,
            epoch_caps=CAPS,
            run_len=2,
            chunk_tokens=48,
        ),
    )
    assert a.packing == b.packing == (0, 0) and a.store._get(0).shuffled is None
    assert all(x.tokens.equal(y.tokens) for x, y in zip(a, b, strict=True))
    assert not any(k.startswith("packing") for k in b.metrics())
    assert "packing" not in b.state_dict()["record"]  # a record without packing keeps its bytes


def test_best_fit_fills_each_bin_with_the_longest_piece_that_fits_the_earliest_of_equals():
    assert best_fit_bins([5, 9, 7, 9, 3], 10) == [[1], [3], [2, 4], [0]]
    assert best_fit_bins([5, 9, 7, 9, 3], 12) == [[1, 4], [3], [2, 0]]
    assert best_fit_bins([4, 4, 4], 8) == [[0, 1], [2]]
    assert best_fit_bins([], 8) == []


def test_a_record_of_the_plain_stream_is_refused_by_a_packing_loader_and_the_reverse(id_snapshot):
    plain = packed(id_snapshot, window=0)
    for _ in range(3):
        plain.next_batch()
    with pytest.raises(ResumeRefused, match="packing"):
        packed(id_snapshot).load_state_dict(plain.state_dict())
    packing = packed(id_snapshot)
    for _ in range(3):
        packing.next_batch()
    with pytest.raises(ResumeRefused, match=r"resume with packing_window=16 and a packing length of 32"):
        packed(id_snapshot, window=0).load_state_dict(packing.state_dict())
