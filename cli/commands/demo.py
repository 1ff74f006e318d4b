"""``corpus demo``: the ``build_snapshot`` DAG end to end with ``airflow dags test`` and the mpiexec
backend: real Airflow, real MPI, no cluster. Airflow's state lives in a temporary directory."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from corpus.model.errors import UserError
from corpus.model.layout import manifest_path, snapshot_dir
from orchestration.submit import PROJECT_ROOT


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="run the build_snapshot DAG in-process (airflow dags test, mpiexec backend)"
    )
    p.add_argument(
        "--input",
        nargs="+",
        type=Path,
        default=[PROJECT_ROOT / "sample"],
        metavar="PATH",
        help="inputs (default: the bundled sample/)",
    )
    p.add_argument("--out", type=Path, default=Path("build/demo"), metavar="DIR", help="build directory")
    p.add_argument("--ranks", type=int, default=2, metavar="N", help="MPI ranks per stage (default 2)")
    p.add_argument("--config", type=Path, default=None, metavar="FILE", help="build config (TOML)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="the build's seed (default 0)")
    p.set_defaults(func=run)


def airflow_env(home: Path) -> dict[str, str]:
    """An Airflow of its own: SQLite under ``home``, this repository's DAGs, no examples."""
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "CORPUS_RETRY_DELAY_S": os.environ.get("CORPUS_RETRY_DELAY_S", "5"),
    }


def run(args: argparse.Namespace) -> int:
    missing = [str(p) for p in args.input if not p.exists()]
    if missing:
        raise UserError(f"input not found: {', '.join(missing)}")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    airflow = str(Path(sys.executable).parent / "airflow")
    conf = {
        "backend": "mpiexec",
        "inputs": [str(p.resolve()) for p in args.input],
        "out": str(out),
        "ranks": args.ranks,
        "seed": args.seed,
        "poll_interval": 1,
        "config_file": str(args.config.resolve()) if args.config else "",
    }
    log_path = out / "airflow-dags-test.log"
    home = Path(tempfile.mkdtemp(prefix="corpus-demo-airflow-"))
    try:
        env = airflow_env(home)
        print(f"airflow: migrating a fresh metadata DB in {home}", file=sys.stderr, flush=True)
        subprocess.run(
            [airflow, "db", "migrate"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        print(f"airflow dags test build_snapshot (log: {log_path})", file=sys.stderr, flush=True)
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [airflow, "dags", "test", "build_snapshot", "-c", json.dumps(conf)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                m = re.search(r"\[DAG TEST\] end task task_id=(\S+)", line)
                if m:
                    print(f"  task {m.group(1)} done", file=sys.stderr, flush=True)
            rc = proc.wait()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    manifest = manifest_path(snapshot_dir(out))
    if rc != 0 or not manifest.exists():
        errors = [ln.rstrip() for ln in log_path.read_text().splitlines() if "AirflowException" in ln]
        raise UserError(
            f"the build_snapshot DAG run failed (exit {rc}); {errors[-1] if errors else ''} "
            f"(full log: {log_path})"
        )
    snapshot_id = json.loads(manifest.read_text())["snapshot_id"]
    print(f"snapshot manifest {manifest}")
    print(f"report {out / 'report' / 'card.html'}")
    print(f"snapshot_id {snapshot_id}")
    return 0
