"""Corrupt shards are detected by digest on first read and substituted the same way every time;
unreachable ones are I/O errors, never corruption."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from snapshot_factory import CAPS, damaged_copy, expected_tokens, small_loader

from loader import SnapshotLoader, load_manifest
from loader.faults import ShardUnavailable, TooManyCorruptShards

make = small_loader


def stream(loaders: list[SnapshotLoader], steps: int | None = None) -> list[list[tuple]]:
    out: list[list[tuple]] = [[] for _ in loaders]
    n = 0
    while steps is None or n < steps:
        batches = [ld.next_batch() for ld in loaders]
        if all(b is None for b in batches):
            break
        for r, b in enumerate(batches):
            if b is not None:
                out[r].append((b.step, b.buckets, b.tokens.tolist(), b.loss_mask.tolist()))
        n += 1
    return out


def delivered(streams: list[list[tuple]]) -> Counter:
    c: Counter = Counter()
    for rank_stream in streams:
        for _, _, toks, mask in rank_stream:
            c.update(
                t for row, mrow in zip(toks, mask, strict=True) for t, m in zip(row, mrow, strict=True) if m
            )
    return c


@pytest.fixture
def damaged(id_snapshot: Path, tmp_path: Path) -> tuple[Path, int]:
    return damaged_copy(id_snapshot, tmp_path / "snap")


def test_a_flipped_byte_is_detected_and_the_shard_substituted_identically_on_replay(id_snapshot, damaged):
    root, bad = damaged
    first = [make(root, r, 3) for r in range(3)]
    run1 = stream(first)
    assert stream([make(root, r, 3) for r in range(3)]) == run1  # a replay in fresh loaders
    assert all(bad in ld.local_state()["skipped"] for ld in first)
    manifest = load_manifest(id_snapshot)[0]
    bad_ids = {
        int(t) for t in np.fromfile(id_snapshot / manifest.shards[bad].path, dtype=manifest.token_dtype)
    }
    got = delivered(run1)
    assert not bad_ids & set(got)  # nothing of the corrupt shard reaches training...
    expected = expected_tokens(id_snapshot, manifest, CAPS)
    assert sum(got.values()) == sum(expected.values())  # ...and the substitute fills exactly its place
    assert set(got) <= set(expected)


def test_substitution_survives_a_resume_at_another_world_size(damaged):
    root, bad = damaged
    uninterrupted = delivered(stream([make(root, r, 4) for r in range(4)]))
    first = [make(root, r, 4) for r in range(4)]
    before = delivered(stream(first, steps=6))
    record = first[0].global_record([ld.local_state() for ld in first])
    assert bad in record["skipped"]
    resumed = [make(root, r, 2) for r in range(2)]
    for ld in resumed:
        ld.load_record(record)
        assert bad in ld.store.skipped
    assert before + delivered(stream(resumed)) == uninterrupted


def test_a_missing_shard_is_an_io_error_not_corruption_and_is_read_once_it_is_back(id_snapshot, tmp_path):
    root = tmp_path / "snap"
    shutil.copytree(id_snapshot, root)
    manifest = load_manifest(root)[0]
    gone = next(i for i, s in enumerate(manifest.shards) if s.bucket == "wiki")
    path = root / manifest.shards[gone].path
    path.rename(path.with_name("away"))  # a mount that went away for a while
    loader = make(root, 0, 1, io_retry_delays=(0.0, 0.0))
    with pytest.raises(ShardUnavailable, match="could not be opened after 3 attempts.*not marked corrupt"):
        stream([loader])
    assert gone not in loader.store.skipped and loader.local_state()["skipped"] == []
    path.with_name("away").rename(path)  # back: the same loader reads it, nothing substituted
    healthy = make(id_snapshot, 0, 1)
    assert stream([make(root, 0, 1)]) == stream([healthy])


def test_more_than_a_tenth_of_a_percent_of_shards_skipped_halts(damaged):
    root, _ = damaged
    loader = make(root, 0, 1, max_skip_fraction=0.001)
    with pytest.raises(TooManyCorruptShards, match="corrupt or missing"):
        stream([loader])
