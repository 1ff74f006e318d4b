"""The state: same inputs give the same batch in a fresh process; mismatched or missing state is refused."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from snapshot_factory import CAPS, MIXTURE

from loader import ResumeRefused, SnapshotLoader
from loader.checkpoint import load_checkpoint, save_checkpoint

ROOT = Path(__file__).resolve().parents[2]

FRESH_PROCESS = """
import hashlib, json, sys
from loader import SnapshotLoader
root, seed, step, rank, world = sys.argv[1], *map(int, sys.argv[2:6])
loader = SnapshotLoader(root, json.loads(sys.argv[6]), seed=seed, seq_len=16, batch_size=2, dp_rank=rank,
                        dp_world=world, epoch_caps=None, run_len=2, chunk_tokens=24)
loader.seek(step)
b = loader.next_batch()
print(b.step, hashlib.sha256(b.tokens.numpy().tobytes()).hexdigest())
"""


def make(root: Path, rank: int = 0, world: int = 1, **kw) -> SnapshotLoader:
    params = dict(
        mixture=MIXTURE, seed=8, seq_len=16, batch_size=2, epoch_caps=None, run_len=2, chunk_tokens=24
    )
    params.update(kw)
    return SnapshotLoader(root, dp_rank=rank, dp_world=world, **params)


def digest(batch) -> str:
    return hashlib.sha256(batch.tokens.numpy().tobytes()).hexdigest()


@pytest.mark.parametrize("seed,step,rank,world", [(8, 0, 0, 1), (9, 250, 4, 5)])
def test_the_same_seed_step_rank_and_world_give_the_same_batch_in_a_fresh_process(
    id_snapshot, seed, step, rank, world
):
    loader = make(id_snapshot, rank, world, seed=seed)
    for _ in range(step):
        loader.next_batch()
    here = loader.next_batch()
    assert here.step == step
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            FRESH_PROCESS,
            str(id_snapshot),
            str(seed),
            str(step),
            str(rank),
            str(world),
            json.dumps(MIXTURE),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    assert proc.stdout.split() == [str(step), digest(here)]
    other_seed = make(id_snapshot, rank, world, seed=seed + 100)
    other_seed.seek(step)
    assert digest(other_seed.next_batch()) != digest(here)


def _record(root: Path) -> dict:
    loader = make(root)
    for _ in range(5):
        loader.next_batch()
    return json.loads(loader.state_dict()["record"])


def test_a_checkpoint_of_another_snapshot_is_refused_unless_overridden(id_snapshot):
    record = _record(id_snapshot)
    record["snapshot_id"] = "sha256:" + "0" * 64
    with pytest.raises(ResumeRefused, match="snapshot"):
        make(id_snapshot).load_record(record)
    loader = make(id_snapshot)
    loader.load_record(record, allow_snapshot_mismatch=True)
    assert loader.step == 5


def test_a_checkpoint_of_another_sampler_version_is_refused_unless_overridden(id_snapshot):
    record = _record(id_snapshot)
    record["sampler_version"] = "loader-sampler/0"
    with pytest.raises(ResumeRefused, match="sampler"):
        make(id_snapshot).load_state_dict({"record": json.dumps(record)})
    make(id_snapshot).load_state_dict({"record": json.dumps(record)}, allow_version_mismatch=True)


def test_a_model_checkpoint_without_loader_state_is_refused_unless_overridden(id_snapshot, tmp_path):
    import torch.distributed.checkpoint as dcp

    model = torch.nn.Linear(3, 3)
    dcp.save({"train": {"model": model.state_dict()}}, checkpoint_id=str(tmp_path / "ckpt"))
    (tmp_path / "ckpt" / "train.json").write_text(json.dumps({"step": 12, "world": 1}))
    with pytest.raises(ResumeRefused, match="no loader state"):
        load_checkpoint(tmp_path / "ckpt", model, None, make(id_snapshot))
    loader = make(id_snapshot)
    assert load_checkpoint(tmp_path / "ckpt", model, None, loader, allow_missing_loader_state=True) == 12
    straight = make(id_snapshot)
    for _ in range(12):
        straight.next_batch()
    assert digest(loader.next_batch()) == digest(straight.next_batch())


def test_model_and_loader_state_round_trip_through_one_checkpoint(id_snapshot, tmp_path):
    model, loader = torch.nn.Linear(3, 3), make(id_snapshot, epoch_caps=CAPS)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    for _ in range(7):
        loader.next_batch()
    save_checkpoint(tmp_path / "ckpt", 7, model, optimizer, loader)
    expected = digest(loader.next_batch())
    model2, loader2 = torch.nn.Linear(3, 3), make(id_snapshot, epoch_caps=CAPS)
    optimizer2 = torch.optim.AdamW(model2.parameters())
    assert load_checkpoint(tmp_path / "ckpt", model2, optimizer2, loader2) == 7
    assert torch.equal(model2.weight, model.weight)
    assert digest(loader2.next_batch()) == expected
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "latest",
        "step-00000007",
    ]  # no partial left


def test_seek_lands_where_iteration_does_even_across_epoch_caps(id_snapshot):
    walked = make(id_snapshot, 1, 2, epoch_caps=CAPS, batch_size=3)
    batches = list(walked)
    assert len(batches) > 20
    for step in (0, 7, len(batches) // 2, len(batches) - 1):
        jumped = make(id_snapshot, 1, 2, epoch_caps=CAPS, batch_size=3)
        jumped.seek(step)
        got = jumped.next_batch()
        assert (
            got.step == step
            and torch.equal(got.tokens, batches[step].tokens)
            and got.buckets == batches[step].buckets
        )
    done = make(id_snapshot, 1, 2, epoch_caps=CAPS, batch_size=3)
    done.seek(len(batches) + 5)
    assert done.next_batch() is None
