"""What ``build_snapshot`` and ``ingest_crawl`` share: the build Params, the run's resolved build, the
``prepare`` step (build config and dedup indexes, against a base for an incremental build) and the task
graph after it (per stage: submit, deferred wait, verify; then the snapshot, which emits the version's
asset event). One place, so a full build and an incremental one run the same machinery and differ only in
their sources and their base (docs/orchestration.md).

The environment (``CORPUS_BUILD_ROOT``, ``CORPUS_DAG_DEFAULTS``, ``CORPUS_BACKEND``,
``CORPUS_RETRY_DELAY_S``) is read when a DAG file is parsed, each parse, not once per process: a DAG
reflects the deployment it is parsed under."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Param, TaskGroup, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from corpus.model.stages import PIPELINE
from orchestration.config_reference import OVERRIDE_SCHEMA
from orchestration.deployment import Deployment, check_run_conf, path_schema
from orchestration.jobparams import job_params, param, resolve_job_params
from orchestration.operators import SnapshotOperator, StageJobOperator, buildstep
from orchestration.rundir import run_dir_name
from orchestration.submit import PROJECT_ROOT, SubmitError, backend_for


def build_root() -> Path:
    """Where builds go when the run names no `out` (one directory per run id); an incremental build's
    default base is the latest complete build here (``CORPUS_BUILD_ROOT``)."""
    return Path(os.environ.get("CORPUS_BUILD_ROOT", PROJECT_ROOT / "builds"))


def build_dag_args(params: dict[str, Param]) -> dict[str, Any]:
    """The ``@dag`` arguments every build DAG takes: its Params, no catch-up, two retries per task (a
    stage resumes from its checkpoint) after ``CORPUS_RETRY_DELAY_S`` seconds (tests shorten it)."""
    return {
        "params": params,
        "catchup": False,
        "tags": ["corpus"],
        "default_args": {
            "retries": 2,
            "retry_delay": timedelta(seconds=float(os.environ.get("CORPUS_RETRY_DELAY_S", "30"))),
        },
    }


def build_param(name: str, default: Any, **schema: Any) -> Param:
    """A build Param: its default is the deployment's where it gives one (``CORPUS_DAG_DEFAULTS``, e.g.
    '{"backend": "ssh", "ranks": 16}')."""
    return param(json.loads(os.environ.get("CORPUS_DAG_DEFAULTS") or "{}").get(name, default), **schema)


def build_params(deployment: Deployment, sources: dict[str, Param]) -> dict[str, Param]:
    """A build DAG's Params: its ``sources`` (first in the trigger form), then what every build takes,
    within what ``deployment`` allows."""
    params = {
        **sources,
        "out": build_param(
            "out",
            None,
            **path_schema(nullable=True),
            title="Build directory",
            description=f"absolute, on the cluster's filesystem; empty: {build_root()}/<run id>",
        ),
        "config_file": build_param(
            "config_file",
            None,
            **path_schema(nullable=True),
            title="Build config (TOML)",
            description="absolute; filter, dedup, tokenizer and eval-registry settings, a table "
            "per stage; empty: defaults",
        ),
        "config": build_param(
            "config",
            {},
            **json.loads(OVERRIDE_SCHEMA.read_text()),
            title="Config overrides",
            description="per-stage tables, [policy] (the default version's quality policy), [alarms], "
            'seed and memory_budget_mb merged over the config file, e.g. {"policy": {"min_quality": 0.2}}; '
            "a misspelled key or a wrong type is refused here, each table is checked against its config "
            "before any job runs (docs/config.md)",
        ),
        "seed": build_param(
            "seed", 0, type="integer", minimum=0, title="Seed", description="the shuffle seed"
        ),
        "ranks": build_param(
            "ranks", 2, type="integer", minimum=1, maximum=4096, title="MPI ranks per stage"
        ),
        "ranks_per_stage": build_param(
            "ranks_per_stage",
            {},
            type="object",
            propertyNames={"enum": list(PIPELINE)},
            additionalProperties={"type": "integer", "minimum": 1, "maximum": 4096},
            title="Ranks per stage",
            description='overrides of "ranks" by stage, e.g. {"minhash_dedup": 8}',
        ),
        **job_params(deployment, build_param, os.environ.get("CORPUS_BACKEND", "local")),
    }
    unknown = set(json.loads(os.environ.get("CORPUS_DAG_DEFAULTS") or "{}")) - set(params)
    if unknown:
        raise ValueError(f"CORPUS_DAG_DEFAULTS names unknown params: {sorted(unknown)}")
    return params


def resolve_build(p: dict[str, Any], run_id: str, deployment: Deployment) -> dict[str, Any]:
    """What every task of the run works from: the run's Params within the deployment's bounds (the
    Params were schema-checked at trigger; the deployment may have changed since, so check again)."""
    if not PIPELINE:
        raise SubmitError("no stages are installed (corpus.model.stages.PIPELINE is empty)")
    return {
        **resolve_job_params(p, deployment),
        "stages": list(PIPELINE),
        "out": p["out"] or str(build_root() / run_dir_name(run_id)),
        "ranks": p["ranks"],
        "ranks_per_stage": p["ranks_per_stage"],
        "seed": p["seed"],
        "config_file": p["config_file"],
    }


def prepare_build(
    params: dict[str, Param], deployment: Deployment, inputs: list[str], base: list[str]
) -> dict[str, Any]:
    """The ``prepare`` task's work: check the run conf, resolve the build, write its config and start
    its dedup indexes on the cluster's side (``buildsteps prepare``). ``base`` is the extra arguments
    naming the base (``["--base=DIR"]``, ``["--latest-base=ROOT"]``), empty for a full build; the
    result records the inputs left to process and the base found."""
    ctx = get_current_context()
    check_run_conf(ctx["dag_run"].conf or {}, params)
    build = resolve_build(ctx["params"], ctx["run_id"], deployment)
    p = ctx["params"]
    args = [
        "prepare",
        f"--out={build['out']}",
        f"--seed={p['seed']}",
        f"--overrides={json.dumps(p['config'])}",
        *base,
        "--input",
        *inputs,
    ]
    if p["config_file"]:
        args.append(f"--config={p['config_file']}")
    prepared = buildstep(build, *args)
    build.update(inputs=prepared["inputs"], build_config=prepared["build_config"], base=prepared["base"])
    return build


@task
def verify(build: dict[str, Any], stage: str) -> dict[str, Any]:
    """The stage's manifest holds up; its digest goes on to the next stage and the snapshot."""
    # imported where the task runs, not at the top: buildsteps brings the build's modules (numba, DuckDB,
    # pyarrow; ~1 s of CPU), which every parse of a DAG file (each task's start, the DAG processor's
    # rounds) would otherwise import for nothing
    from orchestration.buildsteps import NothingLeft, verify_stage

    backend = backend_for(build["backend"], build["conn_id"])
    i = build["stages"].index(stage)
    manifest = json.loads(backend.read_text(f"{build['out']}/stages/{stage}/manifest.json"))
    previous = None
    if i > 0:
        previous = json.loads(
            backend.read_text(f"{build['out']}/stages/{build['stages'][i - 1]}/manifest.json")
        )
    try:
        result = verify_stage(stage, manifest, previous, build["inputs"])
    except NothingLeft as e:  # the later stages would only write an empty snapshot
        raise AirflowFailException(str(e)) from e
    t = result["totals"]
    print(
        f"stage {stage}: manifest {result['manifest_digest']}, {result['shards']} shards, "
        f"{t['in']} in / {t['out']} out, filtered {t['filtered']}, quarantined {t['quarantined']}"
    )
    return result


def stages_and_snapshot(build: Any) -> SnapshotOperator:
    """After ``prepare`` (whose output is ``build``): a task group per installed stage (submit with its
    deferred wait, verify), in order, then the snapshot, which emits the version's VERSIONS event."""
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
    return done
