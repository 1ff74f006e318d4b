"""Fixtures of the orchestration tests: the running services, small real inputs in a hostile path,
the embedded reference build, and an Airflow home of their own (never in the repository)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from corpus.model.stages import PIPELINE
from tests.conftest import ROOT, run_corpus

SERVICES = Path(os.environ.get("CORPUS_SERVICES_DIR", "/var/tmp/corpus-services"))
SSH_KEY = SERVICES / "ssh" / "id_ed25519"
PG_PORT = int(os.environ.get("CORPUS_PG_PORT", "55432"))
AIRFLOW = str(Path(sys.executable).parent / "airflow")
#: a directory name no shell may interpret: every layer must pass it on literally
HOSTILE_DIR = "in put $(touch pwned);'q\" `id`"


def ssh_true(*options: str) -> list[str]:
    """``ssh root@127.0.0.1 true`` with the services' key, in batch mode, asking nothing about host keys
    and giving up after 5 s; ``options``: more ``-o`` options."""
    opts = ["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "BatchMode=yes", "ConnectTimeout=5"]
    o_flags = [x for o in [*opts, *options] for x in ("-o", o)]
    return ["ssh", "-i", str(SSH_KEY), *o_flags, "root@127.0.0.1", "true"]


def build_conf(backend: str, inputs: list[Path], out: Path) -> dict:
    """The build_snapshot DAG's conf to build ``inputs`` into ``out`` on ``backend``: 2 ranks, seed 0, the
    job polled every second, sbatch allowed to oversubscribe."""
    return {
        "backend": backend,
        "inputs": [str(p) for p in inputs],
        "out": str(out),
        "ranks": 2,
        "seed": 0,
        "poll_interval": 1,
        "sbatch_args": ["--oversubscribe"],
    }


def ssh_connection() -> str:
    return json.dumps(
        {
            "conn_type": "ssh",
            "host": "127.0.0.1",
            "port": 22,
            "login": "root",
            "extra": {"key_file": str(SSH_KEY), "no_host_key_check": True},
        }
    )


@pytest.fixture(scope="session")
def services() -> None:
    """The cluster tests need what `bash scripts/services_up.sh` starts; fail loudly if it is not up."""
    problems = []
    r = (
        subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
        if shutil.which("sinfo")
        else None
    )
    if r is None or r.returncode != 0 or not r.stdout.strip():
        problems.append(f"SLURM is not answering (sinfo: {r.stderr.strip() if r else 'not installed'})")
    if not SSH_KEY.exists():
        problems.append(f"no ssh key at {SSH_KEY}")
    else:
        r = subprocess.run(ssh_true(), capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"sshd on 127.0.0.1 refuses the key: {r.stderr.strip()}")
    assert not problems, (
        "the local cluster is not up: "
        + "; ".join(problems)
        + " -- start it with `bash scripts/services_up.sh` (make cluster-up)"
    )


@pytest.fixture(scope="session")
def small_inputs(tmp_path_factory, shared_data) -> list[Path]:
    """Two small real WARCs (16 response records each) in a directory with a hostile name."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.warcwriter import WARCWriter

    d = tmp_path_factory.mktemp("orch") / HOSTILE_DIR
    d.mkdir()
    paths = []
    with open(shared_data / "warc" / "crawl-2026-03-part0.warc.gz", "rb") as f:
        records = (r for r in ArchiveIterator(f) if r.rec_type == "response")
        for part in range(2):
            p = d / f"small-{part}.warc.gz"
            with open(p, "wb") as out:
                w = WARCWriter(out, gzip=True)
                for _, rec in zip(range(16), records, strict=False):
                    w.write_record(rec)
            paths.append(p)
    return paths


@pytest.fixture(scope="session")
def reference(tmp_path_factory, small_inputs) -> str:
    """The snapshot id of the embedded build (`corpus build`, local mpiexec) of the small inputs."""
    out = tmp_path_factory.mktemp("reference") / "build"
    proc = run_corpus(
        "build", "--input", *map(str, small_inputs), "--out", str(out), "--ranks", "2", "--seed", "0"
    )
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("snapshot_id sha256:"), proc.stdout
    return last.split()[1]


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory) -> dict[str, str]:
    """An Airflow home under the test's tmp dir (SQLite, for `airflow dags test`), migrated once."""
    home = tmp_path_factory.mktemp("airflow-home")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW_CONN_SLURM_LOGIN": ssh_connection(),
        "CORPUS_RETRY_DELAY_S": "2",
    }
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    return env


def dags_test(
    env: dict[str, str], conf: dict, log: Path, timeout: float = 900, dag: str = "build_snapshot"
) -> subprocess.CompletedProcess:
    """`airflow dags test DAG -c CONF`; the whole output goes to ``log``."""
    proc = subprocess.run(
        [AIRFLOW, "dags", "test", dag, "-c", json.dumps(conf)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    log.write_text(proc.stdout + proc.stderr)
    return proc


def snapshot_id(build: Path) -> str:
    return json.loads((build / "snapshot" / "manifest.json").read_text())["snapshot_id"]


def failure_lines(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if "AirflowException" in ln or "Error" in ln)[-3000:]


def lineage_events(build: Path) -> Path:
    """Where a build fixture's DAG run wrote its OpenLineage events, one JSON per line."""
    return build.parent / "openlineage.jsonl"


def lineage_env(env: dict[str, str], events: Path) -> dict[str, str]:
    """``env`` with OpenLineage's file transport on: the run's events are appended to ``events``."""
    transport = {"type": "file", "log_file_path": str(events), "append": True}
    return {**env, "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport)}


@pytest.fixture(scope="session")
def ssh_build(services, airflow_env, small_inputs, tmp_path_factory) -> Path:
    """A whole build_snapshot run: every stage an sbatch job submitted over SSH; its OpenLineage events
    in ``lineage_events(build)``."""
    assert PIPELINE, "no stages are installed: nothing to orchestrate"
    out = tmp_path_factory.mktemp("ssh-build") / "build $(touch pwned)"
    conf = build_conf("ssh", small_inputs, out)
    proc = dags_test(lineage_env(airflow_env, lineage_events(out)), conf, out.parent / "dags-test.log")
    assert proc.returncode == 0, f"DAG run failed:\n{failure_lines(proc.stdout + proc.stderr)}"
    return out


@dataclass(frozen=True)
class DemoBuild:
    out: Path
    proc: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def demo_build(small_inputs, tmp_path_factory) -> DemoBuild:
    """`corpus demo` of the small inputs: the build_snapshot DAG under `airflow dags test`, mpiexec
    backend; its OpenLineage events in ``lineage_events(out)``."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "demo",
            "--input",
            *map(str, small_inputs),
            "--out",
            str(out),
            "--ranks",
            "2",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=lineage_env(dict(os.environ), lineage_events(out)),
        timeout=900,
    )
    return DemoBuild(out, proc)


def scripted(answers: dict):
    """A fake command runner answering by the command's first two words; it records what was asked."""
    calls = []

    def run(argv):
        key = " ".join(argv[:2])
        calls.append(key)
        return answers[key]

    return run, calls
