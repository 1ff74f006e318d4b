"""# build_snapshot

Builds a corpus snapshot: every installed stage of `runtime.build.PIPELINE`, in order, each as a
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

`prepare` writes the build config (the config file, the `config` tables, the seed) and starts the
build's dedup index; `snapshot` assembles the snapshot manifest and the report, commits the build's
index generation (which makes the build a base for `ingest_crawl`), puts the `snapshot_id` in XCom and
emits an event on the `corpus://versions` asset with the `snapshot_id` in its extra. The same inputs,
config and seed give the same snapshot id as `corpus build`. The machinery is shared with `ingest_crawl`
(orchestration/snapshotdag.py).

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

from typing import Any

from airflow.sdk import dag, get_current_context, task

from orchestration.deployment import Deployment, path_schema
from orchestration.snapshotdag import (
    build_dag_args,
    build_param,
    build_params,
    prepare_build,
    resolve_build,
    stages_and_snapshot,
)
from orchestration.submit import PROJECT_ROOT

#: what the Params tests use: the deployment, the Params and how a run's are resolved
__all__ = ["DEPLOYMENT", "PARAMS", "resolve_build"]

#: what runs and with which options a run may ask for (orchestration/deployment.py)
DEPLOYMENT = Deployment.from_env()
PARAMS = build_params(DEPLOYMENT, {
    "inputs": build_param("inputs", [str(PROJECT_ROOT / "sample")], type="array", items=path_schema(), minItems=1,
                          title="Sources",
                          description="WARC / JSONL / text files or directories on the cluster's filesystem (absolute)"),
})


@dag(dag_id="build_snapshot", schedule=None, doc_md=__doc__, max_active_runs=4, **build_dag_args(PARAMS))
def build_snapshot() -> None:
    @task
    def prepare() -> dict[str, Any]:
        """Resolve the run's parameters, check the inputs, write the build config and start the index."""
        return prepare_build(PARAMS, DEPLOYMENT, get_current_context()["params"]["inputs"], [])

    stages_and_snapshot(prepare())


build_snapshot()
