"""What state a build is in, step by step (``corpus status``): prepare, the nine stages, finalize.

The build directory says what is done (the build config: prepared; a stage's manifest: that stage is
complete; the commit record and the snapshot: finalized) and how far a stage got (one ``stats`` file per
finished unit). For the jobs ``corpus submit`` queued (orchestration/chain.py), SLURM says whether a
step is pending, running or ended, and a failed job's log gives its last error line. A build made by
``corpus build``, the DAG or by hand has no job record: its steps are done, started or not started.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from corpus.model.layout import (
    STATS,
    build_config_path,
    committed_path,
    manifest_path,
    snapshot_dir,
    stage_dir,
)
from corpus.model.stages import PIPELINE
from orchestration.submit import FINALIZE_STEP, JobStatus, SubmitError, Submitted

PREPARE_STEP = "prepare"
STEPS = (PREPARE_STEP, *PIPELINE, FINALIZE_STEP)
#: how far back in a failed job's log its error line is looked for
LOG_TAIL_BYTES = 64 * 1024
ERROR_LINE = re.compile(r"error|refused|failed|exception|traceback|killed|oom|cancelled", re.IGNORECASE)
#: the job script's own closing lines, which are not the error
SCRIPT_LINE = re.compile(r"stage [a-z_]+: (exit status|SLURM job|mpiexec)")


@dataclass(frozen=True)
class StepState:
    step: str
    state: str  # done | running | pending | failed | cancelled | started | not started
    detail: str = ""
    job_id: str = ""


def last_error_line(log: Path) -> str:
    """The last line of a job's log that reads as its error (else its last line), or why there is none."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - LOG_TAIL_BYTES))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return f"no log at {log}"
    lines = [ln for ln in lines if not SCRIPT_LINE.search(ln)]
    found = [ln for ln in lines if ERROR_LINE.search(ln)]
    return (found or lines or ["(empty log)"])[-1]


def snapshot_id(out: Path) -> str:
    return json.loads(manifest_path(snapshot_dir(out)).read_text())["snapshot_id"]


def units_done(out: Path, stage: str) -> str:
    """``N of M units done`` (M: the previous stage's shards; ingest's units are not known before it
    lists its inputs, so only N)."""
    directory = stage_dir(out, stage)
    done = sum(1 for _ in (directory / STATS).glob("*.json")) if (directory / STATS).is_dir() else 0
    i = PIPELINE.index(stage)
    previous = manifest_path(stage_dir(out, PIPELINE[i - 1])) if i > 0 else None
    if previous is not None and previous.is_file():
        return f"{done} of {len(json.loads(previous.read_text())['outputs'])} units done"
    return f"{done} units done"


def job_state(step: str, job: Submitted, status: JobStatus, progress: str) -> StepState:
    """A step that is not complete, from its job's state in SLURM."""
    if status.state == "PENDING":
        why = {"": "queued", "None": "queued", "Dependency": "after the step before"}.get(
            status.reason, status.reason
        )
        return StepState(step, "pending", f"waiting: {why}", job.job_id)
    if not status.done:
        return StepState(step, "running", progress, job.job_id)
    if status.state == "CANCELLED" and not Path(job.log_path).exists():
        return StepState(step, "cancelled", "never ran: an earlier step failed or was cancelled", job.job_id)
    word = "cancelled" if status.state == "CANCELLED" else "failed"
    code = f" (exit {status.exit_code})" if status.exit_code else ""
    return StepState(step, word, f"{status.state}{code}: {last_error_line(Path(job.log_path))}", job.job_id)


def step_state(
    out: Path, step: str, job: Submitted | None, status_of: Callable[[Submitted], JobStatus]
) -> StepState:
    job_id = job.job_id if job else ""
    if step == PREPARE_STEP:
        done = build_config_path(out).is_file()
        return StepState(step, "done" if done else "not started", "build config written" if done else "")
    if step == FINALIZE_STEP:
        snapshot = manifest_path(snapshot_dir(out))
        if committed_path(out).is_file() and snapshot.is_file():
            return StepState(step, "done", f"snapshot_id {snapshot_id(out)}", job_id)
        progress, started = "", False
    else:
        manifest = manifest_path(stage_dir(out, step))
        if manifest.is_file():
            t = json.loads(manifest.read_text())["totals"]
            return StepState(step, "done", f"{t['in']:,} documents in, {t['out']:,} out", job_id)
        progress, started = units_done(out, step), stage_dir(out, step).exists()
    if job is None:
        return (
            StepState(step, "started", f"not complete: {progress}" if progress else "")
            if started
            else StepState(step, "not started")
        )
    try:
        status = status_of(job)
    except SubmitError as e:
        return StepState(step, "unknown", f"SLURM did not answer: {e}", job_id)
    return job_state(step, job, status, progress)


def build_status(
    out: Path, jobs: dict[str, Submitted], status_of: Callable[[Submitted], JobStatus]
) -> dict[str, Any]:
    """Every step's state, and whether the build is complete (then its snapshot id)."""
    steps = [step_state(out, step, jobs.get(step), status_of) for step in STEPS]
    complete = steps[-1].state == "done"
    return {
        "build": str(out),
        "complete": complete,
        "snapshot_id": snapshot_id(out) if complete else None,
        "failed": any(s.state == "failed" for s in steps),
        "steps": [asdict(s) for s in steps],
    }


def status_table(status: dict[str, Any]) -> str:
    """The status as a person reads it: one line per step, then where the build is."""
    rows = [
        (s["step"], s["state"], s["job_id"] and f"job {s['job_id']}", s["detail"]) for s in status["steps"]
    ]
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{a:<{width[0]}}  {b:<{width[1]}}  {c:<{width[2]}}  {d}".rstrip() for a, b, c, d in rows]
    if status["complete"]:
        lines.append(f"{status['build']}: complete, snapshot_id {status['snapshot_id']}")
    else:
        here = next(s for s in status["steps"] if s["state"] != "done")
        n = STEPS.index(here["step"]) + 1
        lines.append(f"{status['build']}: step {n} of {len(STEPS)} ({here['step']}) {here['state']}")
    return "\n".join(lines)
