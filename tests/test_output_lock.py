"""The writer lock: who may take it (pure rules), and real races between processes for it.

The races start N processes at one barrier, a few hundred times, and count the winners of each race:
on a fresh directory, on a stale lock of a dead process, and between processes of one SLURM job.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corpus.model.layout import WRITER_LOCK
from runtime.output_lock import (
    LockHeld,
    Writer,
    acquire,
    holding,
    release,
    sweep_temporaries,
    writer_alive,
)

ME = Writer("", "node-a", 100, "2026-12-01T10:00:00Z", "a0")
RACERS = 4
RACES = 300


def held_by(tmp_path, w: Writer) -> None:
    (tmp_path / WRITER_LOCK).write_bytes(w.body())


def dead_pid() -> int:
    """The pid of a process of this host that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_slurm_job_that_ended_holds_nothing_and_a_live_one_everything(tmp_path):
    other = Writer("4242", "node-b", 7, "2026-12-01T09:00:00Z", "b7")
    held_by(tmp_path, other)
    with pytest.raises(LockHeld, match=r"job 4242 on host node-b \(pid 7\) since 2026-12-01T09:00:00Z"):
        acquire(tmp_path, ME, print, job_alive=lambda job: True)
    said = []
    acquire(tmp_path, ME, said.append, job_alive=lambda job: False)
    assert (
        said and "stale" in said[0] and json.loads((tmp_path / WRITER_LOCK).read_text())["host"] == "node-a"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [WRITER_LOCK]  # no body, no takeover right left


def test_a_requeued_job_takes_over_its_own_lock_and_a_second_run_in_the_allocation_does_not(tmp_path):
    before = Writer("77", "node-b", 7, "2026-12-01T09:00:00Z", "b7", restart=0)
    after = Writer("77", "node-c", 9, "2026-12-01T09:30:00Z", "c9", restart=1)
    held_by(tmp_path, before)
    said = []
    acquire(tmp_path, after, said.append, job_alive=lambda job: True)
    assert "stale" in said[0]
    beside = Writer("77", "node-d", 10, "2026-12-01T09:31:00Z", "d10", restart=1)
    assert writer_alive(after, beside)  # another host of the same run: cannot be told, respected
    with pytest.raises(LockHeld, match="job 77 on host node-c"):
        acquire(tmp_path, beside, print, job_alive=lambda job: True)


def test_liveness_that_cannot_be_told_is_respected(tmp_path):
    elsewhere = Writer("", "node-z", 1, "2026-12-01T09:00:00Z")  # no SLURM, another host
    assert writer_alive(elsewhere, ME)
    slurm_unreachable = Writer("9", "node-z", 1, "2026-12-01T09:00:00Z")
    assert writer_alive(slurm_unreachable, ME, job_alive=lambda job: None)


def test_release_leaves_a_lock_someone_else_took_over(tmp_path):
    acquire(tmp_path, ME, print)
    taker = Writer("", "node-a", 101, "2026-12-01T11:00:00Z", "a101")
    held_by(tmp_path, taker)
    release(tmp_path, ME)
    assert (tmp_path / WRITER_LOCK).exists()
    release(tmp_path, taker)
    assert not (tmp_path / WRITER_LOCK).exists()


def test_a_lock_held_by_this_process_is_taken_again_inside_and_refused_to_another_writer(tmp_path):
    with holding(tmp_path, print) as me:
        with holding(tmp_path, print) as again:
            assert again == me
        assert json.loads((tmp_path / WRITER_LOCK).read_text())["token"] == me.token
        with pytest.raises(LockHeld, match=f"pid {os.getpid()}"):
            acquire(tmp_path, Writer.me(), print)
    assert not (tmp_path / WRITER_LOCK).exists()


def test_a_takeover_right_left_by_a_killed_taker_is_removed_and_the_stale_lock_taken(tmp_path):
    gone = dead_pid()
    stale = Writer("", ME.host, gone, "2026-12-01T09:00:00Z", "s1")
    killed_taker = Writer("", ME.host, gone, "2026-12-01T09:00:01Z", "k1")
    held_by(tmp_path, stale)
    (tmp_path / f"{WRITER_LOCK}.break.s1").write_bytes(killed_taker.body())
    me = Writer("", ME.host, os.getpid(), "2026-12-01T10:00:00Z", "me")
    acquire(tmp_path, me, print)
    assert (tmp_path / WRITER_LOCK).read_bytes() == me.body()
    assert sorted(p.name for p in tmp_path.iterdir()) == [WRITER_LOCK]


def test_taking_the_lock_sweeps_the_temporaries_of_dead_writers_only(tmp_path):
    gone, live = dead_pid(), os.getpid()
    left = [f".s.jsonl.zst.tmp.{gone}", f"stats/.s.json.tmp.{gone}", f"index_records/.p.exact.rec.{gone}.tmp"]
    kept = [f".s.jsonl.zst.tmp.{live}", "s.jsonl.zst", ".hidden", f"stages/.x.tmp.{gone}"]
    for name in left + kept:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / f".candidates.tmp.{gone}.ab12").mkdir()
    (tmp_path / f".candidates.tmp.{gone}.ab12" / "manifest.json").write_bytes(b"{}")
    me = Writer.me()
    acquire(tmp_path, me, print, sweep_skip=("stages",))
    for name in [*left, f".candidates.tmp.{gone}.ab12"]:
        assert not (tmp_path / name).exists(), name
    for name in kept:
        assert (tmp_path / name).exists(), name
    assert sweep_temporaries(tmp_path, me, skip=("stages",)) == []


# --- real races between processes --------------------------------------------------------------


def _racer(dirs: list[str], barrier, results, job_id: str) -> None:
    if job_id:
        os.environ["SLURM_JOB_ID"] = job_id
    for k, d in enumerate(dirs):
        barrier.wait()
        me = Writer.me()
        try:
            acquire(Path(d), me, lambda _: None, job_alive=lambda job: True)
            results.put((k, os.getpid(), me.token))
        except LockHeld:
            results.put((k, os.getpid(), None))
    barrier.wait()  # a winner that exited would leave a stale lock a slower racer may rightly take over


def race(dirs: list[Path], job_id: str = "") -> list[list[str]]:
    """``RACERS`` processes take the lock of each of ``dirs`` in turn, all starting at one barrier;
    returns the winners' tokens of each race (and checks each winner's body is the lock left)."""
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(RACERS), ctx.Queue()
    procs = [
        ctx.Process(target=_racer, args=([str(d) for d in dirs], barrier, results, job_id))
        for _ in range(RACERS)
    ]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in range(RACERS * len(dirs))]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    winners: list[list[str]] = [[] for _ in dirs]
    for k, _, token in got:
        if token is not None:
            winners[k].append(token)
    for d, won in zip(dirs, winners, strict=True):
        if len(won) == 1:
            assert json.loads((d / WRITER_LOCK).read_text())["token"] == won[0]
    return winners


def fresh_dirs(tmp_path: Path, n: int) -> list[Path]:
    dirs = [tmp_path / f"r{k:03d}" for k in range(n)]
    for d in dirs:
        d.mkdir()
    return dirs


def test_of_processes_racing_for_a_fresh_directory_exactly_one_wins_every_time(tmp_path):
    winners = race(fresh_dirs(tmp_path, RACES))
    assert [len(w) for w in winners] == [1] * RACES


def test_of_processes_racing_for_a_stale_lock_of_a_dead_pid_exactly_one_takes_it_over(tmp_path):
    dirs = fresh_dirs(tmp_path, RACES)
    gone = dead_pid()
    host = Writer.me().host
    for k, d in enumerate(dirs):
        held_by(d, Writer("", host, gone, "2026-12-01T09:00:00Z", f"stale{k}"))
    winners = race(dirs)
    assert [len(w) for w in winners] == [1] * RACES
    left = [p.name for d in dirs for p in d.iterdir() if p.name != WRITER_LOCK]
    assert left == []  # no body, takeover right or stale lock left beside


def test_two_runs_inside_one_slurm_allocation_never_both_hold_the_lock(tmp_path):
    winners = race(fresh_dirs(tmp_path, RACES // 3), job_id="4242")
    assert [len(w) for w in winners] == [1] * (RACES // 3)
