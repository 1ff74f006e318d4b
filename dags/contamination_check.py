"""# contamination_check

Checks benchmarks published after a snapshot was built against that snapshot's per-document 8-gram
index (`corpus contamination --benchmark`), by the build's own rule; the corpus is not read again.
Scheduled on the `corpus://versions` asset (each event's extra is checked like a Param, and the version
found at its path must be the one announced) or triggered by hand with `snapshot`. The benchmarks are
the Param `benchmarks` (default: the deployment's `CORPUS_CONTAMINATION_BENCHMARKS`). **check** runs
the check of each version and puts the per-benchmark results in XCom; **judge** fails the run if a
benchmark's flagged rate is above `max_rate`. Params are data; what runs is deployment configuration
(`CORPUS_DEPLOYMENT`). See docs/orchestration.md ("The contamination_check DAG").
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

from airflow.sdk import dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from orchestration.assets import VERSIONS, announced_versions
from orchestration.deployment import Deployment, check_run_conf, path_schema
from orchestration.jobparams import param
from orchestration.submit import BACKENDS, backend_for

DEPLOYMENT = Deployment.from_env()
#: the benchmarks a run triggered by a new version checks (the Param's default): deployment configuration
BENCHMARKS = json.loads(os.environ.get("CORPUS_CONTAMINATION_BENCHMARKS") or "[]")
PARAMS = {
    "snapshot": param(
        "",
        type="string",
        pattern=r"^(|sha256:[0-9a-f]+|[0-9a-f]+|/[^\n\r\x00]*)$(?!\n)",
        title="Snapshot",
        description="snapshot id (sha256:... or a prefix), or an absolute snapshot / build / "
        "version directory; empty: the versions the triggering corpus://versions "
        "events name",
    ),
    "snapshots_root": param(
        None,
        **path_schema(nullable=True),
        title="Where snapshots live",
        description="for a snapshot id; empty: $CORPUS_SNAPSHOTS on the cluster",
    ),
    "benchmarks": param(
        BENCHMARKS,
        type="array",
        items=path_schema(),
        title="Benchmarks",
        description='benchmark JSONL files ({"id", "text"} per line) on the cluster (absolute); '
        "default: the deployment's CORPUS_CONTAMINATION_BENCHMARKS",
    ),
    "min_run": param(
        0,
        type="integer",
        minimum=0,
        title="Consecutive 8-grams that count",
        description="consecutive word 8-grams of a passage, in one document, that make an item "
        "contaminated; 0: the snapshot's own setting (the build's min_run, default 15)",
    ),
    "max_rate": param(0.0, type="number", minimum=0, maximum=1, title="Largest tolerated flagged rate"),
    "backend": param(os.environ.get("CORPUS_BACKEND", "local"), type="string", enum=list(BACKENDS)),
}


RETRY_DELAY = timedelta(seconds=float(os.environ.get("CORPUS_RETRY_DELAY_S", "30")))


def versions_to_check(p: dict[str, Any], events: Any) -> list[dict[str, Any]]:
    """What a run checks: the Param ``snapshot`` when given (a run by hand), else every version the
    triggering ``corpus://versions`` events announce (:func:`announced_versions`: checked like Params)."""
    if p["snapshot"]:
        return [{"snapshot": p["snapshot"], "snapshot_id": None}]
    try:
        announced = announced_versions(events)
    except ValueError as e:
        raise AirflowFailException(str(e)) from None
    if not announced:
        raise AirflowFailException(
            f"no snapshot to check: give the Param 'snapshot', or trigger the run with a {VERSIONS.uri} event"
        )
    return [{"snapshot": v["version"], "snapshot_id": v["snapshot_id"]} for v in announced]


@dag(
    dag_id="contamination_check",
    schedule=VERSIONS,
    catchup=False,
    params=PARAMS,
    doc_md=__doc__,
    tags=["corpus"],
    default_args={"retries": 1, "retry_delay": RETRY_DELAY},
)
def contamination_check() -> None:
    @task
    def check() -> list[dict[str, Any]]:
        ctx = get_current_context()
        check_run_conf(ctx["dag_run"].conf or {}, PARAMS)
        p = ctx["params"]
        if not p["benchmarks"]:
            raise AirflowFailException(
                "no benchmarks to check: give the Param 'benchmarks' (or set CORPUS_CONTAMINATION_BENCHMARKS "
                "in the deployment, the default of runs a new version triggers)"
            )
        backend = backend_for(p["backend"], DEPLOYMENT.ssh_conn_id if p["backend"] == "ssh" else "")
        results = []
        for target in versions_to_check(p, ctx["triggering_asset_events"]):
            if target["snapshot_id"] is not None:  # the version at the path is the one announced
                found = json.loads(backend.read_text(f"{target['snapshot']}/manifest.json"))["snapshot_id"]
                if found != target["snapshot_id"]:
                    raise AirflowFailException(
                        f"{target['snapshot']} holds version {found}, the "
                        f"{VERSIONS.uri} event announced {target['snapshot_id']}"
                    )
            argv = [
                DEPLOYMENT.interpreter,
                "-m",
                "cli",
                "contamination",
                f"--snapshot={target['snapshot']}",
                "--json",
            ]
            if p["snapshots_root"]:
                argv.append(f"--root={p['snapshots_root']}")
            if p["min_run"]:
                argv.append(f"--min-run={p['min_run']}")
            argv += [f"--benchmark={b}" for b in p["benchmarks"]]
            results.append(
                {
                    "snapshot": target["snapshot"],
                    "version_id": target["snapshot_id"],
                    **json.loads(backend.check(argv, timeout=3600)),
                }
            )
        return results

    @task(retries=0)  # a verdict on the same numbers is the same verdict: nothing to retry
    def judge(results: list[dict[str, Any]]) -> dict[str, Any]:
        max_rate = float(get_current_context()["params"]["max_rate"])
        over, rates = [], {}
        for result in results:
            print(
                f"snapshot {result['snapshot']} (version {result['version_id'] or 'as named'}, candidates "
                f"{result['snapshot_id']}): {result['index_rows']} (8-gram, document) records, "
                f"rule {result['rule']}, run >= {result['min_run']} 8-grams"
            )
            for r in result["benchmarks"]:
                print(
                    f"  {r['benchmark']}: {r['flagged_items']} of {r['checked_items']} checked items flagged "
                    f"({100 * r['rate']:.2f}%), longest run {r['longest_run']}"
                )
                if r["rate"] > max_rate:
                    over.append(f"{r['benchmark']} ({100 * r['rate']:.2f}%)")
                rates[f"{result['snapshot']}:{r['benchmark']}"] = r["rate"]
        if over:
            raise ValueError(f"contaminated beyond {100 * max_rate:.2f}%: {', '.join(over)}")
        return rates

    judge(check())


contamination_check()
