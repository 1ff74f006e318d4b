"""# build_version

Makes a **version** of a finished build: a selection of its stored documents from the build's
metadata table alone, in minutes; no stage runs again (docs/versions.md). **prepare** checks the
Params and the selection (`selection`, an absolute TOML path, or `selection_toml`, the TOML itself:
exactly one) before any job is submitted; **version** runs the version step (`hpc_jobs/version/`) as
a job, submitted and waited for like a stage of `build_snapshot`; **report** puts the version's
`snapshot_id` in XCom and emits an event on the `corpus://versions` asset. What runs is deployment
configuration (`CORPUS_DEPLOYMENT`), not Params. See docs/orchestration.md.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task

from corpus.select.selection import parse_inline
from orchestration.assets import VERSIONS, emit_version
from orchestration.deployment import Deployment, check_run_conf, hosts_roots_env, path_schema
from orchestration.jobparams import job_params, param, resolve_job_params
from orchestration.operators import VersionJobOperator
from orchestration.rundir import run_dir_name
from orchestration.submit import backend_for

DEPLOYMENT = Deployment.from_env()
RETRY_DELAY = timedelta(seconds=float(os.environ.get("CORPUS_RETRY_DELAY_S", "30")))


def _param(_: str, default: Any, **schema: Any) -> Param:
    return param(default, **schema)


PARAMS = {
    "build": param(
        "",
        **path_schema(),
        title="Build",
        description="the build (or a version of it) on the cluster's filesystem, absolute",
    ),
    "selection": param(
        None,
        **path_schema(nullable=True),
        title="Selection file (TOML)",
        description="absolute, on the cluster's filesystem; or give selection_toml",
    ),
    "selection_toml": param(
        "",
        type="string",
        maxLength=200_000,
        title="Selection (TOML text)",
        description="e.g. min_scores = { quality = 0.2 }; or give a selection file",
    ),
    "out": param(
        None,
        **path_schema(nullable=True),
        title="Version directory",
        description="absolute; empty: BUILD/versions/<run id>",
    ),
    **job_params(DEPLOYMENT, _param, os.environ.get("CORPUS_BACKEND", "local"), time_limit="01:00:00"),
}


def resolve_step(p: dict[str, Any], run_id: str, deployment: Deployment) -> dict[str, Any]:
    """What the version job is given: the run's Params within the deployment's bounds."""
    if bool(p["selection"]) == bool(p["selection_toml"].strip()):
        raise ValueError(
            "give exactly one of the Params 'selection' (a file) and 'selection_toml' (the TOML)"
        )
    if p["selection_toml"].strip():
        # a malformed selection fails here, naming the key; its opt-out list file is on the cluster:
        # the job reads it, under the deployment's hosts_roots
        parse_inline(p["selection_toml"], read_files=False)
    out = p["out"] or f"{p['build'].rstrip('/')}/versions/{run_dir_name(run_id)}"
    job = resolve_job_params(p, deployment)
    return {
        **job,
        "env": {**job["env"], **hosts_roots_env(deployment)},
        "build": p["build"],
        "selection": p["selection"],
        "selection_toml": p["selection_toml"],
        "out": out,
        "log_dir": f"{out}.logs",
    }


def read_version_manifest(step: dict[str, Any]) -> dict[str, Any]:
    backend = backend_for(step["backend"], step["conn_id"])
    return json.loads(backend.read_text(f"{step['out']}/manifest.json"))


@dag(
    dag_id="build_version",
    schedule=None,
    catchup=False,
    params=PARAMS,
    doc_md=__doc__,
    tags=["corpus"],
    default_args={"retries": 2, "retry_delay": RETRY_DELAY},
)
def build_version() -> None:
    @task
    def prepare() -> dict[str, Any]:
        ctx = get_current_context()
        check_run_conf(ctx["dag_run"].conf or {}, PARAMS)
        return resolve_step(ctx["params"], ctx["run_id"], DEPLOYMENT)

    @task(outlets=[VERSIONS])
    def report(step: dict[str, Any]) -> dict[str, Any]:
        m = read_version_manifest(step)
        kept, tokens = m["selected_docs"], m["selected_tokens"]
        print(
            f"version {step['out']}: {kept:,} documents, {tokens:,} tokens selected\nsnapshot_id {m['snapshot_id']}"
        )
        ctx = get_current_context()
        ctx["ti"].xcom_push(key="snapshot_id", value=m["snapshot_id"])
        emit_version(ctx, m["snapshot_id"], step["build"], step["out"])
        return {"snapshot_id": m["snapshot_id"], "out": step["out"], "documents": kept, "tokens": tokens}

    step = prepare()
    job = VersionJobOperator(task_id="version", step=step)
    step >> job >> report(step)


build_version()
