"""# contamination_check

Checks benchmarks published after a snapshot was built against that snapshot's per-document 8-gram
index (`corpus contamination --benchmark`), by the rule the build flagged documents with: an item is
contaminated when one of its passages has a run of `min_run` consecutive word 8-grams (all of them, for
a shorter passage) in one stored document. The corpus is not read again. Runs on the cluster's side
through the same backends as `build_snapshot` (the snapshot lives on the cluster's filesystem).

* **check** runs the check and puts the per-benchmark result in XCom (items, checked, flagged, rate,
  longest run, flagged ids);
* **judge** logs the table and fails the run if a benchmark's flagged rate is above `max_rate`, so a
  contaminated benchmark shows up red in the UI.

The Params are data (paths are absolute, the snapshot is passed as `--snapshot=VALUE` so it is never an
option); the repository on the cluster, its Python and the SSH connection are deployment configuration
(`CORPUS_DEPLOYMENT`, see docs/orchestration.md), and a run that names them is refused.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

from airflow.sdk import Param, dag, get_current_context, task

from cli.orchestration.deployment import Deployment, check_run_conf, path_schema
from cli.orchestration.submit import BACKENDS, backend_for

DEPLOYMENT = Deployment.from_env()
PARAMS = {
    "snapshot": Param("", type="string", minLength=1, pattern=r"^(sha256:[0-9a-f]+|[0-9a-f]+|/[^\n\r\x00]*)$",
                      title="Snapshot",
                      description="snapshot id (sha256:... or a prefix), or an absolute snapshot / build directory"),
    "snapshots_root": Param(None, **path_schema(nullable=True), title="Where snapshots live",
                            description="for a snapshot id; empty: $CORPUS_SNAPSHOTS on the cluster"),
    "benchmarks": Param([], type="array", items=path_schema(), minItems=1, title="Benchmarks",
                        description='benchmark JSONL files ({"id", "text"} per line) on the cluster (absolute)'),
    "min_run": Param(0, type="integer", minimum=0, title="Consecutive 8-grams that count",
                     description="consecutive word 8-grams of a passage, in one document, that make an item "
                                 "contaminated; 0: the snapshot's own setting (the build's min_run, default 15)"),
    "max_rate": Param(0.0, type="number", minimum=0, maximum=1, title="Largest tolerated flagged rate"),
    "backend": Param(os.environ.get("CORPUS_BACKEND", "local"), type="string", enum=list(BACKENDS)),
}


RETRY_DELAY = timedelta(seconds=float(os.environ.get("CORPUS_RETRY_DELAY_S", "30")))


@dag(dag_id="contamination_check", schedule=None, catchup=False, params=PARAMS, doc_md=__doc__,
     tags=["corpus"], default_args={"retries": 1, "retry_delay": RETRY_DELAY})
def contamination_check() -> None:
    @task
    def check() -> dict[str, Any]:
        ctx = get_current_context()
        check_run_conf(ctx["dag_run"].conf or {}, PARAMS)
        p = ctx["params"]
        backend = backend_for(p["backend"], DEPLOYMENT.ssh_conn_id if p["backend"] == "ssh" else "")
        argv = [DEPLOYMENT.interpreter, "-m", "cli", "contamination", f"--snapshot={p['snapshot']}", "--json"]
        if p["snapshots_root"]:
            argv.append(f"--root={p['snapshots_root']}")
        if p["min_run"]:
            argv.append(f"--min-run={p['min_run']}")
        argv += [f"--benchmark={b}" for b in p["benchmarks"]]
        return json.loads(backend.check(argv, timeout=3600))

    @task(retries=0)  # a verdict on the same numbers is the same verdict: nothing to retry
    def judge(result: dict[str, Any]) -> dict[str, Any]:
        max_rate = float(get_current_context()["params"]["max_rate"])
        print(f"snapshot {result['snapshot_id']}: {result['index_rows']} (8-gram, document) records, "
              f"rule {result['rule']}, run >= {result['min_run']} 8-grams")
        over = []
        for r in result["benchmarks"]:
            print(f"  {r['benchmark']}: {r['flagged_items']} of {r['checked_items']} checked items flagged "
                  f"({100 * r['rate']:.2f}%), longest run {r['longest_run']}")
            if r["rate"] > max_rate:
                over.append(f"{r['benchmark']} ({100 * r['rate']:.2f}%)")
        if over:
            raise ValueError(f"contaminated beyond {100 * max_rate:.2f}%: {', '.join(over)}")
        return {r["benchmark"]: r["rate"] for r in result["benchmarks"]}

    judge(check())


contamination_check()
