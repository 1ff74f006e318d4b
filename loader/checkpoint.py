"""Model, optimizer and loader state in one ``torch.distributed.checkpoint``, written atomically.

Every rank calls :func:`save_checkpoint` at the same step: DCP writes into a temporary directory (the
loader's ``state_dict`` all-gathers its global record on the way), and after a barrier rank 0 renames it
into place, so a checkpoint directory either holds all three states or does not exist.
:func:`load_checkpoint` refuses a checkpoint that has a model but no loader state (resuming the model
on a fresh data stream would silently repeat and skip data) unless told to, in which case the loader
jumps to the checkpoint's step by arithmetic.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from loader.dataset import ResumeRefused, SnapshotLoader

TRAIN_STATE = "train.json"


class TrainState(Stateful):
    """Model and optimizer for DCP, with fully-qualified names (works for plain, DDP and FSDP modules)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict[str, Any]:
        if self.optimizer is None:
            return {"model": self.model.state_dict()}
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.optimizer is None:
            self.model.load_state_dict(state["model"])
        else:
            set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                           optim_state_dict=state["optim"])


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def save_checkpoint(path: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                    loader: SnapshotLoader) -> Path:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.partial")
    if _rank() == 0 and tmp.exists():
        shutil.rmtree(tmp)
    _barrier()
    dcp.save({"train": TrainState(model, optimizer), "loader": loader}, checkpoint_id=str(tmp))
    if _rank() == 0:
        (tmp / TRAIN_STATE).write_text(json.dumps({"step": step, "world": loader.world}))
        old = path.with_name(f".{path.name}.old")
        if path.exists():  # move the previous checkpoint aside first: one complete checkpoint exists at all times
            if old.exists():
                shutil.rmtree(old)
            os.replace(path, old)
        os.replace(tmp, path)
        if old.exists():
            shutil.rmtree(old)
    _barrier()
    return path


def checkpoint_step(path: str | Path) -> int:
    return int(json.loads((Path(path) / TRAIN_STATE).read_text())["step"])


def load_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                    loader: SnapshotLoader, *, allow_missing_loader_state: bool = False,
                    allow_snapshot_mismatch: bool = False, allow_version_mismatch: bool = False) -> int:
    """Restore all three in place; the step to continue from."""
    path = Path(path)
    step = checkpoint_step(path)
    keys = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    has_loader = any(k.startswith("loader.") for k in keys)
    if not has_loader and not allow_missing_loader_state:
        raise ResumeRefused(
            f"checkpoint {path} has model state but no loader state: resuming would repeat or skip data; "
            "pass allow_missing_loader_state=True (--allow-missing-loader-state) to start the loader at "
            f"step {step} as if it had never been interrupted on this world size")
    state: dict[str, Any] = {"train": TrainState(model, optimizer)}
    if has_loader:
        state["loader"] = _LoaderSlot(loader, allow_snapshot_mismatch, allow_version_mismatch)
    dcp.load(state, checkpoint_id=str(path))
    if not has_loader:
        loader.seek(step)
    return step


class _LoaderSlot(Stateful):
    """Hands the loaded record to the loader with the caller's overrides (DCP passes no arguments)."""

    def __init__(self, loader: SnapshotLoader, allow_snapshot_mismatch: bool, allow_version_mismatch: bool) -> None:
        self.loader, self.overrides = loader, dict(allow_snapshot_mismatch=allow_snapshot_mismatch,
                                                   allow_version_mismatch=allow_version_mismatch)

    def state_dict(self) -> dict[str, Any]:
        return {"record": ""}  # a template only: DCP fills it from the checkpoint

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state, **self.overrides)
