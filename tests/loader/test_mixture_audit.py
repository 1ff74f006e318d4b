"""``corpus mixture-audit``: the offline replay agrees with the loader and holds the target weights.

Stated tolerances, while no bucket runs out: with 8 ranks, 2,000 steps and runs of 4 steps, every bucket's
realized share of the tokens is within 0.02 (absolute) of its target weight; with 64 ranks and 10^5 steps
(runs of 8) within 10^-3 relative; and at the end of every run of a replay, every bucket's tokens are
within ``schedule_bound(runs)`` slots (one rank, one run) of its share of all tokens delivered so far.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from snapshot_factory import AUDIT_2000_STEPS_ON_8, CAPS, MIXTURE, corpus_cli, flags

from cli.commands.mixture_audit import audit
from corpus.model.digest import stable_hash64
from loader import SnapshotLoader
from loader.dataset import default_append_eos, load_manifest
from loader.sampler import bucket_bounds, schedule_bound
from loader.state import Plan, RankCursor, stream_layout

TOLERANCE = 0.02
#: The mixture, and sequences of 16 tokens, 2 a batch, from chunks of 24 tokens, of most audits here.
SEQUENCES = dict(mixture=MIXTURE, seq_len=16, batch_size=2, chunk_tokens=24)


def test_realized_weights_are_within_tolerance_of_the_target(id_snapshot):
    audit = flags(mixture=MIXTURE, **AUDIT_2000_STEPS_ON_8, chunk_tokens=24, json=True)
    proc = corpus_cli("mixture-audit", "--snapshot", id_snapshot, *audit)
    report = json.loads(proc.stdout)
    assert report["steps_delivered"] == 2000
    assert {r["bucket"]: r["target"] for r in report["buckets"]} == MIXTURE
    for row in report["buckets"]:
        assert abs(row["realized"] - row["target"]) <= TOLERANCE, row
        assert row["first_exhausted_step"] is None


def test_the_replay_counts_exactly_what_the_loader_delivers(id_snapshot):
    report = audit(id_snapshot, **SEQUENCES, seed=6, world=3, steps=40, run_len=2, epoch_caps=CAPS)
    delivered: Counter = Counter()
    for rank in range(3):
        loader = SnapshotLoader(
            id_snapshot, **SEQUENCES, seed=6, dp_rank=rank, dp_world=3, run_len=2, epoch_caps=CAPS
        )
        for batch, _ in zip(loader, range(40), strict=False):
            for bucket, mask in zip(batch.buckets, batch.loss_mask, strict=True):
                delivered[bucket] += int(mask.sum())
    assert {r["bucket"]: r["tokens"] for r in report["buckets"]} == dict(delivered)


def test_epoch_caps_show_up_as_exhausted_buckets(id_snapshot):
    report = audit(id_snapshot, **SEQUENCES, seed=6, world=2, steps=10_000, run_len=2, epoch_caps=CAPS)
    assert report["steps_delivered"] < 10_000  # every bucket reached its cap: the stream ended
    for row in report["buckets"]:
        assert row["ranks_exhausted"] == 2 and row["first_exhausted_step"] is not None
        assert row["rank0_epoch"] is None


def test_an_unknown_bucket_is_a_one_line_error(id_snapshot):
    proc = corpus_cli("mixture-audit", "--snapshot", id_snapshot, "--mixture", '{"nope": 1}', check=False)
    assert proc.returncode == 2
    assert "nope" in proc.stderr and proc.stderr.count("\n") == 1


def test_64_ranks_and_10_5_steps_hold_every_bucket_within_1e_3_relative(id_snapshot):
    report = audit(id_snapshot, **SEQUENCES, seed=3, world=64, steps=100_000, run_len=8, epoch_caps=None)
    assert report["steps_delivered"] == 100_000 and report["bound_slots"] == schedule_bound(12_500) == 20
    assert report["max_rel_error"] <= 1e-3
    assert report["max_dev_slots"] < report["bound_slots"]


def old_hash_schedule_dev(weights: dict, seed: int, world: int, runs: int) -> float:
    """The largest deviation (in slots) after any run under loader-sampler/1: one hashed offset per run."""
    bounds = bucket_bounds(weights, set(weights))
    acc = np.array([a for _, a in bounds])
    offsets = np.array([stable_hash64("bucket-run", seed, u) / float(1 << 64) for u in range(runs)])
    slots = np.zeros((len(bounds), runs))
    for r in range(world):
        chosen = np.minimum(np.searchsorted(acc, (offsets + r / world) % 1.0, side="right"), len(acc) - 1)
        np.add.at(slots, (chosen, np.arange(runs)), 1)
    target = np.array([weights[b] for b, _ in bounds]) / sum(weights.values())
    return float(np.abs(np.cumsum(slots, axis=1) - target[:, None] * world * np.arange(1, runs + 1)).max())


def test_16_ranks_stay_within_the_slot_bound_at_every_run_where_hashed_offsets_did_not(id_snapshot):
    report = audit(id_snapshot, **SEQUENCES, seed=3, world=16, steps=20_000, run_len=1, epoch_caps=None)
    bound = report["bound_slots"]
    assert bound == schedule_bound(20_000) == 20
    assert report["max_dev_slots"] < bound and report["max_rel_error"] <= 1e-3
    assert old_hash_schedule_dev(MIXTURE, seed=3, world=16, runs=20_000) > 2 * bound  # 55 slots


@pytest.mark.parametrize(
    "seed,world,steps,seq_len,batch_size,run_len,chunk_tokens,caps",
    [
        (6, 2, 10_000, 16, 2, 2, 24, CAPS),  # every bucket runs out, the streams end
        (1, 5, 3000, 16, 3, 3, 24, CAPS),
        (2, 4, 800, 7, 2, 5, 10, {"code": 3, "web": None, "wiki": 2}),  # runs out mid-batch, one bucket never
    ],
)
def test_the_vectorized_replay_equals_stepping_every_rank_cursor(
    id_snapshot, seed, world, steps, seq_len, batch_size, run_len, chunk_tokens, caps
):
    report = audit(
        id_snapshot,
        MIXTURE,
        seed=seed,
        world=world,
        steps=steps,
        seq_len=seq_len,
        batch_size=batch_size,
        run_len=run_len,
        chunk_tokens=chunk_tokens,
        epoch_caps=caps,
    )
    manifest = load_manifest(id_snapshot)[0]
    layout = stream_layout(manifest.shards, seed, chunk_tokens, caps, default_append_eos(manifest), world)
    tokens: Counter = Counter()
    sequences: Counter = Counter()
    exhausted: dict[str, list[int]] = {b: [] for b in caps}
    last = 0
    for rank in range(world):
        cursor = RankCursor(layout, Plan.fresh(world), rank)
        for _ in range(steps):
            before = set(cursor.active)
            plans = cursor.next_batch(MIXTURE, seed, run_len, seq_len, batch_size, collect=False)
            if plans is None:
                break
            for sp in plans:
                tokens[sp.bucket] += seq_len - sp.pad
                sequences[sp.bucket] += 1
            for b in before - cursor.active:
                exhausted[b].append(cursor.step - 1)
        last = max(last, cursor.step)
    assert report["steps_delivered"] == last
    for row in report["buckets"]:
        b = row["bucket"]
        assert (row["tokens"], row["sequences"]) == (tokens[b], sequences[b])
        assert (row["ranks_exhausted"], row["first_exhausted_step"]) == (
            len(exhausted[b]),
            min(exhausted[b], default=None),
        )
