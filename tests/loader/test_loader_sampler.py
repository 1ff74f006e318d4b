"""The sampler's pure functions: keyed orders, an epoch's chunks (computed on demand, as made one by one),
strided shares, stratified and renormalized bucket choice, and the golden-ratio schedule of buckets over
runs with its bound (vectorized and scalar forms agree)."""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from corpus.model.digest import stable_hash64, stable_hash64_each
from loader.sampler import (
    GOLDEN_STEP,
    EpochChunks,
    Piece,
    bucket_thresholds,
    cf_quotients,
    choose_bucket,
    choose_buckets,
    max_segments,
    rank_bound,
    rank_point,
    ranks_per_bucket,
    run_points,
    run_step,
    schedule_bound,
    shard_cuts,
    shard_permutation,
    strided,
)

KEYS = [f"{i:064x}" for i in range(50)]


def test_shard_order_is_a_permutation_keyed_by_seed_bucket_and_epoch():
    base = shard_permutation(KEYS, seed=1, bucket="web", epoch=0)
    assert sorted(base) == list(range(50))
    assert shard_permutation(KEYS, seed=1, bucket="web", epoch=0) == base
    for other in (
        dict(seed=2, bucket="web", epoch=0),
        dict(seed=1, bucket="wiki", epoch=0),
        dict(seed=1, bucket="web", epoch=1),
    ):
        assert shard_permutation(KEYS, **other) != base


def test_shard_order_is_by_the_stable_hash_of_seed_bucket_epoch_and_shard():
    def framed(b: bytes) -> bytes:
        return len(b).to_bytes(8, "little") + b

    # a stable hash is blake2b-64 of its parts, each after its length: fixed across releases
    blake = hashlib.blake2b(
        framed(b"shard-order") + framed(b"1") + framed(b"web") + framed(b""), digest_size=8
    )
    assert stable_hash64("shard-order", 1, "web", b"") == int.from_bytes(blake.digest(), "little")
    # the prefix hashed once and copied gives each shard the hash of all its parts
    keys = stable_hash64_each(("shard-order", 1, "web", 0), KEYS)
    assert keys == [stable_hash64("shard-order", 1, "web", 0, k) for k in KEYS]
    by_definition = sorted(
        range(len(KEYS)), key=lambda i: (stable_hash64("shard-order", 1, "web", 0, KEYS[i]), KEYS[i])
    )
    assert shard_permutation(KEYS, 1, "web", 0) == by_definition


def test_shard_order_follows_content_not_list_position():
    order = [KEYS[i] for i in shard_permutation(KEYS, 1, "web", 0)]
    reversed_keys = KEYS[::-1]
    assert [reversed_keys[i] for i in shard_permutation(reversed_keys, 1, "web", 0)] == order


def test_epoch_chunks_cover_every_stream_position_once_in_file_order_within_a_shard():
    shards = [(10, KEYS[0], 25), (11, KEYS[1], 7), (12, KEYS[2], 0), (13, KEYS[3], 10)]
    chunks = EpochChunks(shards, seed=0, bucket="b", epoch=3, chunk_tokens=10)
    assert [c.order for c in chunks] == list(range(len(chunks)))
    for index, _, n in shards:
        mine = [c for c in chunks if c.shard == index]
        assert [(c.start, c.end) for c in mine] == [(s, min(s + 10, n)) for s in range(0, n, 10)]
    assert all(c.epoch == 3 for c in chunks)


def _chunks_made_one_by_one(shards, seed, bucket, epoch, chunk_tokens, cut_world=0):
    """The chunks as the sampler defined them before they were computed on demand: every one, made."""
    cuts = shard_cuts([s[2] for s in shards], chunk_tokens, cut_world) if cut_world else None
    out = []
    for i in shard_permutation([s[1] for s in shards], seed, bucket, epoch):
        index, _, n = shards[i]
        if cuts is None:
            bounds = [*range(0, n, chunk_tokens), n]
        else:
            bounds = [j * n // cuts[i] for j in range(cuts[i] + 1)] if cuts[i] else [0]
        for start, end in zip(bounds, bounds[1:], strict=False):
            out.append(Piece(epoch, len(out), index, start, end))
    return out


@pytest.mark.parametrize("chunk_tokens,cut_world", [(10, 0), (7, 0), (1, 0), (1000, 64), (10, 5)])
def test_an_epochs_chunks_computed_on_demand_are_the_chunks_made_one_by_one(chunk_tokens, cut_world):
    rng = random.Random(chunk_tokens + cut_world)
    shards = [
        (20 + i, KEYS[i % len(KEYS)] + str(i), rng.choice([0, 1, 9, 10, 11, 25, 100])) for i in range(12)
    ]
    made = _chunks_made_one_by_one(shards, 5, "web", 2, chunk_tokens, cut_world)
    chunks = EpochChunks(
        shards, seed=5, bucket="web", epoch=2, chunk_tokens=chunk_tokens, cut_world=cut_world
    )
    assert len(chunks) == len(made) and list(chunks) == made
    assert [chunks[k] for k in range(len(made))] == made  # by place, as a rank's queue asks
    assert chunks[3::4] == made[3::4] and chunks[-1] == made[-1]
    with pytest.raises(IndexError):
        chunks[len(made)]


def test_a_rank_finds_its_chunk_of_a_huge_epoch_without_the_epoch_being_made():
    # 15 T stream positions in chunks of one: a rank reads one chunk in world, so none is made ahead
    shards = [(i, KEYS[i % len(KEYS)] + str(i), 500_000_000_000) for i in range(30)]
    chunks = EpochChunks(shards, seed=0, bucket="web", epoch=0, chunk_tokens=1)
    assert len(chunks) == 15 * 10**12
    last = chunks[len(chunks) - 1]
    assert (last.order, last.start, last.end) == (15 * 10**12 - 1, 500_000_000_000 - 1, 500_000_000_000)


@pytest.mark.parametrize("n,world", [(10, 3), (3, 5), (0, 2), (12, 4), (7, 1)])
def test_strided_shares_partition_the_items(n, world):
    shares = [list(strided(n, r, world)) for r in range(world)]
    assert sorted(i for s in shares for i in s) == list(range(n))
    assert all(s == list(range(r, n, world)) for r, s in enumerate(shares))


@pytest.mark.parametrize("world", [1, 4, 10, 64])
def test_ranks_are_stratified_over_the_mixture_at_every_step(world):
    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    for run in range(20):
        counts = Counter(
            choose_bucket(rank_point(7, run, r, world), weights, set(weights)) for r in range(world)
        )
        for b, w in weights.items():
            assert abs(counts[b] - w * world) <= 1.0


def test_an_exhausted_bucket_leaves_the_mixture_and_the_rest_are_renormalized():
    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    picks = Counter(choose_bucket(i / 1000, weights, {"a", "c"}) for i in range(1000))
    assert set(picks) == {"a", "c"}
    assert picks["a"] == pytest.approx(1000 * 0.5 / 0.7, abs=2)
    assert choose_bucket(0.3, weights, set()) is None
    assert choose_bucket(0.3, {"a": 0.0, "b": 1.0}, {"a", "b"}) == "b"


# --- the mixture schedule: a golden-ratio sequence over runs (issue 14, item 4) ----------------------

MIXES = [
    {"a": 0.5, "b": 0.3, "c": 0.2},
    {"books": 0.05, "code": 0.15, "math": 0.013, "web": 0.637, "wiki": 0.15},
]


def test_the_golden_step_is_the_odd_integer_nearest_2_64_times_the_golden_ratio_conjugate():
    exact = Fraction(math.isqrt(5 << 256) - (1 << 128), 2 << 64)  # 2^64·(√5−1)/2, to within 2^-64
    assert GOLDEN_STEP % 2 == 1 and abs(GOLDEN_STEP - exact) < 1
    assert cf_quotients(GOLDEN_STEP, 1 << 64, 1 << 30) == [1] * len(
        cf_quotients(GOLDEN_STEP, 1 << 64, 1 << 30)
    )
    for world in (
        1,
        2,
        3,
        64,
        144,
        1000,
    ):  # every world moves the ranks' place in their strata by the same step
        assert run_step(world) % (1 << 64) == GOLDEN_STEP and run_step(world) >> 64 < world
    assert run_step(1) == GOLDEN_STEP


@pytest.mark.parametrize("world", [1, 3, 16, 64])
def test_vectorized_points_and_choices_equal_the_scalar_ones(world):
    rng = random.Random(world)
    for start in (0, 977, (1 << 32) - 7, 10**12):
        seed = rng.randrange(100)
        stratum, place = run_points(seed, world, start, start + 6)
        for weights in MIXES:
            for active in (set(weights), set(sorted(weights)[1:]), {sorted(weights)[-1]}):
                names, ts, tp = bucket_thresholds(weights, active, world)
                for r in range(world):
                    got = choose_buckets((stratum + r) % world, place, (ts, tp))
                    for k in range(6):
                        point = rank_point(seed, start + k, r, world)
                        assert point == Fraction(
                            ((int(stratum[k]) + r) % world << 64) + int(place[k]), world << 64
                        )
                        assert names[got[k]] == choose_bucket(point, weights, active)
                per_run = ranks_per_bucket(place, (ts, tp), world)
                for k in range(6):
                    chosen = Counter(
                        choose_bucket(rank_point(seed, start + k, r, world), weights, active)
                        for r in range(world)
                    )
                    assert [chosen[b] for b in names] == per_run[:, k].tolist()


def test_max_segments_is_the_largest_ostrowski_digit_sum_up_to_n():
    def digit_sum(num, den, n):
        qs, prev = [1], 0
        for a in cf_quotients(num, den, max(n, 1)):
            qs, prev = [*qs, a * qs[-1] + prev], qs[-1]
        total = 0
        for q in reversed(qs):
            total, n = total + n // q, n % q
        return total

    for num, den in [
        (GOLDEN_STEP, 1 << 64),
        (run_step(64), 64 << 64),
        (run_step(7), 7 << 64),
        (12345678901234567, 1 << 64),
    ]:
        best = 0
        for n in range(1, 1500):
            best = max(best, digit_sum(num, den, n))
            if n % 97 == 0 or n < 30:
                assert max_segments(num, den, n) == best, (num, den, n)


@pytest.mark.parametrize(
    "world,seed,run_len", [(1, 0, 1), (2, 1, 3), (3, 2, 1), (8, 3, 2), (16, 4, 1), (64, 5, 1), (144, 6, 1)]
)
def test_every_bucket_is_within_the_stated_bound_after_any_number_of_steps(world, seed, run_len):
    """Total (rank, run) slots of each bucket vs ``w·W·R``: below schedule_bound(R) after every run R, and
    rank by rank below rank_bound(W, R), whatever the world size; in between, after every step too."""
    runs = 3000
    bound = np.array([schedule_bound(n) for n in range(1, runs + 1)])
    per_rank_bound = np.array([rank_bound(world, n) for n in range(1, runs + 1)])
    n = np.arange(1, runs + 1)
    stratum, place = run_points(seed, world, 0, runs)
    for weights in MIXES:
        names, ts, tp = bucket_thresholds(weights, set(weights), world)
        w = np.array([weights[b] for b in names]) / sum(weights.values())
        slots = np.cumsum(ranks_per_bucket(place, (ts, tp), world), axis=1)
        dev = np.abs(slots - w[:, None] * world * n)
        assert (dev < bound).all(), dev.max()
        # after every step: the same counts, each run's slots spread over its run_len steps
        steps = np.arange(1, runs * run_len + 1)
        per_step = np.repeat(ranks_per_bucket(place, (ts, tp), world), run_len, axis=1)
        dev_steps = np.abs(np.cumsum(per_step, axis=1) - w[:, None] * world * steps) / run_len
        assert (dev_steps < np.repeat(bound, run_len)).all()
        for r in range(world):
            mine = choose_buckets((stratum + r) % world, place, (ts, tp))
            for j in range(len(names)):
                assert (np.abs(np.cumsum(mine == j) - w[j] * n) < per_rank_bound).all(), (r, names[j])


def test_the_bounds_stay_small_at_scale():
    # 30 T tokens at 4 M tokens a step, runs of 8: 894,070 runs
    assert schedule_bound(894_070) == 28
    assert schedule_bound(12_500) == 20  # 64 ranks, 10^5 steps, runs of 8
    assert max(rank_bound(w, 12_500) for w in (1, 2, 8, 16, 24, 64, 128, 144, 512, 1024)) <= 60
