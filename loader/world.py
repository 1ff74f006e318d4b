"""Where this process sits among the data-parallel ranks: the initialized process group when there is one,
else the launcher's environment (torchrun's ``RANK``/``WORLD_SIZE``, srun's ``SLURM_*``), else rank 0 of 1.

The only module of the loader that reads environment variables. An ``sbatch`` batch step (SLURM
variables without ``SLURM_STEP_ID``) is an error unless a process group says how many ranks there are;
a launcher environment that disagrees with the process group is an error naming both. See docs/loader.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch.distributed as dist


class LauncherMismatch(RuntimeError):
    """The launcher's environment and the process group (or the job step) disagree about the ranks."""


@dataclass(frozen=True)
class World:
    rank: int
    world_size: int
    local_rank: int = 0
    launcher: str = "none"  # "torchrun", "slurm", "slurm-batch" (see the module doc) or "none"
    master_addr: str = "127.0.0.1"
    master_port: int = 29500

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is outside a world of {self.world_size}")

    @property
    def init_method(self) -> str:
        """The ``tcp://`` rendezvous for ``torch.distributed.init_process_group``."""
        return f"tcp://{self.master_addr}:{self.master_port}"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> World:
        """The world the launcher's environment describes, as it describes it (no checks against a
        process group; a batch step's allocation comes back as launcher ``slurm-batch``)."""
        env = os.environ if env is None else env
        addr = env.get("MASTER_ADDR", "127.0.0.1")
        if "RANK" in env and "WORLD_SIZE" in env:
            return cls(
                int(env["RANK"]),
                int(env["WORLD_SIZE"]),
                int(env.get("LOCAL_RANK", 0)),
                "torchrun",
                addr,
                int(env.get("MASTER_PORT", 29500)),
            )
        if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
            # A port derived from the job id keeps two jobs on one node from colliding.
            default_port = 20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000
            launcher = "slurm" if "SLURM_STEP_ID" in env else "slurm-batch"
            return cls(
                int(env["SLURM_PROCID"]),
                int(env["SLURM_NTASKS"]),
                int(env.get("SLURM_LOCALID", 0)),
                launcher,
                addr,
                int(env.get("MASTER_PORT", default_port)),
            )
        return cls(0, 1)

    def describe(self) -> str:
        if self.launcher == "torchrun":
            return f"torchrun's RANK={self.rank}, WORLD_SIZE={self.world_size}"
        if self.launcher.startswith("slurm"):
            where = "an srun task" if self.launcher == "slurm" else "the job's batch step (no srun)"
            return f"SLURM_PROCID={self.rank}, SLURM_NTASKS={self.world_size} in {where}"
        return f"rank {self.rank} of {self.world_size}"

    @classmethod
    def detect(cls, env: Mapping[str, str] | None = None) -> World:
        """This process's world: the process group's ranks when one is initialized (checked against the
        launcher's environment), else the launcher's environment (refused in a batch step of N > 1 tasks)."""
        launched = cls.from_env(env)
        if dist.is_available() and dist.is_initialized():
            rank, size = dist.get_rank(), dist.get_world_size()
            # a batch step's SLURM_PROCID is 0 in every process a launcher like mpiexec starts from it:
            # only its task count can be compared
            agrees = size == launched.world_size and (
                rank == launched.rank or launched.launcher == "slurm-batch"
            )
            if launched.launcher != "none" and not agrees:
                raise LauncherMismatch(
                    f"the torch.distributed process group is rank {rank} of {size}, but the "
                    f"launcher's environment says {launched.describe()}: fix the launch "
                    "(one process per task, started by srun or torchrun)"
                )
            return replace(
                launched,
                rank=rank,
                world_size=size,
                launcher="process-group"
                if launched.launcher in ("none", "slurm-batch")
                else launched.launcher,
            )
        if launched.launcher == "slurm-batch" and launched.world_size > 1:
            raise LauncherMismatch(
                f"{launched.describe()}: this one process would read 1/{launched.world_size} of "
                "the data; start one process per task with srun (sbatch/train.sbatch does), or "
                "initialize the torch.distributed process group first"
            )
        return launched


def gather_states(local: Mapping[str, Any], world: int, group: Any = None) -> list[Any]:
    """Every data-parallel rank's local state, gathered over ``group`` (None: the default world group).

    The group must hold exactly the loader's ``world`` ranks: gathering over the whole world when
    tensor or pipeline parallel ranks share a data-parallel rank would count its stream several times.
    """
    if world == 1 and group is None:
        return [local]
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("state_dict with dp_world > 1 needs torch.distributed initialized (gloo is fine)")
    size = dist.get_world_size(group)
    if size != world:
        raise RuntimeError(
            f"the data-parallel process group has {size} ranks, the loader {world}: pass the "
            "loader's dp_group (ranks that read different data), not the whole world"
        )
    gathered: list[Any] = [None] * size
    dist.all_gather_object(gathered, local, group=group)
    return gathered
