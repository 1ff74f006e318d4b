"""Where this process sits among the data-parallel ranks: detected once, from the launcher's environment.

This is the only module of the loader that reads environment variables (mosaicml/streaming's
``world.py`` does the same): torchrun sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``; ``srun`` sets
``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``. Outside both, the process is rank 0 of 1.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class World:
    rank: int
    world_size: int
    local_rank: int = 0
    launcher: str = "none"  # "torchrun", "slurm" or "none"
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
    def detect(cls, env: Mapping[str, str] | None = None) -> World:
        env = os.environ if env is None else env
        addr = env.get("MASTER_ADDR", "127.0.0.1")
        if "RANK" in env and "WORLD_SIZE" in env:
            return cls(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)), "torchrun",
                       addr, int(env.get("MASTER_PORT", 29500)))
        if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
            # A port derived from the job id keeps two jobs on one node from colliding.
            default_port = 20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000
            return cls(int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0)),
                       "slurm", addr, int(env.get("MASTER_PORT", default_port)))
        return cls(0, 1)
