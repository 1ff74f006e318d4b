"""A whole build on SLURM without Airflow: chained by hand with sbatch (prepare, nine stages, finalize,
each --dependency=afterok on the one before), and queued by `corpus submit`, followed with
`corpus status`. Both end with the snapshot id `corpus build` gives."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from corpus.model.stages import PIPELINE
from tests.conftest import ROOT, run_corpus
from tests.orchestration.conftest import snapshot_id

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

#: the sequence of docs/guide/slurm.md ("The sequence"), with the test's paths and --wait on the last job
BY_HAND = r"""
set -euo pipefail
B="$1"; shift
mkdir -p "$B/logs"
jid=$(sbatch --parsable --oversubscribe --output="$B/logs/%x-%j.log" sbatch/prepare.sbatch --out "$B" --input "$@")
prev=("$@")
for s in ingest extract exact_dedup annotate line_dedup minhash_dedup decontaminate tokenize write_shards; do
  jid=$(sbatch --parsable --oversubscribe -n 2 --output="$B/logs/%x-%j.log" \
        --dependency=afterok:$jid --kill-on-invalid-dep=yes \
        sbatch/$s.sbatch --in "${prev[@]}" --out "$B/stages/$s" --config "$B/build-config.json")
  prev=("$B/stages/$s")
done
sbatch --parsable --wait --oversubscribe -n 2 --output="$B/logs/%x-%j.log" \
  --dependency=afterok:$jid --kill-on-invalid-dep=yes \
  sbatch/finalize.sbatch --out "$B" --stages ingest,extract,exact_dedup,annotate,line_dedup,minhash_dedup,decontaminate,tokenize,write_shards
"""


def status(build: Path) -> dict:
    proc = run_corpus("status", str(build), "--json", check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def wait_for(build: Path, timeout: float = 900) -> dict:
    """`corpus status --json` until the build is complete or a step has failed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = status(build)
        if st["complete"] or st["failed"] or any(s["state"] == "cancelled" for s in st["steps"]):
            return st
        time.sleep(2)
    raise AssertionError(
        f"{build} not done in {timeout}s:\n{run_corpus('status', str(build), check=False).stdout}"
    )


def logs(build: Path) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text()[-1500:]}" for p in sorted((build / "logs").glob("*.log")))


def test_a_build_chained_by_hand_and_one_from_corpus_submit_give_corpus_builds_snapshot(
    services, small_inputs, reference, tmp_path
):
    by_hand, submitted = tmp_path / "by hand" / "b", tmp_path / "submitted $(id)" / "b"
    chain = subprocess.Popen(
        ["bash", "-c", BY_HAND, "chain", str(by_hand), *map(str, small_inputs)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    queued = run_corpus(
        "submit", "--input", *map(str, small_inputs), "--out", str(submitted), "--sbatch-arg=--oversubscribe"
    )
    lines = queued.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines[:-1]] == [*PIPELINE, "finalize"]
    assert "corpus status" in lines[-1]

    st = wait_for(submitted)
    assert st["complete"], f"{run_corpus('status', str(submitted), check=False).stdout}\n{logs(submitted)}"
    assert st["snapshot_id"] == reference == snapshot_id(submitted)
    assert [s["step"] for s in st["steps"]] == ["prepare", *PIPELINE, "finalize"]
    assert all(s["state"] == "done" for s in st["steps"])
    assert all(s["job_id"].isdigit() for s in st["steps"][1:])  # every stage and finalize was a job

    out, err = chain.communicate(timeout=900)
    assert chain.returncode == 0, f"{err}\n{logs(by_hand)}"
    assert snapshot_id(by_hand) == reference
    by_hand_status = status(by_hand)  # no job record: read from the directory alone
    assert by_hand_status["complete"] and all(s["job_id"] == "" for s in by_hand_status["steps"])


def test_a_failing_stage_is_shown_with_its_error_and_cancels_the_rest(services, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    fifo = inputs / "pipe.jsonl"
    os.mkfifo(fifo)
    build = tmp_path / "b"
    run_corpus("submit", "--input", str(fifo), "--out", str(build), "--sbatch-arg=--oversubscribe")
    again = run_corpus("submit", "--input", str(fifo), "--out", str(build), check=False)
    assert again.returncode == 2 and "of an earlier corpus submit is" in again.stderr  # one chain per build

    st = wait_for(build)
    by_step = {s["step"]: s for s in st["steps"]}
    assert st["failed"] and not st["complete"]
    assert by_step["prepare"]["state"] == "done"
    assert by_step["ingest"]["state"] == "failed"
    assert "is a FIFO" in by_step["ingest"]["detail"]  # the stage's own error line, from its log
    # --kill-on-invalid-dep: nothing after it is left pending
    deadline = time.monotonic() + 120
    while any(by_step[s]["state"] == "pending" for s in (*PIPELINE[1:], "finalize")):
        assert time.monotonic() < deadline, by_step
        time.sleep(1)
        by_step = {s["step"]: s for s in status(build)["steps"]}
    assert all(by_step[s]["state"] == "cancelled" for s in (*PIPELINE[1:], "finalize"))
    text = run_corpus("status", str(build), check=False)
    assert text.returncode == 1 and "step 2 of 11 (ingest) failed" in text.stdout
