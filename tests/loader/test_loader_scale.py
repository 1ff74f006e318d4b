"""The loader at scale: it verifies what it reads (per-block digests), keeps a bounded set of shards
open, cuts a bucket with fewer chunks than ranks so every rank gets its share, and gathers its state
over the data-parallel group only."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from snapshot_factory import (
    AUDIT_2000_STEPS_ON_8,
    EOS,
    consume,
    corpus_cli,
    expected_tokens,
    flags,
    write_id_snapshot,
    write_snapshot,
)

import loader.faults as faults
from corpus.formats.block_layout import DOCUMENTS
from corpus.formats.megatron import read_index
from corpus.model.errors import UserError
from loader import SnapshotLoader, load_manifest
from loader.faults import ShardUnavailable

ONE_BUCKET = {"web": 1.0}
#: The loader's settings here (a test may override some).
PARAMS = dict(mixture=ONE_BUCKET, seed=2, seq_len=16, batch_size=2, epoch_caps=1, run_len=2, chunk_tokens=24)


def drain(loaders: list[SnapshotLoader], steps: int | None = None) -> Counter:
    delivered: Counter = Counter()
    consume(loaders, delivered, steps)
    return delivered


def make(root: Path, rank: int, world: int, **kw) -> SnapshotLoader:
    return SnapshotLoader(root, dp_rank=rank, dp_world=world, **{**PARAMS, **kw})


# --- verification: what is read, once --------------------------------------------------------------


def test_each_rank_hashes_about_what_it_reads_not_the_shards_it_touches(tmp_path):
    blocks = tmp_path / "blocks"
    write_id_snapshot(blocks, {"web": 6}, docs_per_shard=(10, 12), block_size=64)
    legacy = tmp_path / "legacy"
    write_id_snapshot(legacy, {"web": 6}, docs_per_shard=(10, 12), block_size=0)
    manifest = load_manifest(blocks)[0]
    total = sum((blocks / s.path).stat().st_size for s in manifest.shards)
    # chunks of 128 positions span ~8 blocks of 64 bytes (real ones: 1M tokens over 4 MiB blocks)
    by_block = [make(blocks, r, 4, chunk_tokens=128) for r in range(4)]
    by_file = [make(legacy, r, 4, chunk_tokens=128) for r in range(4)]
    assert drain(by_block) == drain(by_file)  # the same tokens either way
    hashed_blocks = [ld.store.bytes_hashed for ld in by_block]
    hashed_files = [ld.store.bytes_hashed for ld in by_file]
    # whole-file checks hash every shard a rank touches; block checks about the rank's quarter
    assert all(b < f for b, f in zip(hashed_blocks, hashed_files, strict=True)), (hashed_blocks, hashed_files)
    assert all(h < total / 2 for h in hashed_blocks)  # a quarter of the data, plus edge blocks
    assert sum(hashed_blocks) < 1.5 * total  # each block is hashed by the one or two ranks reading it


def test_a_bad_block_is_found_by_its_reader_and_nothing_of_it_is_delivered(tmp_path):
    good = tmp_path / "good"
    manifest = write_id_snapshot(good, {"web": 4}, docs_per_shard=(10, 12), block_size=64)
    root = tmp_path / "bad"
    shutil.copytree(good, root)
    bad = 1
    path = root / manifest.shards[bad].path
    data = bytearray(path.read_bytes())
    data[64 * 3 + 5] ^= 0x40  # block 3 of shard 1
    path.write_bytes(bytes(data))
    block_ids = set(np.fromfile(good / manifest.shards[bad].path, dtype=np.int32)[16 * 3 : 16 * 4].tolist())
    shard_ids = set(np.fromfile(good / manifest.shards[bad].path, dtype=np.int32).tolist())
    loaders = [make(root, r, 2, max_skip_fraction=0.5) for r in range(2)]
    got = drain(loaders)
    assert not block_ids & set(got)  # nothing of the bad block...
    assert (shard_ids - block_ids) & set(got)  # ...while blocks read before it verified were good data
    assert sum(got.values()) == sum(expected_tokens(good, manifest, {"web": 1}).values())
    assert any(bad in ld.store.skipped for ld in loaders)
    assert (
        drain([make(root, r, 2, max_skip_fraction=0.5) for r in range(2)]) == got
    )  # a replay reads the same


def test_a_bad_byte_in_a_document_block_is_found_by_its_reader_and_nothing_of_it_is_delivered(tmp_path):
    """write_shards' layout (each document's own blocks): the block holding a changed byte is found when a
    reader first reads from it, its shard is skipped from then on and none of its tokens are delivered."""
    good = tmp_path / "good"
    manifest = write_id_snapshot(
        good, {"web": 4}, docs_per_shard=(10, 12), block_size=64, block_layout=DOCUMENTS
    )
    assert all(s.block_layout == DOCUMENTS for s in manifest.shards)
    fixed = tmp_path / "fixed"
    write_id_snapshot(fixed, {"web": 4}, docs_per_shard=(10, 12), block_size=64)
    assert drain([make(good, r, 2) for r in range(2)]) == drain([make(fixed, r, 2) for r in range(2)])
    root = tmp_path / "bad"
    shutil.copytree(good, root)
    bad = 1
    index = read_index(good / manifest.shards[bad].files["idx"])
    doc = 4
    at = int(index.offsets[doc]) + 4 * (int(index.lengths[doc]) // 2)  # inside document 4
    path = root / manifest.shards[bad].path
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(bytes(data))
    tokens = np.fromfile(good / manifest.shards[bad].path, dtype=np.int32)
    block = (at - int(index.offsets[doc])) // 64 * 16 + int(
        index.offsets[doc]
    ) // 4  # its block's first token
    block_ids = set(
        tokens[block : min(block + 16, (int(index.offsets[doc]) // 4) + int(index.lengths[doc]))].tolist()
    )
    loaders = [make(root, r, 2, max_skip_fraction=0.5) for r in range(2)]
    got = drain(loaders)
    assert not block_ids & set(got)
    assert any(bad in ld.store.skipped for ld in loaders)
    assert sum(got.values()) == sum(expected_tokens(good, manifest, {"web": 1}).values())


def test_block_digests_are_read_from_the_shards_a_rank_reads_and_a_tampered_list_skips_its_shard(tmp_path):
    """The manifest names each shard's .blocks file by one digest (its size does not grow with the
    shard's bytes); a rank reads the digests of the shards it opens, and a .blocks file that does not
    match the manifest makes its shard corrupt, like a bad block."""
    good = tmp_path / "good"
    manifest = write_id_snapshot(good, {"web": 4}, docs_per_shard=(10, 12), block_size=64)
    listed = json.loads((good / "manifest.json").read_text())["shards"][0]
    assert "block_sha256" not in listed and len(listed["blocks_sha256"]) == 64
    inline = tmp_path / "inline"
    write_id_snapshot(inline, {"web": 4}, docs_per_shard=(10, 12), block_size=64, inline_block_digests=True)
    assert "block_sha256" in json.loads((inline / "manifest.json").read_text())["shards"][0]
    assert drain([make(good, 0, 1)]) == drain([make(inline, 0, 1)])  # both forms verify the same reads
    root = tmp_path / "bad"
    shutil.copytree(good, root)
    blocks = root / manifest.shards[2].files["blocks"]
    blocks.write_bytes(bytes(32) + blocks.read_bytes()[32:])  # block 0's digest zeroed
    ld = make(root, 0, 1, max_skip_fraction=0.5)
    got = drain([ld])
    assert ld.store.skipped == {2}
    assert not set(np.fromfile(good / manifest.shards[2].path, dtype=np.int32).tolist()) & set(got)


def test_a_snapshot_without_block_digests_still_loads_and_is_checked_whole(tmp_path):
    root = tmp_path / "old"
    manifest = write_id_snapshot(root, {"web": 3}, block_size=0)
    assert "block_size" not in json.loads((root / "manifest.json").read_text())["shards"][0]
    path = root / manifest.shards[0].path
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    ld = make(root, 0, 1, max_skip_fraction=0.5)
    assert drain([ld])
    assert ld.store.skipped == {0}


def test_too_many_open_files_closes_the_cache_and_retries_without_marking_anything(tmp_path, monkeypatch):
    root = tmp_path / "s"
    write_id_snapshot(root, {"web": 5})
    real, calls = faults.OpenShard, []

    def flaky(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(errno.EMFILE, "Too many open files")
        return real(*args, **kw)

    monkeypatch.setattr(faults, "OpenShard", flaky)
    ld = make(root, 0, 1, io_retry_delays=(0.0,))
    assert drain([ld]) == drain([make(root, 0, 1)])
    assert len(calls) >= 3 and ld.store.skipped == set()


def test_an_unreadable_shard_raises_after_the_retries(tmp_path, monkeypatch):
    root = tmp_path / "s"
    write_id_snapshot(root, {"web": 2})

    def down(*args, **kw):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(faults, "OpenShard", down)
    ld = make(root, 0, 1, io_retry_delays=(0.0, 0.0))
    with pytest.raises(ShardUnavailable, match="after 3 attempts: .*Input/output error"):
        ld.next_batch()
    assert ld.store.skipped == set()


# --- a bounded set of open shards ----------------------------------------------------------------


def test_open_shards_and_file_handles_stay_bounded_by_the_memory_budget(tmp_path):
    root = tmp_path / "many"
    write_id_snapshot(root, {"web": 60}, docs_per_shard=(2, 4))
    fds = len(os.listdir("/proc/self/fd"))
    small = make(root, 0, 1, memory_budget_mb=1, chunk_tokens=8)
    assert (small.store.max_open, small.store.max_mapped) == (2, 1 << 20)
    delivered: Counter = Counter()
    peak_open = peak_fds = 0
    while (b := small.next_batch()) is not None:
        delivered.update(b.tokens[b.loss_mask].tolist())
        with small.store.lock:  # between two reads (the prefetch thread reads a whole step under it)
            peak_open = max(peak_open, small.store.open_shards)
            peak_fds = max(peak_fds, len(os.listdir("/proc/self/fd")) - fds)
    assert peak_open == 2 and peak_fds <= 2 * 2
    assert small.store.opens >= 60  # every shard was opened, two at a time at most...
    assert delivered == drain([make(root, 0, 1, chunk_tokens=8)])  # ...and the data is the same
    with pytest.raises(UserError, match="memory_budget_mb must be positive"):
        make(root, 0, 1, memory_budget_mb=0)


# --- a bucket with fewer chunks than ranks ---------------------------------------------------------


def small_bucket_snapshot(root: Path) -> None:
    """Bucket ``rare`` is two small shards (two 1,024-token chunks at most), ``web`` has many."""
    rng = np.random.default_rng(0)
    next_id, buckets = 1, {}
    for bucket, shards, docs in (("rare", 2, 8), ("web", 40, 8)):
        buckets[bucket] = []
        for _ in range(shards):
            ds = []
            for _ in range(docs):
                n = int(rng.integers(20, 60))
                ds.append(np.arange(next_id, next_id + n, dtype=np.int32))
                next_id += n
            buckets[bucket].append(ds)
    write_snapshot(root, buckets, "int32", EOS)


def test_a_two_chunk_bucket_at_half_weight_on_8_ranks_delivers_half(tmp_path):
    root = tmp_path / "rare"
    small_bucket_snapshot(root)
    audit = flags(mixture={"rare": 0.5, "web": 0.5}, **AUDIT_2000_STEPS_ON_8, chunk_tokens=1024, json=True)
    report = json.loads(corpus_cli("mixture-audit", "--snapshot", root, *audit).stdout)
    rare = next(r for r in report["buckets"] if r["bucket"] == "rare")
    assert rare["cut"] and rare["chunks_per_epoch"] >= 8
    assert abs(rare["realized"] - 0.5) <= 0.02, rare  # uncut, 2 of 8 ranks would read it: 0.125
    table = corpus_cli(
        "mixture-audit",
        "--snapshot",
        root,
        *flags(mixture={"rare": 0.5, "web": 0.5}, world=8, steps=50, seq_len=16, chunk_tokens=1024),
    ).stdout
    assert "cut into pieces so each of the 8 ranks reads a share" in table


@pytest.mark.parametrize("before, after, k", [(8, 3, 7), (3, 8, 11), (8, 8, 5)])
def test_a_cut_bucket_resumes_exactly_once_on_another_world_size(tmp_path, before, after, k):
    root = tmp_path / "rare"
    small_bucket_snapshot(root)
    kw = dict(mixture={"rare": 0.5, "web": 0.5}, epoch_caps={"rare": 2, "web": 1}, chunk_tokens=1024)
    manifest = load_manifest(root)[0]
    expected = expected_tokens(root, manifest, kw["epoch_caps"])
    first = [make(root, r, before, **kw) for r in range(before)]
    assert "rare" in first[0].layout.cuts
    got = drain(first, steps=k)
    state = first[0].global_record([ld.local_state() for ld in first])
    assert state["chunk_cuts"] == {"rare": before}  # recorded: the resume reads the record as it was cut
    resumed = [make(root, r, after, **kw) for r in range(after)]
    for ld in resumed:
        ld.load_state_dict({"record": json.dumps(state)})
    assert got + drain(resumed) == expected


# --- the data-parallel process group -------------------------------------------------------------


def _dp_group_worker(rank: int, world: int, root: str, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    # tensor parallel pairs (0, 1) and (2, 3) read the same data: data-parallel groups are {0, 2}, {1, 3}
    groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    group = groups[rank % 2]
    ld = SnapshotLoader(root, **PARAMS, dp_group=group)
    for _ in range(3 + dist.get_rank(group)):
        ld.next_batch()
    record = ld.state_dict()["record"]
    Path(out, f"rank{rank}.json").write_text(json.dumps({"dp": [ld.rank, ld.world], "record": record}))
    dist.destroy_process_group()


def test_state_dict_gathers_over_the_data_parallel_group_it_is_given(tmp_path):
    root = tmp_path / "s"
    write_id_snapshot(root, {"web": 4})
    mp.spawn(_dp_group_worker, args=(4, str(root), f"file://{tmp_path / 'rdv'}", str(tmp_path)), nprocs=4)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert [g["dp"] for g in got] == [[0, 2], [0, 2], [1, 2], [1, 2]]
    assert got[0]["record"] == got[1]["record"] == got[2]["record"] == got[3]["record"]
    # the same two data-parallel ranks simulated in one process give the same record
    alone = [make(root, r, 2) for r in range(2)]
    for r, ld in enumerate(alone):
        for _ in range(3 + r):
            ld.next_batch()
    assert json.loads(got[0]["record"]) == alone[0].global_record([ld.local_state() for ld in alone])
