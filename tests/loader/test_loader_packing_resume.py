"""Packing resumes exactly at any world size: a record at 2 ranks resumes on 3 and on 1 to every document
token once, on the same world to the same sequences, with the same bins as an uninterrupted run, and
``corpus trace`` names the document of every packed position (docs/loader.md, "Packing").

Ranks are simulated in one process, as in test_loader_resume.py; the id snapshot's tokens are distinct,
so a token delivered twice or never, or a bin cut where it should not be, shows.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from snapshot_factory import (
    CAPS,
    EOS,
    MIXTURE,
    checkpoint,
    consume,
    expected_tokens,
    lockstep,
    phase_toml,
    recipe_toml,
)
from test_loader_packing import check_segments
from test_loader_shuffle_buffer import owed_tokens, stream
from test_trace import check_traces, resumed_on_three, sample

from loader import ResumeRefused, SnapshotLoader, load_manifest
from loader.faults import ShardStore

SEQ_LEN, WINDOW = 32, 8
OPTS = dict(seq_len=SEQ_LEN, batch_size=2, epoch_caps=CAPS, run_len=2, chunk_tokens=48, prefetch_steps=0)


def make(root: Path, rank: int, world: int, **kw) -> SnapshotLoader:
    params = dict(mixture=MIXTURE, seed=5, packing_window=WINDOW, **OPTS)
    return SnapshotLoader(root, dp_rank=rank, dp_world=world, **{**params, **kw})


def packed_streams(root: Path, shuffle: int = 0) -> tuple[dict[int, np.ndarray], list[tuple[int, ...]]]:
    """Each shard's whole stream in bin order as the store reads it, and every bin's tokens."""
    manifest = load_manifest(root)[0]
    store = ShardStore(root, manifest, EOS, True, shuffle=(shuffle, 5), packing=(WINDOW, SEQ_LEN))
    streams, bins = {}, []
    for i, s in enumerate(manifest.shards):
        n = s.tokens + s.docs
        streams[i] = np.concatenate([p.tokens for p in store.read(i, 0, n)])
        pos = 0
        while pos < n:
            end = store.bin_end(i, pos)
            # a bin no chunk boundary cuts: what every run delivers in one sequence
            if pos // 48 == (end - 1) // 48:
                bins.append(tuple(streams[i][pos:end].tolist()))
            pos = end
    return streams, bins


def delivered_rows(loaders: list[SnapshotLoader], steps: int | None = None) -> list[list[int]]:
    """Every delivered sequence's valid tokens (rank by rank, step by step), checked for consistency."""
    rows: list[list[int]] = []
    for batches in lockstep(loaders, steps):
        for b in batches:
            check_segments(b, whole=False)
            rows += [r[m].tolist() for r, m in zip(b.tokens, b.loss_mask, strict=True)]
    return rows


def whole_bins_delivered(rows: list[list[int]], bins: list[tuple[int, ...]]) -> None:
    """Each uncut bin is delivered inside one sequence, contiguous, wherever its first id shows."""
    where = {t: (i, j) for i, r in enumerate(rows) for j, t in enumerate(r) if t != EOS}
    for b in bins:
        first = next((k for k, t in enumerate(b) if t != EOS), None)
        if first is None:
            continue
        i, j = where[b[first]]
        assert tuple(rows[i][j - first : j - first + len(b)]) == b


@pytest.mark.parametrize("new_world", [3, 1])
@pytest.mark.parametrize("pause", [4, 11])
def test_a_checkpoint_at_two_ranks_resumes_exactly_on_another_world(id_snapshot, new_world, pause):
    streams, bins = packed_streams(id_snapshot)
    first = [make(id_snapshot, r, 2) for r in range(2)]
    rows = delivered_rows(first, steps=pause)
    record = checkpoint(first)
    assert record["packing"] == [WINDOW, SEQ_LEN]
    delivered = Counter(t for r in rows for t in r)
    assert delivered == owed_tokens(id_snapshot, record, streams)  # the record says what was read
    resumed = [make(id_snapshot, r, new_world) for r in range(new_world)]
    for ld in resumed:
        ld.load_state_dict({"record": json.dumps(record)})
    after = delivered_rows(resumed)
    delivered.update(t for r in after for t in r)
    expected = expected_tokens(id_snapshot, load_manifest(id_snapshot)[0], CAPS)
    assert delivered == expected  # every document token once per epoch, over the whole run
    whole_bins_delivered(rows + after, bins)  # the bins an uninterrupted run packs, on any world
    for ld in resumed:
        m = ld.metrics()
        assert m["packing_sequences"] > 0 and 0 < m["packing_padding_rate"] < 0.5
        assert 0 <= m["packing_truncation_rate"] < 1 and m["packing_documents"] > 0


def test_a_resume_on_the_same_world_delivers_the_uninterrupted_runs_batches(id_snapshot):
    def batches(loaders, steps=None):
        out, n = [], 0
        while steps is None or n < steps:
            got = [ld.next_batch() for ld in loaders]
            if all(b is None for b in got):
                return out
            out += [(b.tokens, b.position_ids, b.loss_mask, b.cu_seqlens, b.buckets) for b in got if b]
            n += 1
        return out

    straight = batches([make(id_snapshot, r, 2) for r in range(2)])
    first = [make(id_snapshot, r, 2) for r in range(2)]
    before = batches(first, steps=9)
    resumed = [make(id_snapshot, r, 2) for r in range(2)]
    for ld in resumed:
        ld.load_state_dict({"record": json.dumps(checkpoint(first))})
    got = before + batches(resumed)
    assert len(got) == len(straight)
    for x, y in zip(got, straight, strict=True):
        assert all(a.equal(b) for a, b in zip(x[:4], y[:4], strict=True)) and x[4] == y[4]


@pytest.mark.parametrize("shuffle", [0, 4])
def test_a_chain_of_world_sizes_delivers_every_document_once(id_snapshot, shuffle):
    _, bins = packed_streams(id_snapshot, shuffle)
    rows: list[list[int]] = []
    loaders = [make(id_snapshot, r, 2, shuffle_buffer=shuffle) for r in range(2)]
    for new_world, steps in ((3, 5), (1, 4), (4, 3), (2, None)):
        rows += delivered_rows(loaders, steps=steps)
        record = checkpoint(loaders)
        loaders = [make(id_snapshot, r, new_world, shuffle_buffer=shuffle) for r in range(new_world)]
        for ld in loaders:
            ld.load_record(record)
    rows += delivered_rows(loaders)
    delivered = Counter(t for r in rows for t in r)
    assert delivered == expected_tokens(id_snapshot, load_manifest(id_snapshot)[0], CAPS)
    whole_bins_delivered(rows, bins)


def test_prefetch_and_seek_give_the_same_packed_stream(id_snapshot):
    plain = stream([make(id_snapshot, r, 2) for r in range(2)])
    assert stream([make(id_snapshot, r, 2, prefetch_steps=4) for r in range(2)]) == plain
    seeking = [make(id_snapshot, r, 2) for r in range(2)]
    for ld in seeking:
        ld.seek(6)
    assert stream(seeking) == plain[12:]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(packing_window=4), r"\(8, 32\), this loader has \(4, 32\)"),
        (dict(seq_len=16), r"\(8, 32\), this loader has \(8, 16\)"),
        (dict(packing_window=0), r"\(8, 32\), this loader has \(0, 0\)"),
    ],
)
def test_a_record_of_other_bins_is_refused(id_snapshot, change, message):
    first = [make(id_snapshot, r, 2) for r in range(2)]
    consume(first, Counter(), steps=3)
    with pytest.raises(ResumeRefused, match=message):
        make(id_snapshot, 0, 3, **change).load_record(checkpoint(first))


def test_trace_names_the_document_of_every_packed_position_after_a_resume(tmp_path):
    from snapshot_factory import write_lineage_snapshot

    snap = write_lineage_snapshot(tmp_path / "snap")
    delivered, record = resumed_on_three(make, snap, first_steps=5)
    how = dict(mixture=MIXTURE, seed=5, **{k: v for k, v in OPTS.items() if k != "prefetch_steps"})
    sources = check_traces(snap, delivered, sample(delivered, every=2), 3, record=record, **how)
    # packed positions: pieces that begin a sequence mid-file, and documents cut into seq_len pieces
    assert any(s.offset_in_doc == 0 and s.column > 0 for s in sources)
    assert any(s.offset_in_doc >= SEQ_LEN for s in sources)
    # a trace asked for without packing is refused, not answered with another document
    with pytest.raises(ResumeRefused, match="packing"):
        check_traces(snap, delivered, sample(delivered, every=3), 3, record=record, packing_window=0, **how)


def test_a_recipe_packs_with_bins_of_its_longest_phase_and_resumes_across_a_phase(recipe_snapshot, tmp_path):
    snapshot_id = load_manifest(recipe_snapshot)[0].snapshot_id
    phases = phase_toml("short", 640, 16, MIXTURE, run_len=2, max_epochs=CAPS)
    path = tmp_path / "recipe.toml"
    path.write_text(recipe_toml(snapshot_id, phases + phase_toml("long", 960, 32, MIXTURE, max_epochs=CAPS)))

    def loaders(world):
        kw = dict(chunk_tokens=48, packing_window=WINDOW, prefetch_steps=0)
        return [SnapshotLoader.from_recipe(path, recipe_snapshot, 2, r, world, **kw) for r in range(world)]

    first = loaders(2)
    assert first[0].packing == (WINDOW, 32)  # bins of the longest phase, cut in the short one
    rows = delivered_rows(first, steps=7)  # the short phase ends at step 10 (640 tokens, 64 a step)
    resumed = loaders(3)
    for ld in resumed:
        ld.load_record(checkpoint(first))
    while not resumed[0].finished:
        rows += delivered_rows(resumed, steps=1)
    assert max(len(r) for r in rows) == 32
    streams, _ = packed_streams(recipe_snapshot)
    delivered = Counter(t for r in rows for t in r)
    assert delivered == owed_tokens(recipe_snapshot, checkpoint(resumed), streams)
