"""A failed stage's error is said once: by rank 0 where every rank meets it, else by the rank that failed
first (naming itself), the other ranks silent, no MPI abort banner; a user's error exits 2, a bug 1.
Ctrl-C on ``corpus build`` is one line. Real ``mpiexec`` with 2 ranks (runtime.job_failure)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE, run_corpus, run_mpi
from tests.stages.chain import run_stage

TOY = "tests/support/toy_stage.py"
#: what a job's failure must not print besides its error: MPICH's abort banner, Hydra's own words
NOISE = ("Abort(", "[mpiexec@", "BAD TERMINATION", "KeyboardInterrupt")


def quiet(proc: subprocess.CompletedProcess) -> str:
    out = proc.stdout + proc.stderr
    assert not [n for n in NOISE if n in out], out[-3000:]
    return out


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"url": f"https://x.example/{path.stem}/{i}", "text": t} for i, t in enumerate(texts)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def bad_config(tmp_path) -> Path:
    config = tmp_path / "bad.toml"
    config.write_text("[ingest]\nno_such_key = 1\n")
    return config


MESSAGE = "[ingest] unknown config keys: no_such_key"


def test_a_config_error_every_rank_meets_is_said_once_by_the_job(tmp_path, bad_config):
    proc = run_stage("ingest", 2, [SAMPLE / "edge"], tmp_path / "out", bad_config, check=False)
    out = quiet(proc)
    assert proc.returncode == 2 and out.count(MESSAGE) == 1, out[-3000:]
    [line] = [ln for ln in out.splitlines() if MESSAGE in ln]
    assert line.startswith(f"error: ingest: {MESSAGE}") and "Traceback" not in out


def test_corpus_stage_says_a_stage_s_config_error_once(tmp_path, bad_config):
    args = ("stage", "ingest", "--input", str(SAMPLE / "edge"), "--out", str(tmp_path / "out"))
    proc = run_corpus(*args, "--ranks", "2", "--config", str(bad_config), check=False)
    out = quiet(proc)
    assert proc.returncode == 2 and out.count(MESSAGE) == 1, out[-3000:]
    assert proc.stderr.splitlines()[-1].startswith("corpus stage: error: stage ingest failed")


def test_a_bad_input_every_rank_meets_in_a_build_is_said_once_and_exits_2(tmp_path):
    """Each rank's input holds a document larger than the memory budget allows: both ranks fail on it."""
    inputs = [
        write_jsonl(tmp_path / "in" / f"part{k}.jsonl", [f"small document {k} " * 30, "ham " * (3 << 18)])
        for k in range(2)
    ]
    config = tmp_path / "c.toml"
    config.write_text("memory_budget_mb = 8\n")
    args = ("build", "--input", *map(str, inputs), "--out", str(tmp_path / "b"), "--ranks", "2")
    proc = run_corpus(*args, "--config", str(config), check=False)
    out = quiet(proc)
    assert proc.returncode == 2 and "Traceback" not in out
    errors = [ln for ln in out.splitlines() if "more than memory_budget_mb = 8 allows" in ln]
    assert len(errors) == 1, out[-3000:]
    assert errors[0].startswith(("error: ingest r0/2: ", "error: ingest r1/2: ")), errors


def test_a_bug_on_one_rank_is_its_traceback_once_and_one_line_naming_the_rank(tmp_path):
    inputs = [
        write_jsonl(tmp_path / "in" / f"p{k}.jsonl", [f"doc {k} {i}" for i in range(3)]) for k in range(3)
    ]
    write_jsonl(tmp_path / "in" / "p1.jsonl", ["doc 1", "boom here"])
    config = tmp_path / "toy.toml"
    config.write_text('[toy]\nfail_on = "boom"\n')
    argv = [TOY, "--in", *map(str, inputs), "--out", str(tmp_path / "out"), "--config", str(config)]
    proc = run_mpi(2, *argv, check=False, timeout=120)
    out = quiet(proc)
    assert proc.returncode == 1 and out.count("Traceback (most recent call last)") == 1, out[-3000:]
    [line] = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert line.startswith(("error: toy r0/2: RuntimeError: toy:", "error: toy r1/2: RuntimeError: toy:"))


def test_ctrl_c_on_corpus_build_is_one_line_and_leaves_no_rank_running(tmp_path):
    out = tmp_path / "b"
    argv = [sys.executable, "-m", "cli", "build", "--input", str(SAMPLE / "web"), "--out", str(out)]
    proc = subprocess.Popen(
        [*argv, "--ranks", "2"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, which a terminal's Ctrl-C reaches whole
    )
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "stage 2/9 extract on" in line:
            os.killpg(proc.pid, signal.SIGINT)
            break
    rest = proc.stderr.read()  # a line or two the ranks said before it, then the command's one line
    assert proc.wait(timeout=60) == 130, "".join(seen) + rest
    assert rest.splitlines()[-1] == "corpus build: interrupted; rerun the same command to resume", rest
    assert rest.count("interrupted") == 1 and "Traceback" not in rest
    assert not [n for n in NOISE if n in rest], rest
    running = [p for p in Path("/proc").iterdir() if p.name.isdigit() and str(out) in cmdline(p)]
    assert not running, [cmdline(p) for p in running]


def cmdline(proc_dir: Path) -> str:
    try:
        return (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
