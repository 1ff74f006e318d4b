"""Sequences: EOS between documents, document boundaries as position ids and cu_seqlens, real tokens."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import numpy as np
import pytest
import torch
from snapshot_factory import CAPS, EOS, MIXTURE, write_text_snapshot

from corpus.formats.megatron import write_indexed_shard
from loader import SnapshotLoader
from loader.sequences import OpenShard, check_index

TOKENIZER = "tokenizers/gpt-neox-olmo-dolma-v1_5.tokenizer.json"


def all_batches(loader: SnapshotLoader) -> list:
    return list(loader)


def test_position_ids_restart_at_every_document_boundary_and_cu_seqlens_match(id_snapshot):
    loader = SnapshotLoader(
        id_snapshot, MIXTURE, seed=2, seq_len=32, batch_size=3, epoch_caps=CAPS, run_len=3, chunk_tokens=40
    )
    batches = all_batches(loader)
    assert batches and all(b.tokens.shape == (3, 32) for b in batches[:-1])
    for b in batches:
        toks, pos = b.tokens, b.position_ids
        follows_eos = torch.zeros_like(toks, dtype=torch.bool)
        follows_eos[:, 1:] = toks[:, :-1] == EOS
        assert (pos[follows_eos & b.loss_mask] == 0).all()
        assert (pos[:, 0] == 0).all()
        # inside a document the ids run consecutively (the id snapshot's documents are ranges)
        inside = (pos[:, 1:] > 0) & (toks[:, 1:] != EOS) & b.loss_mask[:, 1:]
        assert (toks[:, 1:][inside] == toks[:, :-1][inside] + 1).all()
        flat_starts = torch.nonzero(pos.reshape(-1) == 0).flatten()
        starts = set(flat_starts.tolist()) | {toks.numel()}
        assert set(b.cu_seqlens.tolist()) >= starts
        assert b.cu_seqlens.dtype == torch.int32 and b.cu_seqlens[0] == 0 and b.cu_seqlens[-1] == toks.numel()


def test_padding_appears_only_where_a_bucket_ran_out(id_snapshot):
    loader = SnapshotLoader(
        id_snapshot, MIXTURE, seed=2, seq_len=32, batch_size=3, epoch_caps=CAPS, run_len=3
    )
    padded_rows = sum(int((~b.loss_mask).any(dim=1).sum()) for b in all_batches(loader))
    assert 1 <= padded_rows <= len(MIXTURE)  # at most one padded sequence per bucket, at its last epoch's end


def test_real_text_round_trips_through_uint16_shards_with_eos_between_documents(shared_data, tmp_path):
    from tokenizers import Tokenizer

    with gzip.open(shared_data / "curated" / "perl-doc.jsonl.gz", "rt") as f:
        texts = [json.loads(line)["text"][:1500] for _, line in zip(range(24), f, strict=False)]
    manifest = write_text_snapshot(
        tmp_path, shared_data / TOKENIZER, {"perl": texts[:16], "web": texts[16:]}, 5
    )
    assert manifest.token_dtype == "uint16"
    tok = Tokenizer.from_file(str(shared_data / TOKENIZER))
    eos = manifest.tokenizer["eos_id"]
    # one rank, whole shards as chunks: the stream is the documents of each shard in order, EOS after each
    loader = SnapshotLoader(tmp_path, seed=1, seq_len=64, batch_size=2, epoch_caps=1, chunk_tokens=1 << 30)
    streams: dict[str, list[int]] = {}  # each bucket's stream continues across the steps that read it
    for b in loader:
        for bucket, row, m in zip(b.buckets, b.tokens, b.loss_mask, strict=True):
            streams.setdefault(bucket, []).extend(row[m].tolist())
    assert set(streams) == {"perl", "web"}
    docs = []
    for stream in streams.values():
        cur: list[int] = []
        for t in stream:
            if t == eos:
                docs.append(tuple(cur))
                cur = []
            else:
                cur.append(t)
        assert not cur
    assert Counter(docs) == Counter(tuple(e.ids) for e in tok.encode_batch(texts))
    assert sorted(tok.decode(list(d)) for d in docs) == sorted(tok.decode(tok.encode(t).ids) for t in texts)


def test_a_snapshot_without_an_eos_id_is_refused(id_snapshot, tmp_path):
    from corpus.model.errors import UserError

    data = json.loads((id_snapshot / "manifest.json").read_text())
    data["tokenizer"] = {}
    data.pop("snapshot_id")
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="eos_id"):
        SnapshotLoader(tmp_path, root=id_snapshot)


def test_documents_that_already_end_with_eos_get_no_second_one(tmp_path):
    import numpy as np
    from snapshot_factory import write_snapshot

    docs = [
        np.array([5, 6, 7, EOS], dtype=np.uint16),
        np.array([8, EOS], dtype=np.uint16),
        np.array([9, 10, EOS], dtype=np.uint16),
    ]
    write_snapshot(tmp_path, {"web": [docs, docs[:1]]}, "uint16", EOS, {"documents_end_with_eos": True})
    loader = SnapshotLoader(tmp_path, seed=0, seq_len=4, batch_size=1, epoch_caps=1)
    assert loader.append_eos is False
    got = Counter(t for b in loader for t in b.tokens[b.loss_mask].tolist())
    assert got == Counter([5, 6, 7, EOS, 8, EOS, 9, 10, EOS, 5, 6, 7, EOS])


@pytest.mark.parametrize("append_eos", [True, False])
def test_a_mapped_shard_reads_any_range_like_its_documents_laid_end_to_end(tmp_path, append_eos):
    """1,000 documents (some empty), so searches cross many windows of the sampled stream index."""
    rng = np.random.default_rng(7)
    docs, next_id = [], 1
    for _ in range(1000):
        n = int(rng.choice([0, 1, 3, 17, 90]))
        docs.append(np.arange(next_id, next_id + n, dtype=np.int32))
        next_id += n
    bin_path, idx_path = write_indexed_shard(tmp_path / "s", docs, "int32")
    shard = OpenShard(bin_path, idx_path, EOS, append_eos)
    assert check_index(shard) == ""
    stream, starts = [], []
    for d in docs:
        starts.append(len(stream))
        stream.extend(d.tolist() + ([EOS] if append_eos else []))
    assert shard.stream_len == len(stream)
    flat = np.concatenate(docs)
    for start, end in [(0, 0), (0, len(stream)), (len(stream) - 1, len(stream))] + [
        tuple(sorted(rng.integers(0, len(stream) + 1, size=2).tolist())) for _ in range(300)
    ]:
        spans: list[tuple[int, int]] = []
        toks, doc_starts = shard.read(start, end, check=lambda lo, hi, spans=spans: spans.append((lo, hi)))
        assert toks.tolist() == stream[start:end]
        # (without appended EOS an empty document starts where the next does: a repeated boundary)
        assert sorted(set(doc_starts.tolist())) == sorted({s - start for s in starts if start <= s < end})
        if end > start:  # the checked .bin span holds every document token the range reads
            ((lo, hi),) = spans
            assert set(t for t in stream[start:end] if t != EOS) <= set(flat[lo:hi].tolist())


def test_an_index_that_disagrees_with_its_bin_is_found(tmp_path):
    bin_path, idx_path = write_indexed_shard(tmp_path / "s", [np.arange(1, 6, dtype=np.int32)] * 3, "int32")
    raw = bytearray(idx_path.read_bytes())
    raw[34 + 12 + 8 : 34 + 12 + 16] = (7).to_bytes(8, "little")  # the second document's offset
    idx_path.write_bytes(bytes(raw))
    assert "offsets disagree with lengths" in check_index(OpenShard(bin_path, idx_path, EOS, True))
