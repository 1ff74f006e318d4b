"""Topology from the launcher's environment, and the loader inside torch's DataLoader."""

from __future__ import annotations

import pytest
from snapshot_factory import CAPS, MIXTURE
from torch.utils.data import DataLoader

from loader import SnapshotLoader, World
from loader.sequences import Batch


@pytest.mark.parametrize("env,expected", [
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "1234"},
     World(3, 4, 1, "torchrun", "n1", 1234)),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "20042"},
     World(5, 8, 1, "slurm", "127.0.0.1", 20042)),
    ({"RANK": "0", "WORLD_SIZE": "2", "SLURM_PROCID": "7", "SLURM_NTASKS": "9"}, World(0, 2, 0, "torchrun")),
    ({}, World(0, 1)),
])
def test_world_comes_from_torchrun_then_slurm_then_defaults(env, expected):
    assert World.detect(env) == expected


def test_a_rank_outside_the_world_is_refused():
    with pytest.raises(ValueError, match="outside"):
        World.detect({"RANK": "4", "WORLD_SIZE": "4"})


def test_the_loader_ranks_default_to_the_environment(id_snapshot, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    loader = SnapshotLoader(id_snapshot, MIXTURE)
    assert (loader.rank, loader.world) == (2, 3)


def test_it_works_inside_a_dataloader_and_refuses_worker_processes(id_snapshot):
    loader = SnapshotLoader(id_snapshot, MIXTURE, seq_len=16, batch_size=2, epoch_caps=CAPS, dp_rank=0, dp_world=1)
    batches = list(DataLoader(loader, batch_size=None))
    assert batches and all(isinstance(b, Batch) for b in batches)
    assert [b.step for b in batches] == list(range(len(batches)))
    with pytest.raises(RuntimeError, match="num_workers=0"):
        next(iter(DataLoader(SnapshotLoader(id_snapshot, MIXTURE, dp_rank=0, dp_world=1), batch_size=None,
                             num_workers=1)))
