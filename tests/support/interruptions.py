"""The check every global phase passes: interrupted in the middle (kill -9 of a rank, or SIGUSR1), a stage
reruns from its completed parts only, and ends byte-identical to an uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.preemption import FAULT_ENV, PREEMPTED_EXIT
from tests.dedup.stage_io import output_digests, run_stage


def completed_parts(out: Path, step: str) -> int:
    """Parts of a step with a completion marker on disk (counted independently of the runtime's log)."""
    return len(list((out / "work" / "phase" / step).glob("*.done.json")))


def last_run(out: Path) -> dict:
    return json.loads((out / "work" / "phase" / "progress.json").read_text())[-1]["steps"]


def assert_resumes_after_interruption(
    stage: str,
    step: str,
    sig: str,
    rank: int,
    in_dir: Path,
    out: Path,
    uninterrupted: dict,
    monkeypatch,
    ranks: int = 2,
    config: Path | None = None,
    after_parts: int = 1,
) -> None:
    """Interrupt ``stage`` after ``after_parts`` completed parts of ``step`` on ``rank`` (``sig``: KILL or
    USR1), rerun it, and check what the rerun redid and what it wrote."""
    monkeypatch.setenv(FAULT_ENV, f"{stage}/{step}:{after_parts}:{sig}:{rank}")
    stopped = run_stage(stage, ranks, in_dir, out, config, check=False)
    if sig == "USR1":
        assert stopped.returncode == PREEMPTED_EXIT, stopped.stderr[-3000:]
        assert "stopped inside the global phase" in stopped.stderr
    else:
        assert stopped.returncode != 0, "the fault was not injected: is the step name right?"
    assert not (out / "manifest.json").exists(), "an interrupted stage must not look complete"
    before = completed_parts(out, step)
    assert before >= after_parts, "the parts finished before the interruption must be checkpointed"

    monkeypatch.delenv(FAULT_ENV)
    run_stage(stage, ranks, in_dir, out, config)
    redo = last_run(out)[step]
    assert redo["parts_done_before"] == before, "the rerun must reuse every completed part"
    assert redo["parts_done_before"] + redo["parts_done_now"] == completed_parts(out, step)
    assert output_digests(out) == uninterrupted
