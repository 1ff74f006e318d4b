"""Prefetch and read metrics: the delivered stream and every checkpoint are the same with prefetch on and
off, a resume starts at the delivered step (not the fetched one), and with latency injected into every read
the consumer does not wait for the reader once it is ahead (while without prefetch it waits every step)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from snapshot_factory import EOS, damaged_copy, small_loader

from loader import SnapshotLoader

#: what the latency tests inject into every read, and how long their consumer "trains" per step
LATENCY_S = 0.02


def make(root: Path, rank: int, world: int, prefetch: int, **kw) -> SnapshotLoader:
    return small_loader(root, rank, world, **{"seed": 5, "prefetch_steps": prefetch, **kw})


def wait_until_ahead(loader: SnapshotLoader, timeout: float = 10.0) -> None:
    """Block until the reader has filled its buffer or ended, so the state is taken with data fetched ahead."""
    pf = loader.reader.prefetcher
    deadline = time.monotonic() + timeout
    while pf is not None and time.monotonic() < deadline:
        with pf._cond:
            if len(pf._items) >= pf.depth or pf._done:
                return
        time.sleep(0.001)


def steps(loader: SnapshotLoader, n: int | None = None) -> list[tuple]:
    out = []
    while n is None or len(out) < n:
        b = loader.next_batch()
        if b is None:
            break
        out.append((b.step, b.buckets, b.tokens.numpy().tobytes(), b.loss_mask.numpy().tobytes()))
    return out


def record(loaders: list[SnapshotLoader]) -> str:
    return json.dumps(loaders[0].global_record([ld.local_state() for ld in loaders]), sort_keys=True)


@pytest.mark.parametrize("world", [1, 3])
def test_the_stream_is_the_same_with_prefetch_on_and_off(id_snapshot, world):
    off = [steps(make(id_snapshot, r, world, 0)) for r in range(world)]
    on = [steps(make(id_snapshot, r, world, 3)) for r in range(world)]
    assert on == off and all(off)


@pytest.mark.parametrize("k", [1, 4, 9])
def test_a_checkpoint_with_steps_fetched_ahead_records_the_delivered_step_and_resumes_there(id_snapshot, k):
    off = [make(id_snapshot, r, 3, 0) for r in range(3)]
    on = [make(id_snapshot, r, 3, 6) for r in range(3)]
    for a, b in zip(off, on, strict=True):
        assert steps(a, k) == steps(b, k)
        wait_until_ahead(b)
    assert any(ld.reader.prefetcher is not None and ld.reader.prefetcher._items for ld in on)
    saved = record(on)
    assert saved == record(off)  # the same bytes: nothing fetched ahead is in it
    rest_off = [steps(ld) for ld in off]
    for world in (3, 2):  # the same world continues each rank's stream, another one redistributes it
        resumed = [make(id_snapshot, r, world, 6) for r in range(world)]
        plain = [make(id_snapshot, r, world, 0) for r in range(world)]
        for ld in resumed + plain:
            ld.load_record(json.loads(saved))
        got = [steps(ld) for ld in resumed]
        assert got == [steps(ld) for ld in plain]
        if world == 3:
            assert got == rest_off


def test_seek_drops_what_was_fetched_and_goes_on_from_the_new_step(id_snapshot):
    on, off = make(id_snapshot, 1, 2, 4), make(id_snapshot, 1, 2, 0)
    assert steps(on, 2) == steps(off, 2)
    wait_until_ahead(on)
    on.seek(7)
    off.seek(7)
    assert steps(on) == steps(off)


def test_corruption_found_by_a_read_ahead_joins_the_state_only_when_its_step_is_delivered(
    id_snapshot, tmp_path
):
    root, bad = damaged_copy(id_snapshot, tmp_path / "snap")
    off, on = make(root, 0, 1, 0), make(root, 0, 1, 8)
    seen_off, seen_on = [], []
    while (a := off.next_batch()) is not None:
        b = on.next_batch()
        assert b is not None and a.tokens.equal(b.tokens)
        wait_until_ahead(on)
        seen_off.append(off.local_state()["skipped"])
        seen_on.append(on.local_state()["skipped"])
    assert seen_on == seen_off and [] in seen_off and [bad] in seen_off


def test_metrics_count_reads_and_stay_out_of_the_checkpoint(id_snapshot):
    loader = make(id_snapshot, 0, 1, 2)
    delivered = steps(loader, 5)
    before = loader.state_dict()
    m = loader.metrics()
    assert loader.state_dict() == before
    assert m["step"] == 5 and m["steps"] == 5 and m["prefetched_steps"] == 5 and m["reads"] >= 5
    # every delivered token but the appended EOS was read from its shard (int32, 4 bytes); the reader
    # may be further ahead, never behind
    read = [(np.frombuffer(t, np.int64) != EOS) & np.frombuffer(mask, bool) for _, _, t, mask in delivered]
    assert m["bytes_read"] >= 4 * sum(int(r.sum()) for r in read) > 0
    assert m["shard_opens"] >= 1 and m["shard_cache_hits"] >= 1
    assert set(m["read_latency_ms"]) == set(m["step_wait_ms"]) == {"p50", "p99"}
    head, _, body = loader.metrics_line().partition(": ")
    assert head == "[rank 0/1] loader metrics at step 5" and json.loads(body).keys() == m.keys()


def latency_run(root: Path, prefetch: int, consume_s: float) -> tuple[list[tuple], list[float]]:
    """Every step of rank 0 of 1 with ``LATENCY_S`` slept in every read and ``consume_s`` per step (the
    training step), and how long each step's data kept the consumer waiting."""
    loader = make(root, 0, 1, prefetch, batch_size=1, seq_len=8, chunk_tokens=1 << 20, run_len=4)
    loader.store.before_read = lambda shard, start, end: time.sleep(LATENCY_S)
    got = []
    for _ in range(16):
        b = loader.next_batch()
        if b is None:
            break
        got.append((b.step, b.tokens.numpy().tobytes()))
        time.sleep(consume_s)
    waits = list(loader.reader.metrics.wait_s)
    loader.close()
    return got, waits


def test_with_latency_injected_prefetch_keeps_the_stream_and_the_consumer_does_not_wait(id_snapshot):
    # a step reads at most two ranges here (seq_len 8, one sequence), so 4x the latency per step is a
    # consumer slower than the reader; the first step waits for the reader to start
    on, waits_on = latency_run(id_snapshot, 4, consume_s=4 * LATENCY_S)
    off, waits_off = latency_run(id_snapshot, 0, consume_s=0.0)
    assert on == off and len(on) == 16
    assert min(waits_off) >= LATENCY_S * 0.95  # without prefetch every step waits for its reads
    assert max(waits_on[1:]) < LATENCY_S / 2  # with it, none after the first (a generous bound)
