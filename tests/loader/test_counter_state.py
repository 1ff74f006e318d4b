"""The online mixture counter's counts through a checkpoint: a run resumed inside a phase reports the phase
since its first step, a restored count of another phase is dropped, and a checkpoint without counts leaves
the counter counting from the resume. One process (the multi-rank restore is in test_recipe_torchrun.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from snapshot_factory import recipe_toml

from corpus.select.recipe import parse_recipe
from loader import MixtureCounter, SnapshotLoader, load_manifest
from loader.checkpoint import load_checkpoint, save_checkpoint

OPTS = dict(batch_size=2, chunk_tokens=24, run_len=3)


@pytest.fixture(scope="module")
def recipe(recipe_snapshot):
    return parse_recipe(recipe_toml(load_manifest(recipe_snapshot)[0].snapshot_id))


def fresh(snapshot: Path, recipe) -> tuple[SnapshotLoader, MixtureCounter]:
    loader = SnapshotLoader.from_recipe(recipe, snapshot, dp_rank=0, dp_world=1, **OPTS)
    return loader, MixtureCounter(sorted(loader.layout.buckets), every=1, tolerance=1.0)


def train(loader: SnapshotLoader, counter: MixtureCounter, steps: int, delivered: dict[str, Counter]) -> None:
    """``steps`` steps as examples/train.py takes them, adding each step's tokens to delivered[phase]."""
    for _ in range(steps):
        phase, weights = loader.phase, dict(loader.mixture)
        batch = loader.next_batch()
        counter.add(batch, phase, weights)
        for bucket, mask in zip(batch.buckets, batch.loss_mask, strict=True):
            delivered.setdefault(phase, Counter())[bucket] += int(mask.sum())


def counted(counter: MixtureCounter, step: int) -> tuple[str | None, dict[str, int]]:
    report = counter.reduce(step)
    return report["phase"], {b: n for b, n in report["tokens"].items() if n}


def test_the_state_holds_the_phase_and_its_tokens_and_restores_them(recipe_snapshot, recipe):
    loader, counter = fresh(recipe_snapshot, recipe)
    delivered: dict[str, Counter] = {}
    train(loader, counter, 5, delivered)
    state = counter.state_dict()
    assert json.loads(state["counts"]) == {
        "phase": "main",
        "tokens": {b: delivered["main"][b] for b in counter.buckets},
    }
    _, restored = fresh(recipe_snapshot, recipe)
    restored.load_state_dict(state)
    train(loader, restored, 3, delivered)  # the same phase goes on: counted on top of the restored tokens
    assert counted(restored, loader.step) == ("main", dict(delivered["main"]))


def test_a_restored_count_of_another_phase_is_dropped_at_the_first_step(recipe_snapshot, recipe):
    loader, counter = fresh(recipe_snapshot, recipe)
    delivered: dict[str, Counter] = {}
    train(loader, counter, 5, delivered)
    state = counter.state_dict()
    while loader.phase == "main":
        train(loader, counter, 1, delivered)
    _, restored = fresh(recipe_snapshot, recipe)
    restored.load_state_dict(state)  # counts of phase main, the run continues in mid
    train(loader, restored, 2, delivered)
    assert counted(restored, loader.step) == ("mid", dict(delivered["mid"]))


def test_a_resume_from_a_checkpoint_reports_the_phase_since_its_start(recipe_snapshot, recipe, tmp_path):
    """save_checkpoint keeps the counter's counts; load_checkpoint restores them into a fresh counter."""
    model = torch.nn.Linear(1, 1)
    loader, counter = fresh(recipe_snapshot, recipe)
    delivered: dict[str, Counter] = {}
    train(loader, counter, 6, delivered)
    save_checkpoint(tmp_path / "with", 6, model, None, loader, counter=counter)
    save_checkpoint(tmp_path / "without", 6, model, None, loader)
    for ckpt, since in (("with", delivered["main"]), ("without", Counter())):
        resumed, restored = fresh(recipe_snapshot, recipe)
        assert load_checkpoint(tmp_path / ckpt, model, None, resumed, counter=restored) == 6
        after: dict[str, Counter] = {}
        train(resumed, restored, 4, after)
        assert counted(restored, resumed.step) == ("main", dict(since + after["main"])), ckpt
