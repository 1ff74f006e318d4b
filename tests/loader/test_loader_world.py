"""Topology from the launcher's environment, and the loader inside torch's DataLoader."""

from __future__ import annotations

import socket

import pytest
import torch.distributed as dist
from snapshot_factory import CAPS, MIXTURE
from torch.utils.data import DataLoader

from loader import SnapshotLoader, World
from loader.sequences import Batch
from loader.world import LauncherMismatch


@pytest.mark.parametrize(
    "env,expected",
    [
        (
            {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "1234"},
            World(3, 4, 1, "torchrun", "n1", 1234),
        ),
        (
            {
                "SLURM_PROCID": "5",
                "SLURM_NTASKS": "8",
                "SLURM_LOCALID": "1",
                "SLURM_JOB_ID": "20042",
                "SLURM_STEP_ID": "0",
            },
            World(5, 8, 1, "slurm", "127.0.0.1", 20042),
        ),
        (
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "7"},
            World(0, 1, 0, "slurm-batch", "127.0.0.1", 20007),
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "SLURM_PROCID": "7", "SLURM_NTASKS": "9"},
            World(0, 2, 0, "torchrun"),
        ),
        ({}, World(0, 1)),
    ],
)
def test_world_comes_from_torchrun_then_slurm_then_defaults(env, expected):
    assert World.detect(env) == expected


#: what the job script of `sbatch -n 4` sees (checked on the local cluster: no SLURM_STEP_ID outside srun)
BATCH_STEP = {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "12"}


def test_a_batch_step_of_several_tasks_without_srun_is_refused_not_read_as_rank_0_of_4():
    with pytest.raises(
        LauncherMismatch, match=r"SLURM_PROCID=0, SLURM_NTASKS=4 in the job's batch step.*srun"
    ):
        World.detect(BATCH_STEP)


@pytest.fixture
def process_group_of_one():
    """A real gloo process group of one rank in this process (the state a training script is in)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_an_initialized_process_group_is_the_world_and_a_launcher_that_disagrees_is_named(
    process_group_of_one,
):
    assert World.detect({}) == World(0, 1, 0, "process-group")
    assert World.detect({"RANK": "0", "WORLD_SIZE": "1"}).launcher == "torchrun"
    with pytest.raises(
        LauncherMismatch,
        match=r"process group is rank 0 of 1.*SLURM_PROCID=0, SLURM_NTASKS=4 in "
        r"the job's batch step",
    ):
        World.detect(BATCH_STEP)
    with pytest.raises(LauncherMismatch, match=r"rank 0 of 1.*torchrun's RANK=1, WORLD_SIZE=2"):
        World.detect({"RANK": "1", "WORLD_SIZE": "2"})


def test_a_rank_outside_the_world_is_refused():
    with pytest.raises(ValueError, match="outside"):
        World.detect({"RANK": "4", "WORLD_SIZE": "4"})


def test_the_loader_ranks_default_to_the_environment(id_snapshot, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    loader = SnapshotLoader(id_snapshot, MIXTURE)
    assert (loader.rank, loader.world) == (2, 3)


def test_it_works_inside_a_dataloader_and_refuses_worker_processes(id_snapshot):
    loader = SnapshotLoader(
        id_snapshot, MIXTURE, seq_len=16, batch_size=2, epoch_caps=CAPS, dp_rank=0, dp_world=1
    )
    batches = list(DataLoader(loader, batch_size=None))
    assert batches and all(isinstance(b, Batch) for b in batches)
    assert [b.step for b in batches] == list(range(len(batches)))
    with pytest.raises(RuntimeError, match="num_workers=0"):
        next(
            iter(
                DataLoader(
                    SnapshotLoader(id_snapshot, MIXTURE, dp_rank=0, dp_world=1),
                    batch_size=None,
                    num_workers=1,
                )
            )
        )
