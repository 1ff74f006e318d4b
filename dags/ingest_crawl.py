"""# ingest_crawl

Builds a newly landed crawl **incrementally** against a base build (`corpus build --base BASE --input
NEW... --out DIR`, docs/incremental.md): only the files the base has not ingested are processed, the
dedup indexes start as forks of the base's, and the default version selects over both builds' shards.
Scheduled on the `corpus://crawls/landed` asset (the event's extra names the new files) or triggered by
hand with `crawl`. The base is the Param `base`, else the latest complete build under
`CORPUS_BUILD_ROOT`; one run at a time, so each landing builds on the one before. The tasks are
`build_snapshot`'s (orchestration/snapshotdag.py); the same inputs, base, config and seed give the same
snapshot id as `corpus build --base`. See docs/orchestration.md ("The ingest_crawl DAG and the assets").
"""

from __future__ import annotations

from typing import Any

import jsonschema
from airflow.sdk import dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from orchestration.assets import CRAWLS_LANDED
from orchestration.deployment import Deployment, path_schema
from orchestration.snapshotdag import (
    build_dag_args,
    build_param,
    build_params,
    build_root,
    prepare_build,
    stages_and_snapshot,
)

#: what runs and with which options a run may ask for (orchestration/deployment.py)
DEPLOYMENT = Deployment.from_env()
PARAMS = build_params(
    DEPLOYMENT,
    {
        "crawl": build_param(
            "crawl",
            [],
            type="array",
            items=path_schema(),
            title="New crawl",
            description="the crawl's WARC / JSONL / text files or directories (absolute); empty: the files "
            "the triggering corpus://crawls/landed events name",
        ),
        "base": build_param(
            "base",
            None,
            **path_schema(nullable=True),
            title="Base build",
            description=f"a complete build, absolute; empty: the latest complete build under {build_root()}",
        ),
    },
)

#: an event's ``paths``: what a crawl landing may name (the schema of the ``crawl`` Param)
LANDED_PATHS = {"type": "array", "items": path_schema(), "minItems": 1}


def landed_paths(events: Any) -> list[str]:
    """The files the triggering crawl-landing events name, in event order, each once. An event's extra is
    data from whatever landed the crawl: it is checked like the ``crawl`` Param (absolute paths) before
    any of it reaches a command."""
    paths: list[str] = []
    for event in events.get(CRAWLS_LANDED, []):
        try:
            jsonschema.validate((event.extra or {}).get("paths"), LANDED_PATHS)
        except jsonschema.ValidationError as e:
            raise AirflowFailException(
                f"a {CRAWLS_LANDED.uri} event's extra 'paths' is not a list of absolute paths: {e.message}"
            ) from None
        paths += [p for p in event.extra["paths"] if p not in paths]
    return paths


@dag(
    dag_id="ingest_crawl", schedule=CRAWLS_LANDED, doc_md=__doc__, max_active_runs=1, **build_dag_args(PARAMS)
)
def ingest_crawl() -> None:
    @task
    def prepare() -> dict[str, Any]:
        """The crawl (Param, or the landing events'), the base (Param, or the latest complete build), then
        build_snapshot's prepare against that base."""
        ctx = get_current_context()
        p = ctx["params"]
        crawl = p["crawl"] or landed_paths(ctx["triggering_asset_events"])
        if not crawl:
            raise AirflowFailException(
                f"no crawl to ingest: give the Param 'crawl', or trigger the run with a "
                f"{CRAWLS_LANDED.uri} event whose extra names the files ('paths')"
            )
        base = [f"--base={p['base']}"] if p["base"] else [f"--latest-base={build_root()}"]
        build = prepare_build(PARAMS, DEPLOYMENT, crawl, base)
        print(f"ingest_crawl: {len(build['inputs'])} new input(s) against base {build['base']}")
        return build

    stages_and_snapshot(prepare())


ingest_crawl()
