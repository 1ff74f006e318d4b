"""Airflow glue: a deferrable operator that submits one stage job and a trigger that waits for it.

The operator submits the job, then defers: the triggerer polls the job's state with the backend's async
commands, so no worker slot is held while SLURM runs the stage. Submission and waiting are one task on
purpose: a failed job fails the task, and the retry submits the stage again, which resumes from its
checkpoint. Every wait is bounded (time limit x (requeues + 1) + queue wait; a PENDING reason that
never clears), and cancelling the task cancels the job. The snapshot step is an operator too, not a
``@task``, so that it can report OpenLineage datasets (:mod:`orchestration.lineage`). See
docs/orchestration.md ("The build_snapshot DAG").
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from airflow.providers.openlineage.extractors import OperatorLineage
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from corpus.model.layout import CANDIDATES_DIR, SNAPSHOT_DIR
from orchestration.assets import VERSIONS, emit_version
from orchestration.lineage import job_lineage, lineage_enabled, manifest_file
from orchestration.submit import (
    VERSION_STEP,
    StageJob,
    SubmitError,
    Submitted,
    backend_for,
    is_transient,
    job_comment,
    slurm_seconds,
)

LOG_TAIL_LINES = 60
#: after a transient failure to read a job's state, wait BASE * 2^(n-1) seconds (at most CAP) before the
#: n-th try again; give up once the failures have lasted BUDGET seconds in a row. 30 minutes outlast a
#: login node's reboot or a slurmctld restart; a job that cannot be observed for longer fails its task.
BACKOFF_BASE_S = 5.0
BACKOFF_CAP_S = 300.0
TRANSIENT_BUDGET_S = 1800.0


def backoff_delay(attempt: int, base: float = BACKOFF_BASE_S, cap: float = BACKOFF_CAP_S) -> float:
    """The wait before try ``attempt`` (1, 2, ...) after transient failures: exponential, bounded."""
    return min(cap, base * 2 ** (attempt - 1))


class StageJobTrigger(BaseTrigger):
    """Polls a submitted job until it ends; the event carries the final state and the log's tail."""

    def __init__(
        self,
        job: dict[str, str],
        poll_interval: float = 30.0,
        deadline: float = 0.0,
        backoff_base: float = BACKOFF_BASE_S,
        backoff_cap: float = BACKOFF_CAP_S,
        transient_budget: float = TRANSIENT_BUDGET_S,
    ) -> None:
        super().__init__()
        self.job = job
        self.poll_interval = poll_interval
        self.deadline = deadline  # epoch seconds after which the job is cancelled; 0: none
        self.backoff_base, self.backoff_cap, self.transient_budget = (
            backoff_base,
            backoff_cap,
            transient_budget,
        )

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job": self.job,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "backoff_base": self.backoff_base,
                "backoff_cap": self.backoff_cap,
                "transient_budget": self.transient_budget,
            },
        )

    async def on_kill(self) -> None:
        """The user marked the deferred task failed / succeeded or cleared it: the job must not go on."""
        job = Submitted.from_dict(self.job)
        await asyncio.to_thread(backend_for(job.backend, job.conn_id).cancel, job)
        self.log.info("cancelled job %s: its task was marked or cleared by a user", job.job_id)

    async def _give_up(self, backend: Any, job: Submitted, why: str) -> TriggerEvent:
        """Cancel the job (it must not go on writing once its task has failed) and say why."""
        try:
            await asyncio.to_thread(backend.cancel, job)
            why += "; the job was cancelled"
        except Exception as e:  # noqa: BLE001 -- the task fails either way; say the job may live on
            why += f"; cancelling it failed ({type(e).__name__}: {e}): scancel {job.job_id} by hand"
        return TriggerEvent({"ok": False, "error": why, "job": self.job})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        job = Submitted.from_dict(self.job)
        backend = backend_for(job.backend, job.conn_id)
        # sleep first: a job just submitted is not done yet, and a trigger that fires within seconds of
        # the deferral can race the scheduler's handling of it (apache/airflow#71172)
        delay = self.poll_interval
        failures, failing_since = 0, 0.0
        while True:
            await asyncio.sleep(delay)
            try:
                status = await backend.astatus(job)
            except Exception as e:  # noqa: BLE001 -- classified right here: transient, or final for the task
                if not is_transient(e):
                    error = str(e) if isinstance(e, SubmitError) else f"{type(e).__name__}: {e}"
                    yield TriggerEvent({"ok": False, "error": error, "job": self.job})
                    return
                now = time.monotonic()
                failures, failing_since = failures + 1, failing_since if failures else now
                if now - failing_since >= self.transient_budget:
                    yield TriggerEvent(
                        {
                            "ok": False,
                            "job": self.job,
                            "error": (
                                f"cannot read the job's state: {failures} tries over {now - failing_since:.0f}s failed, "
                                f"the last with {type(e).__name__}: {e}"
                            ),
                        }
                    )
                    return
                delay = backoff_delay(failures, self.backoff_base, self.backoff_cap)
                self.log.warning(
                    "reading the state of job %s failed (%s: %s), transient: try %d in %.0fs",
                    job.job_id,
                    type(e).__name__,
                    e,
                    failures + 1,
                    delay,
                )
                continue
            failures, delay = 0, self.poll_interval
            if status.stuck:
                yield await self._give_up(
                    backend, job, f"{status.describe()}: waiting does not clear that reason"
                )
                return
            if not status.done and self.deadline and time.time() > self.deadline:
                yield await self._give_up(
                    backend,
                    job,
                    (
                        f"{status.describe()} past its deadline (time limit x (max requeues + 1) + queue wait, "
                        f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(self.deadline))})"
                    ),
                )
                return
            if status.done:
                yield TriggerEvent(
                    {
                        "ok": status.ok,
                        "state": status.state,
                        "description": status.describe(),
                        "log_tail": await self._log_tail(backend, job),
                        "job": self.job,
                    }
                )
                return
            self.log.info("%s", status.describe())

    async def _log_tail(self, backend: Any, job: Submitted) -> str:
        """The log's last lines, or why there are none: the job's end is known, and a dropped connection
        while reading its log must not turn a finished job into a failed task."""
        try:
            tail = await backend.arun(["tail", "-n", str(LOG_TAIL_LINES), "--", job.log_path])
        except Exception as e:  # noqa: BLE001 -- the log is for people; the job's state is already known
            return f"(log {job.log_path} not read: {type(e).__name__}: {e})"
        return tail.out if tail.rc == 0 else f"(no log at {job.log_path}: {tail.err.strip()})"


def stage_job(build: dict[str, Any], stage: str, comment: str = "") -> StageJob:
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
        comment=comment,
        **job_settings(build),
    )


def job_settings(run: dict[str, Any]) -> dict[str, Any]:
    """The StageJob fields every job of a run shares (orchestration/jobparams.py resolved them)."""
    return {
        "root": run["root"],
        "python": run["python"],
        "partition": run["partition"],
        "time_limit": run["time_limit"],
        "sbatch_args": tuple(run["sbatch_args"]),
        "env": tuple(sorted(run["env"].items())),
        "max_requeues": int(run["max_requeues"]),
    }


def wait_budget(build: dict[str, Any]) -> float:
    """Seconds a stage job may take from submission to its end: every run at its time limit (the first
    and each allowed requeue) plus the time it may wait in the queue, in total."""
    return slurm_seconds(build["time_limit"]) * (int(build["max_requeues"]) + 1) + slurm_seconds(
        build["queue_wait"]
    )


def read_manifests(backend: Any, directories: list[str], log: Any) -> dict[str, dict[str, Any]]:
    """The manifests of ``directories`` that could be read, for the lineage events; none when no events
    are sent. Only lineage needs them here (``verify`` checks the same manifests and fails the run when
    one is missing or wrong), so a read that fails leaves that dataset without its facets instead of
    failing a task whose job is done."""
    if not lineage_enabled():
        return {}
    manifests = {}
    for d in directories:
        try:
            manifests[d] = json.loads(backend.read_text(manifest_file(d)))
        except Exception as e:  # noqa: BLE001 -- see above: the job's result is already known
            log.warning(
                "lineage: %s not read (%s: %s); its dataset goes without facets",
                manifest_file(d),
                type(e).__name__,
                e,
            )
    return manifests


class StageJobOperator(BaseOperator):
    """Submit ``stage`` of ``build`` (the ``prepare`` task's XCom) and wait for it without a worker slot.

    Its OpenLineage events (docs/orchestration.md, "Lineage events") name the job's inputs and its
    output directory; the COMPLETE event adds the facets of the manifests read once the job succeeded.
    """

    template_fields = ("build",)
    ui_color = "#d8e8f8"

    def __init__(self, *, stage: str, build: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stage = stage
        self.build = build
        self._submitted: Submitted | None = None
        self._manifests: dict[str, dict[str, Any]] = {}

    def make_job(self, comment: str) -> StageJob:
        return stage_job(self.build, self.stage, comment)

    def manifest_dirs(self, job: StageJob) -> list[str]:
        """The job's directories that hold a manifest once it succeeded: its output, and after the first
        stage its input (the previous stage's directory)."""
        return [job.out, *(job.inputs if self.build["stages"].index(self.stage) > 0 else ())]

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        job = self.make_job("")
        return job_lineage(job.inputs, [job.out], {})

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        job = self.make_job("")
        return job_lineage(job.inputs, [job.out], self._manifests)

    def execute(self, context: Any) -> None:
        ti = context["ti"]
        job = self.make_job(job_comment(ti.dag_id, ti.run_id, self.stage, ti.try_number))
        backend = backend_for(self.build["backend"], self.build["conn_id"])
        budget = wait_budget(self.build)
        # a retry first looks for the job of an earlier try (its sbatch may have timed out after SLURM
        # accepted it, or the wait failed while the job ran on): one job per stage of a run
        submitted, how = backend.attach_or_submit(job)
        self._submitted = submitted
        self.log.info(
            "stage %s: %s on %s, %d ranks; log %s; waiting at most %s",
            self.stage,
            how,
            backend.name,
            job.ranks,
            submitted.log_path,
            timedelta(seconds=budget),
        )
        poll = float(self.build["poll_interval"])
        # the trigger cancels the job at the deadline; the deferral's timeout is only the backstop
        self.defer(
            trigger=StageJobTrigger(submitted.to_dict(), poll, deadline=time.time() + budget),
            method_name="execute_complete",
            timeout=timedelta(seconds=budget + 2 * poll + 600),
        )

    def on_kill(self) -> None:
        """Killed while submitting (before the deferral): cancel the job this try submitted."""
        if self._submitted is not None:
            backend_for(self._submitted.backend, self._submitted.conn_id).cancel(self._submitted)
            self.log.info("cancelled job %s", self._submitted.job_id)

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
        self._manifests = read_manifests(
            backend_for(self.build["backend"], self.build["conn_id"]),
            self.manifest_dirs(self.make_job("")),
            self.log,
        )
        return {"job_id": job["job_id"], "state": event["state"], "log": job["log_path"]}


def version_job(step: dict[str, Any], comment: str = "") -> StageJob:
    """The version step of a ``build_version`` / ``refresh_optouts`` run (its ``prepare`` task's XCom):
    one task reading the build's metadata table, writing the version directory."""
    inline = (f"--select-inline={step['selection_toml']}",) if step.get("selection_toml") else ()
    return StageJob(
        stage=VERSION_STEP,
        inputs=(step["build"],),
        out=step["out"],
        config=step.get("selection") or None,
        log_dir=step["log_dir"],
        ranks=1,
        comment=comment,
        extra_args=inline,
        **job_settings(step),
    )


class VersionJobOperator(StageJobOperator):
    """Submit the version step (hpc_jobs/version/) as a job and wait for it, as a stage is waited for."""

    def __init__(self, *, step: Any, **kwargs: Any) -> None:
        super().__init__(stage=VERSION_STEP, build=step, **kwargs)

    def make_job(self, comment: str) -> StageJob:
        return version_job(self.build, comment)

    def manifest_dirs(self, job: StageJob) -> list[str]:
        """The version directory; its input is a whole build directory, which has no manifest of its own."""
        return [job.out]


def buildstep(build: dict[str, Any], *args: str) -> dict[str, Any]:
    """Run a build step (orchestration/buildsteps.py) on the cluster's side; it prints one JSON line."""
    backend = backend_for(build["backend"], build["conn_id"])
    argv = [build["python"], "-m", "orchestration.buildsteps", *args]
    out = backend.check(argv, env={"PYTHONUNBUFFERED": "1", **build["env"]}, timeout=600)
    return json.loads(out.strip().splitlines()[-1])


class SnapshotOperator(BaseOperator):
    """Assemble the snapshot of ``build`` once every stage is verified (``buildsteps finalize``: the
    candidates, the default version, the report, the build's index generation); the snapshot id goes to
    XCom and to the event it emits on the VERSIONS asset (its outlet).

    Its OpenLineage events read the last stage's directory and write the candidates and the default
    version (``OUT/snapshot``); the COMPLETE event carries the last stage's manifest digest and both
    snapshot ids.
    """

    template_fields = ("build", "verified")
    ui_color = "#d8f0d8"

    def __init__(self, *, build: Any, verified: Any, **kwargs: Any) -> None:
        super().__init__(outlets=[VERSIONS], **kwargs)
        self.build = build
        self.verified = verified
        self._manifests: dict[str, dict[str, Any]] = {}

    def lineage_paths(self) -> tuple[list[str], list[str]]:
        """What the step reads (the last stage's directory) and writes (the candidates, the default version)."""
        out = self.build["out"]
        last = stage_job(self.build, self.build["stages"][-1]).out
        return [last], [f"{out}/{CANDIDATES_DIR}", f"{out}/{SNAPSHOT_DIR}"]

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        return job_lineage(*self.lineage_paths(), {})

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        return job_lineage(*self.lineage_paths(), self._manifests)

    def execute(self, context: Any) -> dict[str, Any]:
        build = self.build
        config = [f"--config={build['config_file']}"] if build.get("config_file") else []
        result = buildstep(
            build, "finalize", "--out", build["out"], "--stages", ",".join(build["stages"]), *config
        )
        result["stage_manifests"] = {v["stage"]: v["manifest_digest"] for v in self.verified}
        self.log.info(
            "snapshot manifest %s\nreport %s\nsnapshot_id %s",
            result["manifest"],
            result["report"],
            result["snapshot_id"],
        )
        context["ti"].xcom_push(key="snapshot_id", value=result["snapshot_id"])
        emit_version(context, result["snapshot_id"], build["out"], f"{build['out']}/{SNAPSHOT_DIR}")
        inputs, outputs = self.lineage_paths()
        self._manifests = read_manifests(
            backend_for(build["backend"], build["conn_id"]), inputs + outputs, self.log
        )
        return result
