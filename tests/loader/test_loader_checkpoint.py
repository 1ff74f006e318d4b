"""Checkpoints are step directories with a `latest` pointer; whatever a crash leaves on disk, resuming
picks the newest complete checkpoint, never step 0 while one exists, never a partial one."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
from pathlib import Path

import pytest
import torch
from snapshot_factory import CAPS, TRAIN_SETTINGS, flags
from test_loader_state import digest, make

from loader.checkpoint import find_checkpoint, load_checkpoint, read_records, save_checkpoint

ROOT = Path(__file__).resolve().parents[2]


def walk_and_save(snapshot: Path, ckpt: Path, steps: list[int], keep: int = 2) -> dict[int, str]:
    """Save at each of ``steps``; the digest of the batch that follows each save."""
    model, loader = torch.nn.Linear(3, 3), make(snapshot, epoch_caps=CAPS)
    after, done = {}, 0
    for s in steps:
        for _ in range(s - done):
            loader.next_batch()
        done = s
        save_checkpoint(ckpt, s, model, None, loader, keep=keep)
        probe = make(snapshot, epoch_caps=CAPS)
        probe.seek(s)
        after[s] = digest(probe.next_batch())
    return after


def resume(snapshot: Path, ckpt: Path) -> tuple[int, str]:
    loader = make(snapshot, epoch_caps=CAPS)
    step = load_checkpoint(ckpt, torch.nn.Linear(3, 3), None, loader)
    return step, digest(loader.next_batch())


def test_saves_are_step_directories_behind_an_atomic_latest_pointer(id_snapshot, tmp_path):
    ckpt = tmp_path / "ckpt"
    after = walk_and_save(id_snapshot, ckpt, [3, 6, 9], keep=2)
    assert sorted(p.name for p in ckpt.iterdir()) == ["latest", "step-00000006", "step-00000009"]
    assert os.readlink(ckpt / "latest") == "step-00000009"
    assert resume(id_snapshot, ckpt) == (9, after[9])
    assert resume(id_snapshot, ckpt / "step-00000006") == (6, after[6])  # one checkpoint, named directly


def test_the_records_of_a_run_are_its_complete_checkpoints_oldest_first(id_snapshot, tmp_path):
    ckpt = tmp_path / "ckpt"
    walk_and_save(id_snapshot, ckpt, [3, 6, 9], keep=3)
    (ckpt / ".step-00000012.partial").mkdir()  # a save cut short is no record
    assert [r["step"] for r in read_records(ckpt)] == [3, 6, 9]
    assert [r["step"] for r in read_records(ckpt / "step-00000006")] == [3, 6]  # up to the one named
    (tmp_path / "one.json").write_text(json.dumps(read_records(ckpt)[0]))
    assert [r["step"] for r in read_records(tmp_path / "one.json")] == [3]


def test_a_crash_between_the_rename_and_the_pointer_resumes_from_the_newest_complete_checkpoint(
    id_snapshot, tmp_path
):
    """On disk after the crash: step-9 renamed into place, `latest` still at step-6, and the next save's
    half-written `.step-12.partial` -- resuming continues at 9 (the newest complete), not 6, not 12, not 0."""
    ckpt = tmp_path / "ckpt"
    after = walk_and_save(id_snapshot, ckpt, [6, 9])
    (ckpt / "latest").unlink()
    (ckpt / "latest").symlink_to("step-00000006")
    partial = ckpt / ".step-00000012.partial"
    shutil.copytree(ckpt / "step-00000009", partial)
    (partial / "train.json").unlink()
    assert find_checkpoint(ckpt) == ckpt / "step-00000009"
    assert resume(id_snapshot, ckpt) == (9, after[9])


def test_a_crash_mid_delete_or_mid_write_leaves_nothing_that_looks_complete(id_snapshot, tmp_path):
    ckpt = tmp_path / "ckpt"
    after = walk_and_save(id_snapshot, ckpt, [4, 8])
    # a retired checkpoint half deleted, a newer save with train.json but without DCP's metadata
    os.replace(ckpt / "step-00000004", ckpt / ".step-00000004.deleting")
    shutil.copytree(ckpt / "step-00000008", ckpt / "step-00000010")
    (ckpt / "step-00000010" / ".metadata").unlink()
    (ckpt / "step-00000010" / "train.json").write_text(json.dumps({"step": 10, "world": 1}))
    assert resume(id_snapshot, ckpt) == (8, after[8])


def test_what_the_earlier_two_rename_save_left_after_a_crash_is_resumed_not_step_0(id_snapshot, tmp_path):
    """The single-directory layout of earlier versions: only `.ckpt.old` survived the crash."""
    ckpt = tmp_path / "ckpt"
    after = walk_and_save(id_snapshot, tmp_path / "new", [5])
    shutil.copytree(tmp_path / "new" / "step-00000005", tmp_path / ".ckpt.old")
    assert find_checkpoint(ckpt) == tmp_path / ".ckpt.old"
    assert resume(id_snapshot, ckpt) == (5, after[5])
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        load_checkpoint(tmp_path / "elsewhere", torch.nn.Linear(3, 3), None, make(id_snapshot))


def test_saving_after_resuming_an_older_checkpoint_drops_the_abandoned_newer_ones(id_snapshot, tmp_path):
    ckpt = tmp_path / "ckpt"
    walk_and_save(id_snapshot, ckpt, [4, 8, 12], keep=3)
    model, loader = torch.nn.Linear(3, 3), make(id_snapshot, epoch_caps=CAPS)
    assert load_checkpoint(ckpt / "step-00000004", model, None, loader) == 4
    loader.next_batch()
    save_checkpoint(ckpt, 5, model, None, loader, keep=3)
    assert sorted(p.name for p in ckpt.iterdir() if p.name.startswith("step-")) == [
        "step-00000004",
        "step-00000005",
    ]
    assert find_checkpoint(ckpt) == ckpt / "step-00000005"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_train_auto_resume_continues_from_the_newest_complete_checkpoint_after_a_crash(
    id_snapshot, tmp_path, monkeypatch, capsys
):
    """examples/train.py --auto-resume (its main, in this process, a gloo world of 1): saves at 4 and 8,
    then the state of a crash after step-8 was renamed but before `latest` moved, plus the next save's
    partial -> the next run starts at step 8."""
    spec = importlib.util.spec_from_file_location("example_train", ROOT / "examples" / "train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    for k in [k for k in os.environ if k.startswith("SLURM_") or k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")]:
        monkeypatch.delenv(k)
    ckpt = tmp_path / "ckpt"
    args = flags(snapshot=id_snapshot, ckpt=ckpt, **TRAIN_SETTINGS, auto_resume=True)
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    assert train.main([*args, "--steps", "8", "--save-every", "4"]) == 0
    assert "starting at step 0" in capsys.readouterr().out
    (ckpt / "latest").unlink()
    (ckpt / "latest").symlink_to("step-00000004")
    shutil.copytree(ckpt / "step-00000008", ckpt / ".step-00000012.partial")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    assert train.main([*args, "--steps", "10", "--save-every", "100"]) == 0
    assert "starting at step 8, loader step 8" in capsys.readouterr().out
