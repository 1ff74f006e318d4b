"""The shuffle buffer: each shard's documents read in a permuted order within windows of N, the same tokens
over an epoch, a pure function of the seed, and exactly resumable at any world size (docs/loader.md,
"Shuffle buffer").

Ranks are simulated in one process, as in test_loader_resume.py. The id snapshot's tokens are distinct,
so a document delivered twice, or not at all, or cut where it should not be, shows in the counts.
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
    stream_ids,
    through_worlds,
)
from test_loader_versions import make_version, selected_tokens
from test_trace import check_traces, resumed_on_three, sample

from corpus.formats.megatron import read_index
from corpus.select.recipe import RecipeError, parse_recipe
from loader import ResumeRefused, SnapshotLoader, load_manifest
from loader.faults import ShardStore
from loader.shuffle import window_permutation
from loader.state import Plan, remaining_pieces, stream_layout

OPTS = dict(seq_len=16, batch_size=2, epoch_caps=CAPS, run_len=2, chunk_tokens=24)
WINDOW = 4


def make(root: Path, rank: int, world: int, **kw) -> SnapshotLoader:
    params = dict(mixture=MIXTURE, seed=11, shuffle_buffer=WINDOW, **OPTS)
    return SnapshotLoader(root, dp_rank=rank, dp_world=world, **{**params, **kw})


def stream(loaders: list[SnapshotLoader], steps: int | None = None) -> list[list[int]]:
    """Every rank's delivered tokens, step by step, as lists (what two runs are compared by)."""
    out: list[list[int]] = []
    for batches in lockstep(loaders, steps):
        out += [b.tokens[b.loss_mask].tolist() for b in batches]
    return out


def shuffled_streams(root: Path, window: int, seed: int) -> dict[int, np.ndarray]:
    """Each shard's whole stream as the loader's store reads it under the shuffle (appended EOS)."""
    manifest = load_manifest(root)[0]
    store = ShardStore(root, manifest, EOS, True, shuffle=(window, seed))
    out = {}
    for i, s in enumerate(manifest.shards):
        parts = store.read(i, 0, s.tokens + s.docs)
        out[i] = np.concatenate([p.tokens for p in parts])
    return out


def owed_tokens(root: Path, record: dict, streams: dict[int, np.ndarray]) -> Counter:
    """What exactly-once says was delivered by the time of ``record``, position by position of ``streams``:
    every epoch some rank opened, less the unread pieces of the open epochs (snapshot_factory.owed_tokens,
    over the shuffled streams)."""
    manifest = load_manifest(root)[0]
    layout = stream_layout(
        manifest.shards,
        record["seed"],
        record["chunk_tokens"],
        record["epoch_caps"],
        True,
        record["plan"]["world"],
        cuts=record["chunk_cuts"],
    )
    plan = Plan.from_dict(record["plan"])
    cursors = [{b: tuple(c) for b, c in rank.items()} for rank in record["cursors"]]
    out: Counter = Counter()
    for bucket, shards in layout.buckets.items():
        pieces, last = remaining_pieces(layout, plan, cursors, bucket)
        epochs = last + 1 if last is not None else layout.cap(bucket)
        for i, _, _ in shards:
            out.update({t: epochs * n for t, n in Counter(streams[i].tolist()).items()})
        for p in pieces:
            out.subtract(streams[p.shard][p.start : p.end].tolist())
    return +out


# --- the permuted stream itself ---------------------------------------------------------------------


def file_documents(root: Path, shard) -> list[tuple[int, ...]]:
    idx = read_index(root / shard.files["idx"])
    toks = np.fromfile(root / shard.path, dtype=idx.dtype)
    starts = idx.token_starts()
    return [tuple(toks[starts[d] : starts[d + 1]].tolist()) for d in range(len(idx.lengths))]


def test_every_document_stays_whole_and_moves_only_within_its_window(id_snapshot):
    manifest = load_manifest(id_snapshot)[0]
    streams = shuffled_streams(id_snapshot, WINDOW, seed=11)
    moved = 0
    for i, shard in enumerate(manifest.shards):
        docs = file_documents(id_snapshot, shard)
        ends = np.flatnonzero(streams[i] == EOS)
        got = [tuple(d.tolist()) for d in np.split(streams[i], ends + 1)[:-1]]
        assert all(d[-1] == EOS for d in got) and len(got) == len(docs)
        order = [docs.index(d[:-1]) for d in got]  # each delivered document is one of the file's, whole
        assert sorted(order) == list(range(len(docs)))
        assert [o // WINDOW for o in order] == [k // WINDOW for k in range(len(docs))]  # within its window
        moved += order != sorted(order)
    assert moved >= len(manifest.shards) // 2


def test_a_window_of_one_document_reads_the_file_order(id_snapshot):
    manifest = load_manifest(id_snapshot)[0]
    store = ShardStore(id_snapshot, manifest, EOS, True, shuffle=(1, 11))
    for i, s in enumerate(manifest.shards):
        assert store._get(i).shuffled is not None  # the window path, not the file order's own
        got = np.concatenate([p.tokens for p in store.read(i, 0, s.tokens + s.docs)])
        assert np.array_equal(got, stream_ids(id_snapshot, s))


def test_the_window_permutation_is_fixed_integer_arithmetic():
    assert window_permutation(12345, 8).tolist() == window_permutation(12345, 8).tolist()
    assert sorted(window_permutation(7, 1000).tolist()) == list(range(1000))
    # pinned: a numpy release that changed its RNG streams must not change a run's data
    assert window_permutation(0, 6).tolist() == [0, 3, 5, 2, 1, 4]


def test_a_read_across_windows_starts_a_document_wherever_one_starts(id_snapshot):
    manifest = load_manifest(id_snapshot)[0]
    store = ShardStore(id_snapshot, manifest, EOS, True, shuffle=(3, 2))
    i = max(range(len(manifest.shards)), key=lambda k: manifest.shards[k].docs)
    whole = np.concatenate([p.tokens for p in store.read(i, 0, manifest.shards[i].tokens + 10)])
    for a, b in ((0, 7), (5, 40), (13, 14), (2, len(whole))):
        (part,) = store.read(i, a, b)
        assert np.array_equal(part.tokens, whole[a:b])
        after_eos = [k - a for k in range(max(a, 1), b) if whole[k - 1] == EOS]
        assert set(after_eos) <= set(part.doc_starts.tolist())


# --- the loader with the buffer on ------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 3])
def test_an_epoch_delivers_the_same_tokens_in_another_order(id_snapshot, world):
    on, off = Counter(), Counter()
    consume([make(id_snapshot, r, world) for r in range(world)], on)
    consume([make(id_snapshot, r, world, shuffle_buffer=0) for r in range(world)], off)
    assert on == off == expected_tokens(id_snapshot, load_manifest(id_snapshot)[0], CAPS)
    shuffled = stream([make(id_snapshot, r, world) for r in range(world)])
    plain = stream([make(id_snapshot, r, world, shuffle_buffer=0) for r in range(world)])
    assert shuffled != plain


def test_the_same_seed_gives_the_same_stream_and_another_seed_another(id_snapshot):
    a = stream([make(id_snapshot, r, 2) for r in range(2)])
    b = stream([make(id_snapshot, r, 2) for r in range(2)])
    c = stream([make(id_snapshot, r, 2, seed=12) for r in range(2)])
    assert a == b and a != c


def test_a_buffer_of_one_is_off(id_snapshot):
    one = [make(id_snapshot, r, 2, shuffle_buffer=1) for r in range(2)]
    assert one[0].shuffle_buffer == 0
    assert stream(one) == stream([make(id_snapshot, r, 2, shuffle_buffer=0) for r in range(2)])


def test_prefetch_does_not_change_the_shuffled_stream(id_snapshot):
    ahead = stream([make(id_snapshot, r, 2, prefetch_steps=4) for r in range(2)])
    assert ahead == stream([make(id_snapshot, r, 2, prefetch_steps=0) for r in range(2)])


def test_packing_reads_the_shuffled_stream_exactly_once(id_snapshot):
    packed: Counter = Counter()
    consume([make(id_snapshot, 0, 1, packing_window=8)], packed)
    assert packed == expected_tokens(id_snapshot, load_manifest(id_snapshot)[0], CAPS)


@pytest.mark.parametrize("new_world", [3, 1])
@pytest.mark.parametrize("pause", [5, 17])
def test_a_checkpoint_at_two_ranks_resumes_exactly_on_another_world(id_snapshot, new_world, pause):
    streams = shuffled_streams(id_snapshot, WINDOW, seed=11)
    delivered: Counter = Counter()
    first = [make(id_snapshot, r, 2) for r in range(2)]
    consume(first, delivered, steps=pause)
    record = checkpoint(first)
    assert record["shuffle_buffer"] == WINDOW
    assert delivered == owed_tokens(id_snapshot, record, streams)  # the record says what was read
    resumed = [make(id_snapshot, r, new_world) for r in range(new_world)]
    for ld in resumed:
        ld.load_record(record)
    consume(resumed, delivered)
    uninterrupted: Counter = Counter()
    consume([make(id_snapshot, r, 2) for r in range(2)], uninterrupted)
    assert delivered == uninterrupted == expected_tokens(id_snapshot, load_manifest(id_snapshot)[0], CAPS)


def test_a_resume_on_the_same_world_continues_the_same_stream(id_snapshot):
    straight = stream([make(id_snapshot, r, 2) for r in range(2)])
    first = [make(id_snapshot, r, 2) for r in range(2)]
    before = stream(first, steps=9)
    resumed = [make(id_snapshot, r, 2) for r in range(2)]
    for ld in resumed:
        ld.load_state_dict({"record": json.dumps(checkpoint(first))})
    assert before + stream(resumed) == straight


def test_a_chain_of_world_sizes_delivers_every_document_once(id_snapshot):
    delivered = through_worlds(make, id_snapshot, 2, [(3, 6), (1, 4), (4, 5), (2, None)])
    assert delivered == expected_tokens(id_snapshot, load_manifest(id_snapshot)[0], CAPS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(shuffle_buffer=0), "shuffle_buffer 4, this loader has 0"),
        (dict(shuffle_buffer=8), "shuffle_buffer 4, this loader has 8"),
        (dict(seed=12), "the shuffle is keyed by the seed"),
    ],
)
def test_a_record_of_another_shuffle_is_refused(id_snapshot, change, message):
    first = [make(id_snapshot, r, 2) for r in range(2)]
    consume(first, Counter(), steps=3)
    with pytest.raises(ResumeRefused, match=message):
        make(id_snapshot, 0, 3, **change).load_record(checkpoint(first))


def test_a_record_without_the_key_is_a_run_without_the_buffer(id_snapshot):
    first = [make(id_snapshot, r, 2, shuffle_buffer=0) for r in range(2)]
    consume(first, Counter(), steps=3)
    old = {k: v for k, v in checkpoint(first).items() if k != "shuffle_buffer"}
    make(id_snapshot, 0, 2, shuffle_buffer=0).load_record(old)
    with pytest.raises(ResumeRefused, match="shuffle_buffer 0, this loader has 4"):
        make(id_snapshot, 0, 2).load_record(old)


def test_trace_names_the_document_of_a_shuffled_token_after_a_resume(tmp_path):
    from snapshot_factory import write_lineage_snapshot

    snap = write_lineage_snapshot(tmp_path / "snap")
    delivered, record = resumed_on_three(make, snap, first_steps=6)
    how = dict(mixture=MIXTURE, seed=11, **OPTS)
    sources = check_traces(snap, delivered, sample(delivered, every=3), 3, record=record, **how)
    assert any(s.offset_in_doc == 0 and s.stream_position > 0 for s in sources)
    # a trace asked for without the buffer is refused, not answered with another document
    with pytest.raises(ResumeRefused, match="shuffle_buffer 4, this loader has 0"):
        check_traces(snap, delivered, sample(delivered, every=3), 3, record=record, shuffle_buffer=0, **how)


def test_a_version_read_shuffled_delivers_each_selected_document_once(id_snapshot, tmp_path):
    version = make_version(id_snapshot, tmp_path / "v", "min_scores = { quality = 0.3 }\n")
    delivered: Counter = Counter()
    consume([make(version, r, 3) for r in range(3)], delivered)
    assert delivered == selected_tokens(version, CAPS)
    plain = stream([make(version, r, 3, shuffle_buffer=0) for r in range(3)])
    assert stream([make(version, r, 3) for r in range(3)]) != plain


# --- the recipe -------------------------------------------------------------------------------------


def test_a_recipe_states_the_buffer_for_the_whole_run_and_keeps_its_hash_without_it(recipe_snapshot):
    snapshot_id = load_manifest(recipe_snapshot)[0].snapshot_id
    phases = phase_toml("main", 600, 16, MIXTURE, run_len=2)
    plain = parse_recipe(recipe_toml(snapshot_id, phases))
    shuffled = parse_recipe("shuffle_buffer = 4\n" + recipe_toml(snapshot_id, phases))
    assert plain.shuffle_buffer == 0 and "shuffle_buffer" not in plain.to_dict()
    assert shuffled.shuffle_buffer == 4 and shuffled.recipe_hash != plain.recipe_hash
    a = [SnapshotLoader.from_recipe(shuffled, recipe_snapshot, 2, r, 2) for r in range(2)]
    b = [SnapshotLoader.from_recipe(plain, recipe_snapshot, 2, r, 2) for r in range(2)]
    assert a[0].shuffle_buffer == 4 and stream(a, steps=10) != stream(b, steps=10)
    with pytest.raises(ValueError, match="shuffle_buffer"):
        SnapshotLoader.from_recipe(plain, recipe_snapshot, 2, 0, 2, shuffle_buffer=4)
    with pytest.raises(RecipeError, match="shuffle_buffer"):
        parse_recipe("shuffle_buffer = -1\n" + recipe_toml(snapshot_id, phases))
