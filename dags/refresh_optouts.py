"""# refresh_optouts

Re-reads a host opt-out list (`exclude_hosts_file` of the selection `selection`) and/or a robots.txt
snapshot (`exclude_robots`) and makes a new version of a build only when the answer changed: a version's
id covers the hosts read (and the robots.txt rule that excluded each), not the files' paths.
**plan** works out on the cluster's side the id the version would have (`corpus version --dry-run`) and
stops the run, green, when `versions_root` already holds it; **version** writes it into
`versions_root/<first 16 hex of the id>`; **report** checks it has the planned id. Daily where the
deployment sets `CORPUS_OPTOUT_DEFAULTS`, else when triggered. Params are data; what runs is deployment
configuration (`CORPUS_DEPLOYMENT`). See docs/orchestration.md.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task

from orchestration.deployment import Deployment, check_run_conf, hosts_roots_env, path_schema
from orchestration.jobparams import job_params, param, resolve_job_params
from orchestration.operators import VersionJobOperator
from orchestration.submit import SubmitError, backend_for

DEPLOYMENT = Deployment.from_env()
RETRY_DELAY = timedelta(seconds=float(os.environ.get("CORPUS_RETRY_DELAY_S", "30")))
#: the nightly run's defaults, e.g. CORPUS_OPTOUT_DEFAULTS='{"build": "/lustre/b", "selection": "/lustre/sel.toml",
#: "versions_root": "/lustre/versions"}' (a scheduled run has no one to fill in its Params)
DEFAULTS: dict[str, Any] = json.loads(os.environ.get("CORPUS_OPTOUT_DEFAULTS") or "{}")


def _param(name: str, default: Any, **schema: Any) -> Param:
    return param(DEFAULTS.get(name, default), **schema)


PARAMS = {
    "build": _param(
        "build",
        None,
        **path_schema(nullable=True),
        title="Build",
        description="the build on the cluster's filesystem, absolute",
    ),
    "selection": _param(
        "selection",
        None,
        **path_schema(nullable=True),
        title="Selection file (TOML)",
        description="absolute; it names the opt-out list with exclude_hosts_file",
    ),
    "versions_root": _param(
        "versions_root",
        None,
        **path_schema(nullable=True),
        title="Where versions go",
        description="absolute; each version in <first 16 hex of its id>/",
    ),
    **job_params(DEPLOYMENT, _param, os.environ.get("CORPUS_BACKEND", "local"), time_limit="01:00:00"),
}
if set(DEFAULTS) - set(PARAMS):
    raise ValueError(f"CORPUS_OPTOUT_DEFAULTS names unknown params: {sorted(set(DEFAULTS) - set(PARAMS))}")
REQUIRED = ("build", "selection", "versions_root")
#: nightly only where the deployment says what to refresh; elsewhere the DAG runs when triggered
SCHEDULE = "@daily" if all(DEFAULTS.get(k) for k in REQUIRED) else None


def version_dir(versions_root: str, snapshot_id: str) -> str:
    return f"{versions_root.rstrip('/')}/{snapshot_id.removeprefix('sha256:')[:16]}"


@dag(
    dag_id="refresh_optouts",
    schedule=SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params=PARAMS,
    doc_md=__doc__,
    tags=["corpus"],
    default_args={"retries": 2, "retry_delay": RETRY_DELAY},
)
def refresh_optouts() -> None:
    @task.short_circuit
    def plan() -> dict[str, Any] | None:
        """The version the list gives today, or None (stop) when it exists already."""
        ctx = get_current_context()
        check_run_conf(ctx["dag_run"].conf or {}, PARAMS)
        p = ctx["params"]
        if missing := [k for k in REQUIRED if not p[k]]:
            raise ValueError(
                f"Params {missing} are needed (trigger with them, or set CORPUS_OPTOUT_DEFAULTS)"
            )
        step = resolve_job_params(p, DEPLOYMENT)
        step["env"] = {**step["env"], **hosts_roots_env(DEPLOYMENT)}
        backend = backend_for(step["backend"], step["conn_id"])
        argv = [
            step["python"],
            "-m",
            "cli",
            "version",
            p["build"],
            f"--select={p['selection']}",
            "--dry-run",
            "--json",
        ]
        planned = json.loads(backend.check(argv, env=step["env"], timeout=3600))["snapshot_id"]
        out = version_dir(p["versions_root"], planned)
        try:
            existing = json.loads(backend.read_text(f"{out}/manifest.json"))["snapshot_id"]
        except (SubmitError, OSError, ValueError, KeyError):  # no version there yet, or an unreadable one
            existing = None
        if existing == planned:
            print(f"the opt-out list is unchanged: version {planned} exists at {out}; nothing to do")
            return None
        print(f"the opt-out list changed: making version {planned} at {out}")
        return {
            **step,
            "build": p["build"],
            "selection": p["selection"],
            "selection_toml": "",
            "out": out,
            "log_dir": f"{out}.logs",
            "planned": planned,
        }

    @task
    def report(step: dict[str, Any]) -> dict[str, Any]:
        backend = backend_for(step["backend"], step["conn_id"])
        made = json.loads(backend.read_text(f"{step['out']}/manifest.json"))["snapshot_id"]
        if made != step["planned"]:
            raise ValueError(
                f"the version written at {step['out']} is {made}, the plan was {step['planned']}: "
                "the build or the list changed during the run; the next run makes it again"
            )
        print(f"snapshot_id {made}")
        get_current_context()["ti"].xcom_push(key="snapshot_id", value=made)
        return {"snapshot_id": made, "out": step["out"]}

    step = plan()
    job = VersionJobOperator(task_id="version", step=step)
    step >> job >> report(step)


refresh_optouts()
