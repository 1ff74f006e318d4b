"""# build_snapshot

Builds a corpus snapshot: every installed stage of `runtime.build.PIPELINE`, in order, each as a job
(`sbatch sbatch/<stage>.sbatch` on SLURM, or the same script under `mpiexec`). Per stage, **submit**
submits the job and defers (no worker slot held while it runs; a retry resumes from the checkpoint)
and **verify** checks that the manifest's counts reconcile and that it was built from the previous
stage's outputs. `prepare` writes the build config and starts the dedup index; `snapshot` assembles
the snapshot, commits the index generation and emits an event on `corpus://versions`. The same inputs,
config and seed give the same snapshot id as `corpus build`. Params are data checked by JSON schema;
what runs is deployment configuration (`CORPUS_DEPLOYMENT`). See docs/orchestration.md.
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
PARAMS = build_params(
    DEPLOYMENT,
    {
        "inputs": build_param(
            "inputs",
            [str(PROJECT_ROOT / "sample")],
            type="array",
            items=path_schema(),
            minItems=1,
            title="Sources",
            description="WARC / JSONL / text files or directories on the cluster's filesystem (absolute)",
        ),
    },
)


@dag(dag_id="build_snapshot", schedule=None, doc_md=__doc__, max_active_runs=4, **build_dag_args(PARAMS))
def build_snapshot() -> None:
    @task
    def prepare() -> dict[str, Any]:
        """Resolve the run's parameters, check the inputs, write the build config and start the index."""
        return prepare_build(PARAMS, DEPLOYMENT, get_current_context()["params"]["inputs"], [])

    stages_and_snapshot(prepare())


build_snapshot()
