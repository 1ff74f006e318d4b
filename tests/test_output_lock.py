"""Who may take a stage directory's writer lock: pure rules, no MPI (the runner's tests use real ranks)."""

from __future__ import annotations

import json

import pytest

from runtime.output_lock import LockHeld, Writer, acquire, release, writer_alive

ME = Writer("", "node-a", 100, "2026-12-01T10:00:00Z")


def held_by(tmp_path, w: Writer) -> None:
    (tmp_path / ".writer.lock").write_text(json.dumps(w.__dict__))


def test_a_slurm_job_that_ended_holds_nothing_and_a_live_one_everything(tmp_path):
    other = Writer("4242", "node-b", 7, "2026-12-01T09:00:00Z")
    held_by(tmp_path, other)
    with pytest.raises(LockHeld, match=r"job 4242 on host node-b \(pid 7\) since 2026-12-01T09:00:00Z"):
        acquire(tmp_path, ME, print, job_alive=lambda job: True)
    said = []
    acquire(tmp_path, ME, said.append, job_alive=lambda job: False)
    assert (
        said
        and "stale" in said[0]
        and json.loads((tmp_path / ".writer.lock").read_text())["host"] == "node-a"
    )


def test_a_requeued_job_takes_over_its_own_lock(tmp_path):
    before = Writer("77", "node-b", 7, "2026-12-01T09:00:00Z")
    after = Writer("77", "node-c", 9, "2026-12-01T09:30:00Z")
    held_by(tmp_path, before)
    said = []
    acquire(tmp_path, after, said.append, job_alive=lambda job: True)
    assert "its own, before a requeue" in said[0]


def test_liveness_that_cannot_be_told_is_respected(tmp_path):
    elsewhere = Writer("", "node-z", 1, "2026-12-01T09:00:00Z")  # no SLURM, another host
    assert writer_alive(elsewhere, ME)
    slurm_unreachable = Writer("9", "node-z", 1, "2026-12-01T09:00:00Z")
    assert writer_alive(slurm_unreachable, ME, job_alive=lambda job: None)


def test_release_leaves_a_lock_someone_else_took_over(tmp_path):
    acquire(tmp_path, ME, print)
    taker = Writer("", "node-a", 101, "2026-12-01T11:00:00Z")
    held_by(tmp_path, taker)
    release(tmp_path, ME)
    assert (tmp_path / ".writer.lock").exists()
    release(tmp_path, taker)
    assert not (tmp_path / ".writer.lock").exists()
