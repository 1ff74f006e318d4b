"""# build_snapshot

Builds a corpus snapshot: every installed stage of `corpus.pipeline.PIPELINE`, in order, each as a
job (`sbatch sbatch/<stage>.sbatch` on SLURM, or the same script under `mpiexec` for the embedded
demo). Per stage, a task group:

* **submit** submits the stage job and defers: the triggerer polls the job (`scontrol`, `sacct`,
  `sacct -c`, its exit record) and no worker slot is held while it runs. A FAILED / CANCELLED / TIMEOUT /
  OUT_OF_MEMORY job fails the task with the job's log tail; the retry submits the stage again and
  it resumes from its checkpoint (stages are idempotent). The wait is bounded: a job not done after
  `time_limit` x (`max_requeues` + 1) + `queue_wait`, or PENDING for a reason that does not clear
  (held, over a partition limit, an invalid account), is cancelled and fails the task; marking the
  task failed or clearing it cancels the job.
* **verify** reads the stage manifest, checks that its counts reconcile and that it was built from
  the previous stage's outputs, and passes the manifest digest on (XCom).

`prepare` writes the build config (the config file, the `config` tables, the seed); `snapshot`
assembles the snapshot manifest and the report and puts the `snapshot_id` in XCom. The same inputs,
config and seed give the same snapshot id as `corpus build`.

With an OpenLineage transport configured, each submit task and `snapshot` report what they read and
wrote (the sources, the stage directories, the snapshot, with their manifest digests and snapshot ids):
docs/orchestration.md, "Lineage events".

Backends: `ssh` (sbatch on a login node; host, user and key from the deployment's Airflow Connection),
`local` (sbatch on the Airflow worker's host), `mpiexec` (no SLURM).

The Params are data, checked by JSON schema when the run is triggered: absolute paths, stage names,
positive rank counts, the environment keys, partitions and sbatch options the deployment allows. What
runs -- the repository on the cluster, its Python, the SSH connection -- is deployment configuration
(`CORPUS_DEPLOYMENT`, docs/orchestration.md), not a Param; `prepare` refuses a run that names it, and
checks the `config` overrides against every stage's config before any job is submitted.
"""

from __future__ import annotations

import json
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Param, TaskGroup, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from cli.orchestration.buildsteps import NothingLeft, verify_stage
from cli.orchestration.deployment import Deployment, check_run_conf, path_schema
from cli.orchestration.jobparams import job_params, resolve_job_params
from cli.orchestration.operators import SnapshotOperator, StageJobOperator, buildstep
from cli.orchestration.submit import PROJECT_ROOT, SubmitError, backend_for
from corpus.config import MEMORY_BUDGET, MIN_MEMORY_BUDGET_MB
from corpus.pipeline import PIPELINE

#: where builds go when the run names no `out` (one directory per run id)
BUILD_ROOT = Path(os.environ.get("CORPUS_BUILD_ROOT", PROJECT_ROOT / "builds"))
DEFAULT_BACKEND = os.environ.get("CORPUS_BACKEND", "local")
RETRY_DELAY = timedelta(seconds=float(os.environ.get("CORPUS_RETRY_DELAY_S", "30")))
#: a deployment's own defaults for the Params, e.g. CORPUS_DAG_DEFAULTS='{"backend": "ssh", "ranks": 16}'
DEPLOYMENT_DEFAULTS: dict[str, Any] = json.loads(os.environ.get("CORPUS_DAG_DEFAULTS") or "{}")
#: what runs and with which options a run may ask for (cli/orchestration/deployment.py)
DEPLOYMENT = Deployment.from_env()


def _param(name: str, default: Any, **schema: Any) -> Param:
    return Param(DEPLOYMENT_DEFAULTS.get(name, default), **schema)


PARAMS = {
    "inputs": _param("inputs", [str(PROJECT_ROOT / "sample")], type="array", items=path_schema(), minItems=1,
                    title="Sources",
                    description="WARC / JSONL / text files or directories on the cluster's filesystem (absolute)"),
    "out": _param("out", None, **path_schema(nullable=True), title="Build directory",
                 description=f"absolute, on the cluster's filesystem; empty: {BUILD_ROOT}/<run id>"),
    "config_file": _param("config_file", None, **path_schema(nullable=True), title="Build config (TOML)",
                         description="absolute; filter, dedup, tokenizer and eval-registry settings, a table per "
                                     "stage; empty: defaults"),
    "config": _param("config", {}, type="object", additionalProperties=False, properties={
                        **{stage: {"type": "object"} for stage in PIPELINE}, "alarms": {"type": "object"},
                        "policy": {"type": "object"},
                        MEMORY_BUDGET: {"type": "integer", "minimum": MIN_MEMORY_BUDGET_MB},
                        "seed": {"type": "integer", "minimum": 0}}, title="Config overrides",
                    description='per-stage tables and [policy] (the default version\'s quality policy) merged over the '
                                'config file, e.g. {"policy": {"min_quality": 0.2}}; each is checked against its '
                                "config before any job runs"),
    "seed": _param("seed", 0, type="integer", minimum=0, title="Seed", description="the shuffle seed"),
    "ranks": _param("ranks", 2, type="integer", minimum=1, maximum=4096, title="MPI ranks per stage"),
    "ranks_per_stage": _param("ranks_per_stage", {}, type="object", propertyNames={"enum": list(PIPELINE)},
                             additionalProperties={"type": "integer", "minimum": 1, "maximum": 4096},
                             title="Ranks per stage", description='overrides of "ranks" by stage, e.g. {"minhash_dedup": 8}'),
    **job_params(DEPLOYMENT, _param, DEFAULT_BACKEND),
}
if set(DEPLOYMENT_DEFAULTS) - set(PARAMS):
    raise ValueError(f"CORPUS_DAG_DEFAULTS names unknown params: {sorted(set(DEPLOYMENT_DEFAULTS) - set(PARAMS))}")


def resolve_build(p: dict[str, Any], run_id: str, deployment: Deployment) -> dict[str, Any]:
    """What every task of the run works from: the run's Params within the deployment's bounds (the
    Params were schema-checked at trigger; the deployment may have changed since, so check again)."""
    if not PIPELINE:
        raise SubmitError("no stages are installed (corpus.pipeline.PIPELINE is empty)")
    return {
        **resolve_job_params(p, deployment), "stages": list(PIPELINE),
        "out": p["out"] or str(BUILD_ROOT / re.sub(r"[^A-Za-z0-9._-]+", "_", run_id)),
        "ranks": p["ranks"], "ranks_per_stage": p["ranks_per_stage"], "seed": p["seed"],
    }


@dag(
    dag_id="build_snapshot",
    schedule=None,
    catchup=False,
    params=PARAMS,
    doc_md=__doc__,
    tags=["corpus"],
    max_active_runs=4,
    default_args={"retries": 2, "retry_delay": RETRY_DELAY},
)
def build_snapshot() -> None:
    @task
    def prepare() -> dict[str, Any]:
        """Resolve the run's parameters, check the inputs and write the build config."""
        ctx = get_current_context()
        check_run_conf(ctx["dag_run"].conf or {}, PARAMS)
        build = resolve_build(ctx["params"], ctx["run_id"], DEPLOYMENT)
        p = ctx["params"]
        args = ["prepare", f"--out={build['out']}", f"--seed={p['seed']}", f"--overrides={json.dumps(p['config'])}",
                "--input", *p["inputs"]]
        if p["config_file"]:
            args.append(f"--config={p['config_file']}")
        prepared = buildstep(build, *args)
        build.update(inputs=prepared["inputs"], build_config=prepared["build_config"])
        return build

    @task
    def verify(build: dict[str, Any], stage: str) -> dict[str, Any]:
        """The stage's manifest holds up; its digest goes on to the next stage and the snapshot."""
        backend = backend_for(build["backend"], build["conn_id"])
        i = build["stages"].index(stage)
        manifest = json.loads(backend.read_text(f"{build['out']}/stages/{stage}/manifest.json"))
        previous = None
        if i > 0:
            previous = json.loads(backend.read_text(f"{build['out']}/stages/{build['stages'][i - 1]}/manifest.json"))
        try:
            result = verify_stage(stage, manifest, previous, build["inputs"])
        except NothingLeft as e:  # the later stages would only write an empty snapshot
            raise AirflowFailException(str(e)) from e
        t = result["totals"]
        print(f"stage {stage}: manifest {result['manifest_digest']}, {result['shards']} shards, "
              f"{t['in']} in / {t['out']} out, filtered {t['filtered']}, quarantined {t['quarantined']}")
        return result

    build = prepare()
    upstream: Any = build
    verified = []
    for stage in PIPELINE:
        with TaskGroup(group_id=stage, tooltip=f"sbatch/{stage}.sbatch: submit, wait, verify"):
            job = StageJobOperator(task_id="submit", stage=stage, build=build)
            checked = verify.override(task_id="verify")(build, stage)
            job >> checked
        upstream >> job
        upstream = checked
        verified.append(checked)
    done = SnapshotOperator(task_id="snapshot", build=build, verified=verified)
    upstream >> done


build_snapshot()
