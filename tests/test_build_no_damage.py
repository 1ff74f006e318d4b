"""A build is never damaged by another run (issue 30): a rerun of a complete build writes nothing, a
second writer of the build is refused while the first holds its lock, ``corpus version`` never writes
into a build, and the latest base is the last committed build, whatever the files' mtimes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corpus.model.layout import COMMITTED, WRITER_LOCK
from corpus.model.stages import PIPELINE
from runtime.build import latest_build
from runtime.build_commit import next_sequence
from runtime.output_lock import holding
from tests.conftest import ROOT, SAMPLE, run_corpus

pytestmark = pytest.mark.slow

INPUTS = [str(p) for p in sorted(SAMPLE.iterdir()) if p.is_dir()]


def corpus_build(out: Path, check: bool = True) -> subprocess.CompletedProcess:
    return run_corpus("build", "--input", *INPUTS, "--out", str(out), "--ranks", "2", check=check)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("no-damage") / "b"
    proc = corpus_build(out)
    return out, proc.stdout.strip().splitlines()[-1]


def state(out: Path) -> dict[str, tuple[int, int, str]]:
    """Every file of the build but its stages and indexes: inode, mtime and sha256."""
    found = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out)
        if rel.parts[0] in ("stages", "dedup_index") or not p.is_file() or p.is_symlink():
            continue
        st = p.stat()
        found[str(rel)] = (st.st_ino, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return found


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_rerun_of_a_complete_build_rewrites_nothing_and_sweeps_what_a_killed_run_left(built):
    out, last = built
    before = state(out)
    assert {"candidates/manifest.json", "snapshot/manifest.json", COMMITTED} <= set(before)
    gone = dead_pid()
    left = [out / f".candidates.tmp.{gone}.0a1b", out / f".build-config.json.tmp.{gone}"]
    left[0].mkdir()
    (left[0] / "manifest.json").write_text("{}")
    left[1].write_text("{}")
    again = corpus_build(out)
    assert again.stdout.strip().splitlines()[-1] == last
    assert "complete already (commit 1): nothing written" in again.stderr
    assert state(out) == before  # same bytes, same inodes, mtimes untouched
    assert not any(p.exists() for p in left)
    assert not (out / WRITER_LOCK).exists()


def test_a_second_build_or_finish_of_a_locked_build_is_refused_in_one_line(built):
    out, _ = built
    before = state(out)
    with holding(out, print) as me:
        second = corpus_build(out, check=False)
        finalize = subprocess.run(
            [sys.executable, "-m", "orchestration.buildsteps", "finalize", "--out", str(out)]
            + ["--stages", ",".join(PIPELINE)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
    for proc in (second, finalize):
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.strip().splitlines()[-1:]
        assert f"is being written by a process on host {me.host} (pid {os.getpid()})" in line
    assert len(second.stderr.strip().splitlines()) == 1
    assert state(out) == before


def test_corpus_version_refuses_an_out_inside_a_build_or_not_empty(built, tmp_path):
    out, _ = built
    before = state(out)
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    for bad, why in [
        (out / "candidates", "is not empty"),
        (out / "snapshot", "is inside build"),  # even holding this very version
        (out / "stages" / "v", "is inside build"),
        (out / "v", "is inside build"),
        (full, "is not empty"),
    ]:
        proc = run_corpus("version", str(out), "--select-inline", "[policy]", "--out", str(bad), check=False)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith("corpus version: error: --out") and why in proc.stderr, proc.stderr
    assert state(out) == before and not (out / "v").exists() and not (out / "stages" / "v").exists()
    assert (full / "notes.txt").read_text() == "mine"
    ok = run_corpus("version", str(out), "--select-inline", "[policy]", "--out", str(out / "versions" / "v"))
    assert json.loads((out / "versions" / "v" / "manifest.json").read_text())["snapshot_id"] in ok.stdout
    assert [p.name for p in (out / "versions").iterdir()] == ["v"]  # written beside, renamed in
    shutil.rmtree(out / "versions")


def test_the_latest_base_is_the_greatest_committed_sequence_not_the_newest_file(built, tmp_path):
    out, _ = built
    root = tmp_path / "builds"
    for name in ("a", "b"):  # complete builds as --base sees them (a base's stages are not read)
        shutil.copytree(out, root / name, symlinks=True, ignore=shutil.ignore_patterns("stages"))
    sequence = {"a": 2, "b": 1}
    for name, n in sequence.items():
        record = json.loads((root / name / COMMITTED).read_text())
        (root / name / COMMITTED).write_text(json.dumps({**record, "sequence": n}))
    os.utime(root / "a" / "candidates" / "manifest.json", ns=(1, 1))  # the oldest file: still the latest
    assert latest_build(root) == root / "a"
    assert latest_build(root, out=root / "a") == root / "b"
    assert next_sequence(root / "c") == 3
    (root / "b" / COMMITTED).unlink()  # a build finished before builds kept a record comes first
    assert latest_build(root, out=root / "a") == root / "b" and latest_build(root) == root / "a"
