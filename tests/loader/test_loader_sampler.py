"""The sampler's pure functions: keyed orders, strided shares, stratified and renormalized bucket choice."""

from __future__ import annotations

from collections import Counter

import pytest

from loader.sampler import choose_bucket, epoch_chunks, rank_point, shard_permutation, strided

KEYS = [f"{i:064x}" for i in range(50)]


def test_shard_order_is_a_permutation_keyed_by_seed_bucket_and_epoch():
    base = shard_permutation(KEYS, seed=1, bucket="web", epoch=0)
    assert sorted(base) == list(range(50))
    assert shard_permutation(KEYS, seed=1, bucket="web", epoch=0) == base
    for other in (dict(seed=2, bucket="web", epoch=0), dict(seed=1, bucket="wiki", epoch=0),
                  dict(seed=1, bucket="web", epoch=1)):
        assert shard_permutation(KEYS, **other) != base


def test_shard_order_follows_content_not_list_position():
    order = [KEYS[i] for i in shard_permutation(KEYS, 1, "web", 0)]
    reversed_keys = KEYS[::-1]
    assert [reversed_keys[i] for i in shard_permutation(reversed_keys, 1, "web", 0)] == order


def test_epoch_chunks_cover_every_stream_position_once_in_file_order_within_a_shard():
    shards = [(10, KEYS[0], 25), (11, KEYS[1], 7), (12, KEYS[2], 0), (13, KEYS[3], 10)]
    chunks = epoch_chunks(shards, seed=0, bucket="b", epoch=3, chunk_tokens=10)
    assert [c.order for c in chunks] == list(range(len(chunks)))
    for index, _, n in shards:
        mine = [c for c in chunks if c.shard == index]
        assert [(c.start, c.end) for c in mine] == [(s, min(s + 10, n)) for s in range(0, n, 10)]
    assert all(c.epoch == 3 for c in chunks)


@pytest.mark.parametrize("n,world", [(10, 3), (3, 5), (0, 2), (12, 4), (7, 1)])
def test_strided_shares_partition_the_items(n, world):
    shares = [list(strided(n, r, world)) for r in range(world)]
    assert sorted(i for s in shares for i in s) == list(range(n))
    assert all(s == list(range(r, n, world)) for r, s in enumerate(shares))


@pytest.mark.parametrize("world", [1, 4, 10, 64])
def test_ranks_are_stratified_over_the_mixture_at_every_step(world):
    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    for run in range(20):
        counts = Counter(choose_bucket(rank_point(7, run, r, world), weights, set(weights)) for r in range(world))
        for b, w in weights.items():
            assert abs(counts[b] - w * world) <= 1.0


def test_an_exhausted_bucket_leaves_the_mixture_and_the_rest_are_renormalized():
    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    picks = Counter(choose_bucket(i / 1000, weights, {"a", "c"}) for i in range(1000))
    assert set(picks) == {"a", "c"}
    assert picks["a"] == pytest.approx(1000 * 0.5 / 0.7, abs=2)
    assert choose_bucket(0.3, weights, set()) is None
    assert choose_bucket(0.3, {"a": 0.0, "b": 1.0}, {"a", "b"}) == "b"
