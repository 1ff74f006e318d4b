"""Model, optimizer and loader state in one ``torch.distributed.checkpoint`` per step, never half-written.

A checkpoint root holds ``step-N/`` directories (DCP files + ``train.json``), ``latest`` (a relative
symlink) and at most one ``.step-N.partial/`` in progress, never read. A save writes the partial
directory on every rank, then rank 0 renames it to ``step-N`` (one rename: all states or none);
:func:`find_checkpoint` resumes from the newest complete ``step-N``, whatever ``latest`` says.
:func:`load_checkpoint` refuses a model without loader state unless told to. See docs/loader.md
("Checkpoint and resume").
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from loader.counter import MixtureCounter
from loader.dataset import ResumeRefused, SnapshotLoader

TRAIN_STATE = "train.json"
DCP_METADATA = ".metadata"  # DCP writes it last: a directory without it was not finished
STEP_PREFIX = "step-"
LATEST = "latest"

log = logging.getLogger(__name__)


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
            set_state_dict(
                self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
            )


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _step_dir(root: Path, step: int) -> Path:
    return root / f"{STEP_PREFIX}{step:08d}"


def _complete_step(path: Path) -> int | None:
    """The step of a complete checkpoint directory (DCP's metadata and train.json both there), else None."""
    try:
        step = int(json.loads((path / TRAIN_STATE).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return step if (path / DCP_METADATA).is_file() else None


def _complete_steps(root: Path) -> list[tuple[int, Path]]:
    """Complete ``step-N`` directories under ``root``, oldest first (a name that does not match its
    train.json is not one of ours and is ignored)."""
    found = []
    for d in root.glob(f"{STEP_PREFIX}*") if root.is_dir() else ():
        step = _complete_step(d)
        if step is not None and d.name == _step_dir(root, step).name:
            found.append((step, d))
    return sorted(found)


def _retire(path: Path) -> None:
    """Delete a checkpoint directory by first renaming it out of the ``step-N`` namespace, so a crash
    mid-delete never leaves a half-deleted directory that looks complete."""
    doomed = path.with_name(f".{path.name}.deleting")
    if doomed.exists():
        shutil.rmtree(doomed)
    os.replace(path, doomed)
    shutil.rmtree(doomed)


def _point_latest(root: Path, target: Path) -> None:
    tmp = root / f".{LATEST}.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.name)
    os.replace(tmp, root / LATEST)


def save_checkpoint(
    path: str | Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    loader: SnapshotLoader,
    *,
    keep: int = 2,
    counter: MixtureCounter | None = None,
) -> Path:
    """Write ``ROOT/step-N`` on every rank (a collective), point ``latest`` at it and keep the newest
    ``keep`` checkpoints at or below ``step``; ``counter``: the run's online mixture counter, saved too.
    Checkpoints above ``step`` are from a timeline this run abandoned (it resumed from an older one) and
    are removed before the new one appears, so resuming never jumps back to them. Returns the new
    checkpoint's directory."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    root = Path(path)
    final = _step_dir(root, step)
    tmp = root / f".{final.name}.partial"
    if _rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
    _barrier()
    state: dict[str, Any] = {"train": TrainState(model, optimizer), "loader": loader}
    if counter is not None:
        state["counter"] = counter
    dcp.save(state, checkpoint_id=str(tmp))
    if _rank() == 0:
        (tmp / TRAIN_STATE).write_text(json.dumps({"step": step, "world": loader.world}))
        for s, d in _complete_steps(root):
            if s >= step:  # a newer one from an abandoned timeline, or this step saved before
                _retire(d)
        os.replace(tmp, final)
        _point_latest(root, final)
        for _, d in _complete_steps(root)[:-keep]:
            _retire(d)
    _barrier()
    return final


def find_checkpoint(path: str | Path) -> Path | None:
    """The checkpoint to resume from under ``path``: the newest complete ``step-N`` (``latest`` is only
    a pointer for people and tools, and may lag one save behind after a crash); ``path`` itself when it
    is one checkpoint (a ``step-N`` directory, or the single-directory layout of earlier versions), or
    that layout's ``.NAME.old`` when a crash left only that. None when there is none. A collective when a
    process group is initialized: rank 0 decides and every rank gets its answer, so no rank resumes from
    another checkpoint than its peers because of a filesystem's stale listing."""
    root = Path(path)
    found: Path | None = None
    if _rank() == 0:
        if _complete_step(root) is not None:
            found = root
        elif steps := _complete_steps(root):
            found = steps[-1][1]
            latest = root / LATEST
            if latest.resolve() != found.resolve():
                log.warning(
                    "%s points at %s, but %s is the newest complete checkpoint: resuming from it",
                    latest,
                    os.readlink(latest) if latest.is_symlink() else "nothing",
                    found.name,
                )
        elif _complete_step(old := root.with_name(f".{root.name}.old")) is not None:
            found = old
            log.warning(
                "only %s is left of checkpoint %s (a crash between the two renames of an earlier "
                "version): resuming from it",
                old,
                root,
            )
    if dist.is_available() and dist.is_initialized():
        box = [str(found) if found is not None else None]
        dist.broadcast_object_list(box, src=0)
        found = Path(box[0]) if box[0] is not None else None
    return found


def checkpoint_step(path: str | Path) -> int:
    return int(json.loads((Path(path) / TRAIN_STATE).read_text())["step"])


def load_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    loader: SnapshotLoader,
    *,
    allow_missing_loader_state: bool = False,
    allow_snapshot_mismatch: bool = False,
    allow_version_mismatch: bool = False,
    allow_recipe_mismatch: bool = False,
    counter: MixtureCounter | None = None,
) -> int:
    """Restore all three in place from ``path`` (a checkpoint root: its newest complete checkpoint, see
    :func:`find_checkpoint`; or one checkpoint directory), and ``counter`` when the checkpoint has its
    counts (one saved without a counter leaves it counting from the resume); the step to continue from."""
    found = find_checkpoint(path)
    if found is None:
        raise FileNotFoundError(f"no complete checkpoint under {path} (partial saves are never read)")
    path = found
    step = checkpoint_step(path)
    keys = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    has_loader = any(k.startswith("loader.") for k in keys)
    has_counter = any(k.startswith("counter.") for k in keys)
    if not has_loader and not allow_missing_loader_state:
        raise ResumeRefused(
            f"checkpoint {path} has model state but no loader state: resuming would repeat or skip data; "
            "pass allow_missing_loader_state=True (--allow-missing-loader-state) to start the loader at "
            f"step {step} as if it had never been interrupted on this world size"
        )
    state: dict[str, Any] = {"train": TrainState(model, optimizer)}
    if has_loader:
        overrides = dict(
            allow_snapshot_mismatch=allow_snapshot_mismatch,
            allow_version_mismatch=allow_version_mismatch,
            allow_recipe_mismatch=allow_recipe_mismatch,
        )
        state["loader"] = _Slot("record", lambda s: loader.load_state_dict(s, **overrides))
    if counter is not None and has_counter:
        state["counter"] = _Slot("counts", counter.load_state_dict)
    elif counter is not None:
        log.info("checkpoint %s has no mixture counts: the counter counts from the resume", path)
    dcp.load(state, checkpoint_id=str(path))
    if not has_loader:
        loader.seek(step)
    return step


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The run's loader records up to ``path``, oldest first: every complete checkpoint of a root; of a
    ``step-N`` directory, it and the complete ones before it beside it; a JSON record alone."""
    path = Path(path)
    if path.is_file():
        return [read_record(path)]
    step = _complete_step(path)
    if step is None:  # a root
        return [read_record(d) for _, d in _complete_steps(path)] or [read_record(path)]
    return [read_record(d) for s, d in _complete_steps(path.parent) if s < step] + [read_record(path)]


def read_record(path: str | Path) -> dict[str, Any]:
    """The loader's global record: from a JSON file (``loader.state_dict()["record"]``, what
    ``examples/train.py --dump-tokens`` writes), or from a checkpoint (a root: its newest complete one;
    or one ``step-N`` directory), read alone, without the model: what ``corpus trace`` resumes from."""
    path = Path(path)
    if path.is_file():
        return json.loads(path.read_text())
    found = find_checkpoint(path)
    if found is None:
        raise FileNotFoundError(
            f"no loader record at {path}: neither a JSON record nor a complete checkpoint"
        )
    state: dict[str, Any] = {"loader": {"record": ""}}
    dcp.load(state, checkpoint_id=str(found))
    return json.loads(state["loader"]["record"])


class _Slot(Stateful):
    """A template of one string entry for DCP to fill, handed to ``load`` (with the caller's arguments bound):
    the loader's and the counter's own ``state_dict`` are collectives, which DCP's load would run only to
    learn the keys, and the loader's takes overrides DCP cannot pass."""

    def __init__(self, key: str, load: Callable[[dict[str, Any]], None]) -> None:
        self.key, self.load = key, load

    def state_dict(self) -> dict[str, Any]:
        return {self.key: ""}  # a template only: DCP fills it from the checkpoint

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load(state)
