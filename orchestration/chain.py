"""A whole build as a chain of SLURM jobs (``corpus submit``), written down for ``corpus status``.

Prepare runs first, on the submit host, as the DAG's prepare task and ``corpus build`` run it: every
table of the config is checked and, against a base, the inputs it has not ingested are found before
anything is queued. Then one job per stage and the finalize job, each ``--dependency=afterok`` on the
one before with ``--kill-on-invalid-dep=yes`` (a failure cancels the rest, nothing waits forever). The
job ids go to ``OUT/submitted.json`` (:func:`read_record`). docs/guide/slurm.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from corpus.model.errors import UserError
from corpus.model.layout import JOB_LOGS, build_config_path, stage_dir, submitted_path
from corpus.model.stages import PIPELINE
from orchestration.submit import FINALIZE_STEP, Backend, StageJob, SubmitError, Submitted


@dataclass(frozen=True)
class JobSettings:
    """How big, where and how long each job of the chain is (sbatch's own options)."""

    ranks: int = 2
    ranks_per_stage: dict[str, int] = field(default_factory=dict)
    partition: str = ""
    time_limit: str = ""
    sbatch_args: tuple[str, ...] = ()
    root: str = ""  # the repository the jobs run from ("" = this one)
    python: str = ""  # the jobs' interpreter ("" = ROOT/.venv/bin/python)


def chain_jobs(out: Path, inputs: list[Path], config_file: Path | None, s: JobSettings) -> list[StageJob]:
    """The nine stage jobs (each reading the previous one's directory, each with the build config that
    prepare wrote) and the finalize job, not yet linked: :func:`submit_chain` links them."""
    out = out.resolve()
    common = {
        "log_dir": str(out / JOB_LOGS),
        "partition": s.partition,
        "time_limit": s.time_limit,
        "sbatch_args": s.sbatch_args,
        **({"root": s.root} if s.root else {}),
        "python": s.python,
    }
    jobs, previous = [], [str(p.resolve()) for p in inputs]
    for stage in PIPELINE:
        directory = str(stage_dir(out, stage))
        ranks = s.ranks_per_stage.get(stage, s.ranks)
        config = str(build_config_path(out))
        jobs.append(
            StageJob(stage=stage, inputs=tuple(previous), out=directory, config=config, ranks=ranks, **common)
        )
        previous = [directory]
    finalize_args = (f"--stages={','.join(PIPELINE)}",)
    config = str(config_file.resolve()) if config_file else None
    jobs.append(
        StageJob(
            stage=FINALIZE_STEP,
            inputs=(),
            out=str(out),
            config=config,
            ranks=s.ranks,
            extra_args=finalize_args,
            **common,
        )
    )
    return jobs


def submit_chain(backend: Backend, jobs: list[StageJob]) -> list[Submitted]:
    """Queue ``jobs`` in order, each after the one before; if one cannot be queued, cancel those that
    were (a half-queued chain would run stages nobody waits for) and raise."""
    done: list[Submitted] = []
    try:
        for job in jobs:
            done.append(backend.submit(dataclasses.replace(job, after=done[-1].job_id if done else "")))
    except SubmitError:
        for queued in reversed(done):
            try:
                backend.cancel(queued)
            except SubmitError:
                pass  # already gone: nothing to cancel
        raise
    return done


def write_record(out: Path, jobs: list[Submitted]) -> Path:
    """``OUT/submitted.json``: the chain's jobs in order, replaced whole (a resubmission's chain wins)."""
    path = submitted_path(out)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"jobs": [j.to_dict() for j in jobs]}, indent=1) + "\n")
    tmp.replace(path)
    return path


def read_record(out: Path) -> dict[str, Submitted]:
    """The jobs ``corpus submit`` queued for ``out``, by step; empty for a build made otherwise."""
    try:
        raw = json.loads(submitted_path(out).read_text())
    except FileNotFoundError:
        return {}
    except ValueError as e:
        raise UserError(f"{submitted_path(out)} is not the JSON corpus submit writes: {e}") from e
    return {j["stage"]: Submitted.from_dict(j) for j in raw["jobs"]}
