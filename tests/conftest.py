"""Shared fixtures: where the project's sample data and the real ``mpiexec`` are."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample"
SHARED_DATA = ROOT.parent / "shared" / "data"
ARTIFACTS = ROOT / "test-artifacts"


def mpiexec() -> str:
    return str(Path(sys.executable).parent / "mpiexec")


def run_mpi(
    ranks: int, *args: str, timeout: float = 600, check: bool = True, **kw
) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` on ``ranks`` real MPI ranks; the output is returned as text."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [mpiexec(), "-n", str(ranks), sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
        **kw,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"mpiexec -n {ranks} {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return proc


def run_corpus(*args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
    """Run the ``corpus`` command line as a user would."""
    proc = subprocess.run(
        [sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"corpus {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data, which CI lays beside the checkout (the project never needs it at run time)."""
    assert SHARED_DATA.is_dir(), f"{SHARED_DATA} missing: tests expect ../shared beside the checkout"
    return SHARED_DATA


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def pytest_configure(config):
    """One eval-table cache for the whole run (hpc_jobs.decontaminate.stage.TABLE_CACHE_ENV): the bundled
    registry's table is written by the first build and linked by every later one (the table changes no
    output byte). Set by the controlling process, so the xdist workers, their builds and their SLURM jobs
    inherit it; removed at the end."""
    if hasattr(config, "workerinput") or "CORPUS_EVAL_TABLE_CACHE" in os.environ:
        return
    config._eval_table_cache = tempfile.mkdtemp(prefix="corpus-eval-tables-")
    os.environ["CORPUS_EVAL_TABLE_CACHE"] = config._eval_table_cache


def pytest_unconfigure(config):
    cache = getattr(config, "_eval_table_cache", None)
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
        os.environ.pop("CORPUS_EVAL_TABLE_CACHE", None)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    """`make test` runs the suite on two pytest-xdist workers (``--dist loadgroup``): a group runs whole
    on one worker. Every test of the local cluster (marked ``cluster``: SLURM, sshd, the standalone Airflow
    on PostgreSQL) is in one group, so they run one at a time as before -- some restart those services or
    count the jobs in the queue; every other module is a group of its own, so its module fixtures are
    built once. Without xdist the marker means nothing."""
    for item in items:
        cluster = item.get_closest_marker("cluster") is not None
        item.add_marker(
            pytest.mark.xdist_group("cluster" if cluster else item.path.relative_to(ROOT).as_posix())
        )


def _queued_jobs() -> set[str]:
    r = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
    return set(r.stdout.split()) if r.returncode == 0 else set()


@pytest.fixture(autouse=True)
def cancel_leftover_jobs(request):
    """A cluster test that fails mid-job must not leave its job holding the node's CPUs: the next
    test would wait on "Resources" behind it. Jobs still queued when the test ends are cancelled."""
    if request.node.get_closest_marker("cluster") is None:
        yield
        return
    before = _queued_jobs()
    yield
    leftover = sorted(_queued_jobs() - before)
    if leftover:
        subprocess.run(["scancel", *leftover], capture_output=True)
