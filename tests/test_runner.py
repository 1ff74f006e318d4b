"""The stage runner's promises, checked on real MPI ranks with a small real stage."""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from corpus.formats.docshard import iter_docs, iter_records
from corpus.model.stages import PIPELINE
from runtime.runner import Stage, is_value_config
from tests.conftest import ROOT, mpiexec, run_mpi

TOY = "tests/support/toy_stage.py"


def make_inputs(d: Path, files: int = 6, docs: int = 20) -> list[Path]:
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(files):
        lines = []
        for i in range(docs):
            if i % 7 == 3:
                lines.append('{"broken json')
            else:
                word = "spam" if i % 5 == 1 else "ham"
                lines.append(
                    json.dumps({"url": f"https://x.example/{f}/{i}", "text": f"doc {f}-{i} about {word}"})
                )
        p = d / f"part-{f}.jsonl"
        p.write_text("\n".join(lines) + "\n")
        paths.append(p)
    return paths


def write_config(path: Path, **toy) -> Path:
    body = "[toy]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in toy.items())
    path.write_text(body)
    return path


def run_toy(ranks: int, inputs: list[Path], out: Path, config: Path | None = None, **kw):
    args = [TOY, "--in", *map(str, inputs), "--out", str(out)]
    if config:
        args += ["--config", str(config)]
    return run_mpi(ranks, *args, **kw)


def start_toy(ranks: int, inputs: list[Path], out: Path, config: Path) -> subprocess.Popen:
    """The toy stage running in the background (a test then kills it, or runs a second one beside it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [
        mpiexec(),
        "-n",
        str(ranks),
        sys.executable,
        TOY,
        "--in",
        *map(str, inputs),
        "--out",
        str(out),
        "--config",
        str(config),
    ]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def run_clean_then_start_slow(
    tmp_path: Path, ranks: int, files: int, sleep_per_doc: float, out: Path
) -> tuple[list[Path], Path, Path, subprocess.Popen]:
    """``files`` input files of 20 documents run to the end into tmp_path/clean on ``ranks`` ranks; then the
    same started into ``out``, slowed down by ``sleep_per_doc`` s a document: (inputs, clean, its config,
    the running job)."""
    inputs = make_inputs(tmp_path / "in", files=files, docs=20)
    clean = tmp_path / "clean"
    run_toy(ranks, inputs, clean)
    cfg = write_config(tmp_path / "slow.toml", sleep_per_doc=sleep_per_doc)
    return inputs, clean, cfg, start_toy(ranks, inputs, out, cfg)


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def output_digests(out: Path) -> dict:
    m = manifest(out)
    return {"outputs": m["outputs"], "side_outputs": m["side_outputs"]}


def test_same_outputs_on_1_2_and_3_ranks(tmp_path):
    inputs = make_inputs(tmp_path / "in")
    results = {}
    for ranks in (1, 2, 3):
        out = tmp_path / f"out{ranks}"
        run_toy(ranks, inputs, out)
        results[ranks] = (output_digests(out), manifest(out)["run_info"]["ranks"])
    assert results[1][0] == results[2][0] == results[3][0]
    assert [results[r][1] for r in (1, 2, 3)] == [1, 2, 3]


def test_counts_reconcile_and_nothing_is_lost(tmp_path):
    inputs = make_inputs(tmp_path / "in", files=3, docs=20)
    out = tmp_path / "out"
    run_toy(2, inputs, out)
    m = manifest(out)
    t = m["totals"]
    assert t["in"] == 60
    assert t["in"] == t["out"] + sum(t["filtered"].values()) + sum(t["quarantined"].values())
    assert t["quarantined"] == {"bad_json": 9}
    assert t["filtered"] == {"contains_drop_word": 12}
    kept = sum(1 for o in m["outputs"] for _ in iter_docs(out / o["path"]))
    filtered = [
        r
        for s in m["side_outputs"]
        if s["path"].startswith("filtered/")
        for r in iter_records(out / s["path"])
    ]
    assert kept == t["out"] == 39
    assert {r["reason"] for r in filtered} == {"contains_drop_word"} and len(filtered) == 12


def test_a_side_output_lands_with_its_shard_and_a_failed_shard_leaves_none_of_it(tmp_path):
    """The runner opens a stage's side outputs before a shard, aborts them when it fails and closes
    them with its documents: after a failure only the shards that finished have theirs (no temporary
    file left); the rerun completes them, each listed in the manifest with its records."""
    inputs = make_inputs(tmp_path / "in", files=3, docs=10)
    out = tmp_path / "out"
    failing = write_config(tmp_path / "fail.toml", fail_on="doc 1-4 ")
    assert run_toy(1, inputs, out, failing, check=False).returncode != 0
    done = sorted(p.stem for p in (out / "stats").glob("*.json"))
    assert len(done) < 3 and not [d for d in done if d.startswith("part-1-")], "part-1 failed"
    landed = sorted(p.name for p in (out / "dropped").iterdir())
    assert landed == sorted(f"{d}.jsonl.zst{x}" for d in done for x in ("", ".json"))
    run_toy(1, inputs, out)
    m = manifest(out)
    dropped = [s for s in m["side_outputs"] if s["path"].startswith("dropped/")]
    assert len(dropped) == 3 and not [p for p in (out / "dropped").iterdir() if p.name.startswith(".")]
    assert sum(s["records"] for s in dropped) == m["totals"]["filtered"]["contains_drop_word"] == 6
    assert all(d.url for s in dropped for d in iter_docs(out / s["path"]))


def test_killed_rank_then_rerun_equals_uninterrupted_run(tmp_path):
    out = tmp_path / "killed"
    inputs, clean, cfg, job = run_clean_then_start_slow(tmp_path, 3, files=6, sleep_per_doc=0.05, out=out)
    # wait until at least one shard is finished and the ranks are busy with the next ones
    deadline = time.time() + 120
    while (
        time.time() < deadline
        and len(list((out / "stats").glob("*.json")) if (out / "stats").exists() else []) < 1
    ):
        time.sleep(0.1)
    ranks = subprocess.run(["pgrep", "-f", f"{TOY} --in", "-P", str(job.pid)], capture_output=True, text=True)
    pids = [int(p) for p in ranks.stdout.split()]
    if not pids:  # hydra starts ranks through its proxy: look one level further down
        proxies = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True).stdout.split()
        pids = [
            int(p)
            for px in proxies
            for p in subprocess.run(["pgrep", "-P", px], capture_output=True, text=True).stdout.split()
        ]
    assert pids, "no rank processes found to kill"
    os.kill(pids[-1], signal.SIGKILL)
    job.communicate(timeout=120)
    assert job.returncode != 0
    assert not (out / "manifest.json").exists(), "a killed stage must not look complete"
    finished_before = {p.name: p.stat().st_mtime_ns for p in (out / "stats").glob("*.json")}
    assert 0 < len(finished_before) < 6

    run_toy(2, inputs, out, cfg)
    assert output_digests(out) == output_digests(clean)
    for name, mtime in finished_before.items():
        assert (out / "stats" / name).stat().st_mtime_ns == mtime, f"{name} was redone"


def test_rerun_of_complete_stage_does_nothing_and_changed_config_reruns(tmp_path):
    inputs = make_inputs(tmp_path / "in", files=3, docs=10)
    out = tmp_path / "out"
    run_toy(2, inputs, out)
    first = manifest(out)
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}

    again = run_toy(2, inputs, out)
    assert "nothing to do" in again.stderr
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == mtimes

    cfg = write_config(tmp_path / "c.toml", drop_word="ham")
    run_toy(2, inputs, out, cfg)
    changed = manifest(out)
    assert changed["config_hash"] != first["config_hash"]
    assert changed["totals"]["filtered"] != first["totals"]["filtered"]


def test_changed_input_reruns_only_that_shard(tmp_path):
    inputs = make_inputs(tmp_path / "in", files=3, docs=10)
    out = tmp_path / "out"
    run_toy(1, inputs, out)
    before = {p.name: p.stat().st_mtime_ns for p in (out / "stats").glob("*.json")}
    inputs[0].write_text(
        inputs[0].read_text() + json.dumps({"url": "https://x.example/new", "text": "new doc"}) + "\n"
    )
    run_toy(1, inputs, out)
    after = {p.name: p.stat().st_mtime_ns for p in (out / "stats").glob("*.json")}
    assert len(after) == 3, "the old shard of the changed input must be gone"
    unchanged = set(before) & set(after)
    assert len(unchanged) == 2 and all(before[n] == after[n] for n in unchanged)
    assert manifest(out)["totals"]["in"] == 31


def test_bad_config_key_is_a_one_line_error(tmp_path):
    inputs = make_inputs(tmp_path / "in", files=1, docs=3)
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[toy]\nno_such_key = 1\n")
    proc = run_toy(2, inputs, tmp_path / "out", cfg, check=False)
    assert proc.returncode != 0
    assert "unknown config keys: no_such_key" in proc.stderr


def test_missing_previous_stage_is_reported(tmp_path):
    from runtime.runner import StageError, shards_of_stage

    with pytest.raises(StageError, match="not a completed stage"):
        shards_of_stage(tmp_path)


def test_a_document_too_large_for_the_memory_budget_is_a_one_line_error_naming_the_key(tmp_path):
    big = tmp_path / "in" / "big.jsonl"
    big.parent.mkdir()
    big.write_text(
        json.dumps({"url": "https://x.example/big", "text": "ham " * ((3 << 18) - 64)}) + "\n"
    )  # 3 MB
    cfg = tmp_path / "c.toml"
    cfg.write_text("memory_budget_mb = 8\n")
    proc = run_toy(2, [big], tmp_path / "out", cfg, check=False)
    assert proc.returncode != 0
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "memory_budget_mb" in errors[0] and "at least 12" in errors[0], proc.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert not list((tmp_path / "out" / "shards").glob("*.json")), "no shard may look finished"


def test_an_unknown_top_level_config_key_is_an_error_naming_the_known_ones(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("memory_budget = 64\n")  # a typo of memory_budget_mb
    proc = run_toy(1, make_inputs(tmp_path / "in", files=1), tmp_path / "out", cfg, check=False)
    assert proc.returncode == 2
    assert (
        "unknown top-level config keys: memory_budget (known: alarms, memory_budget_mb, policy, seed"
        in proc.stderr
    )


def test_a_second_writer_of_a_stage_directory_is_refused_while_the_first_runs(tmp_path):
    out = tmp_path / "out"
    inputs, clean, cfg, first = run_clean_then_start_slow(tmp_path, 1, files=2, sleep_per_doc=0.1, out=out)
    lock = out / ".writer.lock"
    deadline = time.time() + 60
    while time.time() < deadline and not lock.exists():
        time.sleep(0.05)
    holder = json.loads(lock.read_text())
    second = run_toy(2, inputs, out, cfg, check=False)
    assert second.returncode != 0
    assert f"is being written by a process on host {holder['host']} (pid {holder['pid']})" in second.stderr
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err[-2000:]
    assert output_digests(out) == output_digests(clean) and not lock.exists()


def test_a_lock_left_by_a_dead_writer_is_taken_over_and_logged(tmp_path):
    inputs = make_inputs(tmp_path / "in", files=2, docs=5)
    out = tmp_path / "out"
    out.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    holder = {"job_id": "", "host": socket.gethostname(), "pid": gone.pid, "since": "2026-12-01T00:00:00Z"}
    (out / ".writer.lock").write_text(json.dumps(holder))
    proc = run_toy(2, inputs, out)
    assert f"took over the stale writer lock of {out} held by a process on host" in proc.stderr
    assert (out / "manifest.json").exists() and not (out / ".writer.lock").exists()


@pytest.mark.parametrize("decorator", [dataclass, dataclass(frozen=True), dataclass(kw_only=True)])
def test_a_stage_config_that_is_not_a_frozen_keyword_only_dataclass_is_refused(decorator):
    @decorator
    class Loose:
        limit: int = 3

    with pytest.raises(TypeError, match="frozen=True, kw_only=True"):
        type("LooseStage", (Stage,), {"name": "loose", "version": "1", "Config": Loose})


def test_every_stage_of_the_pipeline_has_a_value_config():
    for name in PIPELINE:
        stage = importlib.import_module(f"hpc_jobs.{name}.stage").STAGE
        assert is_value_config(stage.Config), name
