"""Airflow glue: a deferrable operator that submits one stage job and a trigger that waits for it.

The operator submits the job (a few seconds in a worker), then defers: the triggerer polls the job's
state with the backend's async commands (asyncssh for the ssh backend), so no worker slot is held while
SLURM runs the stage. Submission and waiting are one task instance on purpose: when the job fails the
task fails, and Airflow's retry submits the stage again, which resumes from the stage's checkpoint
(stages are idempotent, so the retry's output is the same as an uninterrupted run's).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from cli.orchestration.submit import StageJob, SubmitError, Submitted, backend_for

#: consecutive failures to read a job's state (e.g. a dropped SSH connection) before giving up
MAX_POLL_ERRORS = 5
LOG_TAIL_LINES = 60


class StageJobTrigger(BaseTrigger):
    """Polls a submitted job until it ends; the event carries the final state and the log's tail."""

    def __init__(self, job: dict[str, str], poll_interval: float = 30.0) -> None:
        super().__init__()
        self.job = job
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"job": self.job, "poll_interval": self.poll_interval})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        job = Submitted.from_dict(self.job)
        backend = backend_for(job.backend, job.conn_id)
        errors = 0
        while True:
            # sleep first: a job just submitted is not done yet, and a trigger that fires within
            # seconds of the deferral can race the scheduler's handling of it (apache/airflow#71172)
            await asyncio.sleep(self.poll_interval)
            try:
                status = await backend.astatus(job)
                errors = 0
            except SubmitError as e:
                yield TriggerEvent({"ok": False, "error": str(e), "job": self.job})
                return
            except (OSError, TimeoutError, ConnectionError) as e:  # asyncssh errors are OSError subclasses
                errors += 1
                self.log.warning("reading the state of job %s failed (%d/%d): %s", job.job_id, errors,
                                 MAX_POLL_ERRORS, e)
                if errors >= MAX_POLL_ERRORS:
                    yield TriggerEvent({"ok": False, "error": f"cannot read the job's state: {e}", "job": self.job})
                    return
                continue
            if status.done:
                tail = await backend.arun(["tail", "-n", str(LOG_TAIL_LINES), "--", job.log_path])
                yield TriggerEvent({
                    "ok": status.ok,
                    "state": status.state,
                    "description": status.describe(),
                    "log_tail": tail.out if tail.rc == 0 else f"(no log at {job.log_path}: {tail.err.strip()})",
                    "job": self.job,
                })
                return
            self.log.info("%s", status.describe())


def stage_job(build: dict[str, Any], stage: str) -> StageJob:
    """The job for ``stage`` of the build that the DAG's ``prepare`` task described."""
    stages: list[str] = build["stages"]
    i = stages.index(stage)
    inputs = build["inputs"] if i == 0 else [f"{build['out']}/stages/{stages[i - 1]}"]
    return StageJob(
        stage=stage,
        inputs=tuple(inputs),
        out=f"{build['out']}/stages/{stage}",
        config=build["build_config"],
        log_dir=f"{build['out']}/logs",
        ranks=int(build["ranks_per_stage"].get(stage, build["ranks"])),
        root=build["root"],
        python=build["python"],
        partition=build["partition"],
        time_limit=build["time_limit"],
        sbatch_args=tuple(build["sbatch_args"]),
        env=tuple(sorted(build["env"].items())),
    )


class StageJobOperator(BaseOperator):
    """Submit ``stage`` of ``build`` (the ``prepare`` task's XCom) and wait for it without a worker slot."""

    template_fields = ("build",)
    ui_color = "#d8e8f8"

    def __init__(self, *, stage: str, build: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stage = stage
        self.build = build

    def execute(self, context: Any) -> None:
        job = stage_job(self.build, self.stage)
        backend = backend_for(self.build["backend"], self.build["conn_id"])
        submitted = backend.submit(job)
        self.log.info("stage %s: submitted %s job %s with %d ranks; log %s", self.stage, backend.name,
                      submitted.job_id, job.ranks, submitted.log_path)
        self.defer(trigger=StageJobTrigger(submitted.to_dict(), float(self.build["poll_interval"])),
                   method_name="execute_complete")

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, str]:
        job = event["job"]
        if "error" in event:
            raise AirflowException(f"stage {self.stage}: job {job['job_id']}: {event['error']}")
        if not event["ok"]:
            raise AirflowException(
                f"stage {self.stage}: {event['description']}; last lines of {job['log_path']}:\n"
                f"{event['log_tail'].rstrip()}"
            )
        self.log.info("stage %s: %s; log %s", self.stage, event["description"], job["log_path"])
        self.log.info("last lines of the job's log:\n%s", event["log_tail"].rstrip())
        return {"job_id": job["job_id"], "state": event["state"], "log": job["log_path"]}
