"""``corpus mixture-audit``: the offline replay agrees with the loader and holds the target weights.

Stated tolerance: with 8 ranks, 2,000 steps and runs of 4 steps, every bucket's realized share of the
tokens is within 0.02 (absolute) of its target weight while no bucket runs out.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from snapshot_factory import CAPS, MIXTURE

from cli.commands.mixture_audit import audit
from loader import SnapshotLoader

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 0.02


def test_realized_weights_are_within_tolerance_of_the_target(id_snapshot):
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "mixture-audit", str(id_snapshot), "--mixture", json.dumps(MIXTURE),
         "--world", "8", "--steps", "2000", "--seq-len", "16", "--batch-size", "2", "--run-len", "4",
         "--chunk-tokens", "24", "--seed", "3", "--json"],
        capture_output=True, text=True, cwd=ROOT, check=True)
    report = json.loads(proc.stdout)
    assert report["steps_delivered"] == 2000
    assert {r["bucket"]: r["target"] for r in report["buckets"]} == MIXTURE
    for row in report["buckets"]:
        assert abs(row["realized"] - row["target"]) <= TOLERANCE, row
        assert row["first_exhausted_step"] is None


def test_the_replay_counts_exactly_what_the_loader_delivers(id_snapshot):
    report = audit(id_snapshot, MIXTURE, seed=6, world=3, steps=40, seq_len=16, batch_size=2, run_len=2,
                   chunk_tokens=24, epoch_caps=CAPS)
    delivered: Counter = Counter()
    for rank in range(3):
        loader = SnapshotLoader(id_snapshot, MIXTURE, seed=6, seq_len=16, batch_size=2, dp_rank=rank, dp_world=3,
                                epoch_caps=CAPS, run_len=2, chunk_tokens=24)
        for batch, _ in zip(loader, range(40), strict=False):
            for bucket, mask in zip(batch.buckets, batch.loss_mask, strict=True):
                delivered[bucket] += int(mask.sum())
    assert {r["bucket"]: r["tokens"] for r in report["buckets"]} == dict(delivered)


def test_epoch_caps_show_up_as_exhausted_buckets(id_snapshot):
    report = audit(id_snapshot, MIXTURE, seed=6, world=2, steps=10_000, seq_len=16, batch_size=2, run_len=2,
                   chunk_tokens=24, epoch_caps=CAPS)
    assert report["steps_delivered"] < 10_000  # every bucket reached its cap: the stream ended
    for row in report["buckets"]:
        assert row["ranks_exhausted"] == 2 and row["first_exhausted_step"] is not None
        assert row["rank0_epoch"] is None


def test_an_unknown_bucket_is_a_one_line_error(id_snapshot):
    proc = subprocess.run([sys.executable, "-m", "cli", "mixture-audit", str(id_snapshot), "--mixture",
                           '{"nope": 1}'], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert "nope" in proc.stderr and proc.stderr.count("\n") == 1
