"""The pure parts of write_shards: shuffle keys, shard cuts and the validation numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpc_jobs.write_shards.census import shuffle_key
from hpc_jobs.write_shards.config import WriteShardsConfig
from hpc_jobs.write_shards.cuts import ShardPlan, histogram_bits, shard_runs
from hpc_jobs.write_shards.stage import WriteShards
from hpc_jobs.write_shards.validation import shard_stats, validation_failures
from runtime.runner import StageError


def test_shuffle_key_is_a_pure_function_of_doc_id_and_seed():
    assert shuffle_key("abc", 1) == shuffle_key("abc", 1)
    assert shuffle_key("abc", 1) != shuffle_key("abc", 2)
    assert shuffle_key("abc", 1) != shuffle_key("abd", 1)
    assert 0 <= shuffle_key("abc", 1) < 2**64


def _shard_of_bins(starts: np.ndarray, numbers: np.ndarray, bins: int) -> np.ndarray:
    return numbers[np.searchsorted(starts, np.arange(bins), side="right") - 1]


def test_shards_are_cut_every_target_tokens_and_the_last_takes_the_rest():
    rng = np.random.default_rng(0)
    hist = rng.integers(0, 50, size=1 << 16)
    target = 100_000
    starts, numbers, filled = shard_runs([hist], int(hist.sum()), target)
    shard = _shard_of_bins(starts, numbers, len(hist))
    n = math.ceil(hist.sum() / target)
    assert shard.min() == 0 and shard.max() == n - 1 and numbers.tolist() == list(range(n)) and filled.all()
    assert np.all(np.diff(shard) >= 0), "shards are contiguous key ranges"
    sizes = np.bincount(shard, weights=hist)
    assert np.all(np.abs(sizes[:-1] - target) <= hist.max())
    assert sizes.sum() == hist.sum()


@pytest.mark.parametrize("chunk", [1, 7, 1000, 1 << 16])
def test_the_cuts_read_in_chunks_are_those_of_the_whole_histogram(chunk):
    """Whatever the chunks, every bin's shard is ``min(tokens before it // target, shards - 1)`` (a bin
    larger than the target skips shard numbers) and a shard is kept iff a bin of it holds tokens."""
    rng = np.random.default_rng(chunk)
    hist = rng.integers(0, 50, size=1 << 16) * (rng.random(1 << 16) < 0.3)
    hist[[5, 40_000]] = 400_000  # one bin the size of several shards
    hist[60_000:] = 0  # an empty tail: its shard number holds no key
    target = 100_000
    n = math.ceil(hist.sum() / target)
    starts, numbers, filled = shard_runs(
        (hist[i : i + chunk] for i in range(0, len(hist), chunk)), int(hist.sum()), target
    )
    whole = np.minimum((np.cumsum(hist) - hist) // target, n - 1)
    assert np.array_equal(_shard_of_bins(starts, numbers, len(hist)), whole)
    assert np.all(np.diff(numbers) > 0), "one run per shard number"
    assert numbers[filled].tolist() == np.unique(whole[hist > 0]).tolist()
    plan = ShardPlan(["b"], [(16, starts, np.where(filled, np.cumsum(filled) - 1, -1))], [])
    keys = rng.integers(0, 2**64 - 1, size=1000, dtype=np.uint64)
    keys = keys[hist[(keys >> np.uint64(48)).astype(np.int64)] > 0]
    want = np.searchsorted(numbers[filled], whole[(keys >> np.uint64(48)).astype(np.int64)])
    assert np.array_equal(plan.parts_of(np.zeros(len(keys), np.int64), keys), want)


def test_histogram_resolution_grows_with_the_number_of_shards():
    assert histogram_bits(10, 1 << 24) == 16
    assert histogram_bits(1 << 40, 1 << 24) == 22  # 65,536 shards x 64 bins
    assert histogram_bits(1 << 50, 1 << 24) == 24


def test_shard_stats_measure_runs_entropy_and_top_token():
    eos = 9
    uniform = np.tile(np.arange(256, dtype=np.int32), 4)
    s = shard_stats(np.concatenate([uniform, [eos]]).astype(np.int32), eos_id=eos)
    assert s["tokens"] == 1025 and s["max_repeat_run"] == 1
    assert s["entropy_millibits"] == 7994  # log2(255) = 7.99435 bits: eos (9) is left out
    degenerate = np.array([5] * 3000 + [6, eos], dtype=np.uint16)
    d = shard_stats(degenerate, eos_id=eos)
    assert (d["max_repeat_run"], d["max_repeat_token"]) == (3000, 5)
    assert d["top_token"] == 5 and d["top_token_share"] > 0.99


def test_validation_names_every_number_that_fails():
    cfg = WriteShardsConfig()
    bad = {
        "tokens": 10,
        "max_repeat_run": 5000,
        "max_repeat_token": 7,
        "entropy_millibits": 500,
        "top_token": 5,
        "top_token_share": 0.9,
    }
    failures = validation_failures(bad, index_tokens=11, cfg=cfg)
    assert len(failures) == 4
    assert "token count 10 != 11" in failures[0] and "token 7 repeats 5000 times" in failures[1]
    good = {
        "tokens": 10,
        "max_repeat_run": 3,
        "entropy_millibits": 9000,
        "top_token": 5,
        "top_token_share": 0.05,
    }
    assert validation_failures(good, index_tokens=10, cfg=cfg) == []


def test_a_bucket_name_that_cannot_be_a_file_name_is_refused():
    with pytest.raises(StageError, match="bucket 'web/news'"):
        WriteShards(WriteShardsConfig(bucket_of_source={"news": "web/news"}))
