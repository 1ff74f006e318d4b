"""Stage jobs on their own: by hand with sbatch, through each backend, killed, and pre-empted."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import pytest

from orchestration.submit import (
    LocalBackend,
    MpiexecBackend,
    SSHBackend,
    StageJob,
    Submitted,
    transient_result,
)
from tests.conftest import ROOT
from tests.orchestration.conftest import ssh_connection
from tests.orchestration.test_submit import HOSTILE

pytestmark = pytest.mark.slow


def wait_done(backend, job: Submitted, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = backend.status(job)
        if st.done:
            return st
        time.sleep(0.5)
    raise AssertionError(f"job {job.job_id} did not finish in {timeout}s: {backend.status(job).describe()}")


def manifest_digest(stage_dir: Path) -> dict:
    m = json.loads((stage_dir / "manifest.json").read_text())
    return {k: m[k] for k in ("outputs", "side_outputs", "totals")}


def no_injection(*dirs: Path) -> None:
    for d in (*dirs, ROOT):
        assert not (d / "pwned").exists(), f"a path was executed by a shell: {d / 'pwned'} exists"


def ingest_job(
    inputs: list[Path], out: Path, log_dir: Path, ranks: int = 2, sbatch_args: tuple[str, ...] = ()
) -> StageJob:
    """The ingest stage of ``inputs`` into ``out`` (no config) as a job on ``ranks`` ranks, its logs in
    ``log_dir``."""
    return StageJob(
        stage="ingest",
        inputs=tuple(map(str, inputs)),
        out=str(out),
        config=None,
        log_dir=str(log_dir),
        ranks=ranks,
        sbatch_args=sbatch_args,
    )


@pytest.fixture(scope="module")
def ingest_alone(tmp_path_factory, small_inputs) -> Path:
    """The ingest stage of the small inputs, run directly under mpiexec (what the jobs must equal)."""
    from tests.conftest import run_corpus

    out = tmp_path_factory.mktemp("ingest-ref") / "ingest"
    run_corpus("stage", "ingest", "--input", *map(str, small_inputs), "--out", str(out), "--ranks", "2")
    return out


@pytest.mark.cluster
def test_a_person_submits_a_stage_by_hand_with_sbatch(services, small_inputs, ingest_alone, tmp_path):
    out = tmp_path / "out dir; $(touch pwned)" / "ingest"
    out.parent.mkdir()
    proc = subprocess.run(
        [
            "sbatch",
            "--wait",
            "--parsable",
            "-n",
            "2",
            f"--output={out.parent}/ingest-%j.log",
            "sbatch/ingest.sbatch",
            "--in",
            *map(str, small_inputs),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = next(out.parent.glob("ingest-*.log")).read_text()
    assert proc.returncode == 0, f"sbatch --wait failed: {proc.stderr}\n{log[-3000:]}"
    assert "2 tasks" in log and "[ingest r1/2]" in log  # two real MPI ranks through srun/PMI-2
    assert manifest_digest(out) == manifest_digest(ingest_alone)
    no_injection(tmp_path, out.parent, small_inputs[0].parent)


@pytest.mark.cluster
def test_the_ssh_backend_passes_hostile_words_literally(services, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_LOGIN", ssh_connection())
    r = SSHBackend("slurm_login").run(["printf", "%s\\0", *HOSTILE], env={"X": "$(id)"})
    assert r.rc == 0 and r.out.split("\0")[:-1] == HOSTILE


@pytest.mark.cluster
def test_a_remote_command_past_its_timeout_is_a_transient_124_on_both_ssh_paths(services, monkeypatch):
    """As a local command past its timeout: the caller decides (a state lookup asks again, an sbatch
    that may have been accepted is looked up before any resubmission), never an exception of the hook."""
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_LOGIN", ssh_connection())
    backend = SSHBackend("slurm_login")
    for r in (backend.run(["sleep", "30"], timeout=2), asyncio.run(backend.arun(["sleep", "30"], timeout=2))):
        assert (r.rc, r.err) == (124, "timed out after 2s") and transient_result(r)


@pytest.mark.cluster
def test_a_job_submitted_over_ssh_runs_the_stage(services, small_inputs, ingest_alone, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_LOGIN", ssh_connection())
    backend = SSHBackend("slurm_login")
    out = tmp_path / "b 'x' $(touch pwned)"
    job = ingest_job(small_inputs, out / "ingest", out / "logs %j", sbatch_args=("--oversubscribe",))
    sub = backend.submit(job)
    st = wait_done(backend, sub)
    assert st.ok, f"{st.describe()}\n{backend.tail(sub.log_path)}"
    assert (
        Path(sub.log_path).parent.name == "logs %j"
        and "stage ingest: SLURM job" in Path(sub.log_path).read_text()
    )
    assert manifest_digest(out / "ingest") == manifest_digest(ingest_alone)
    # what the state lookup reads last, once SLURM has forgotten the job
    assert Path(sub.exit_path).read_text() == f"job={sub.job_id} exit=0\n"
    no_injection(tmp_path, out)


@pytest.mark.cluster
def test_a_job_cancelled_before_it_runs_reports_cancelled(services, small_inputs, tmp_path):
    backend = LocalBackend()
    job = ingest_job(small_inputs, tmp_path / "ingest", tmp_path / "logs", sbatch_args=("--begin=now+600",))
    sub = backend.submit(job)
    assert backend.status(sub).state == "PENDING"
    backend.cancel(sub)
    st = wait_done(backend, sub, timeout=60)
    assert st.state == "CANCELLED" and not st.ok


def test_the_mpiexec_backend_runs_the_same_job_script_without_slurm(small_inputs, ingest_alone, tmp_path):
    backend = MpiexecBackend()
    out = tmp_path / "m; $(touch pwned)"
    job = ingest_job(small_inputs, out / "ingest", out / "logs")
    sub = backend.submit(job)
    st = wait_done(backend, sub)
    log = Path(sub.log_path).read_text()
    assert st.ok, f"{st.describe()}\n{log[-3000:]}"
    assert "mpiexec, 2 ranks" in log and "[ingest r1/2]" in log
    assert manifest_digest(out / "ingest") == manifest_digest(ingest_alone)
    no_injection(tmp_path, out)

    failing = ingest_job([tmp_path / "missing.warc.gz"], out / "bad", out / "logs", ranks=1)
    sub = backend.submit(failing)
    st = wait_done(backend, sub)
    assert st.state == "FAILED" and "missing.warc.gz" in backend.tail(sub.log_path)


SLOW_TOY = """import sys
from runtime.runner import main
from tests.support.toy_stage import ToyStage


class SlowToy(ToyStage):
    name = "slow_toy"


STAGE = SlowToy
if __name__ == "__main__":
    sys.exit(main(STAGE))
"""


def slow_toy_job(tmp_path: Path, max_requeues: int = 3) -> StageJob:
    """A slow toy stage beside the real ones (hpc_jobs is a namespace package): 6 shards of 8 docs."""
    extra = tmp_path / "extra"
    (extra / "hpc_jobs").mkdir(parents=True)
    (extra / "hpc_jobs" / "slow_toy.py").write_text(SLOW_TOY)
    inputs = tmp_path / "in"
    inputs.mkdir()
    for f in range(6):
        (inputs / f"part-{f}.jsonl").write_text(
            "".join(
                json.dumps({"url": f"https://x.example/{f}/{i}", "text": f"doc {f}-{i}"}) + "\n"
                for i in range(8)
            )
        )
    config = tmp_path / "slow.toml"
    config.write_text("[slow_toy]\nsleep_per_doc = 0.25\n")
    return StageJob(
        stage="slow_toy",
        inputs=tuple(str(p) for p in sorted(inputs.iterdir())),
        out=str(tmp_path / "out"),
        config=str(config),
        log_dir=str(tmp_path / "logs"),
        ranks=2,
        env=(("PYTHONPATH", f"{extra}:{ROOT}"),),
        max_requeues=max_requeues,
    )


def preempt_after_first_shard(sub: Submitted, until: str, deadline: float) -> None:
    log = Path(sub.log_path)
    while time.monotonic() < deadline and "done, 8 in" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.2)  # the first shard is finished: the stage is under way
    subprocess.run(["scancel", "--batch", "--signal=USR1", sub.job_id], check=True)
    while time.monotonic() < deadline and until not in log.read_text():
        time.sleep(0.2)


@pytest.mark.cluster
def test_sigusr1_stops_at_a_shard_boundary_and_the_requeued_job_resumes(services, tmp_path):
    """Pre-emption: the signal SLURM sends before the time limit makes every rank finish its shard and
    stop; the job requeues itself and its second run only does the shards that were left."""
    backend = LocalBackend()
    sub = backend.submit(slow_toy_job(tmp_path))
    log = Path(sub.log_path)
    deadline = time.monotonic() + 120
    preempt_after_first_shard(sub, "requeueing job", deadline)
    text = log.read_text()
    assert "stopped at a shard boundary" in text, text
    # SLURM holds a requeued job for ~2 minutes before it is eligible again; once the first run's
    # steps are gone, make it eligible now
    while time.monotonic() < deadline:
        steps = subprocess.run(
            ["squeue", "-h", "-s", "-j", sub.job_id], capture_output=True, text=True
        ).stdout
        if backend.status(sub).state == "PENDING" and not steps.strip():
            break
        time.sleep(0.5)
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"jobid={sub.job_id}", "starttime=now"], check=True)
    st = wait_done(backend, sub)
    text = log.read_text()
    assert st.ok, f"{st.describe()}\n{text[-3000:]}"
    assert "(run 2," in text
    first, second = text.split("(run 2,")
    done_first = first.count(": done, ")
    assert 0 < done_first < 6, first
    assert second.count(": done, ") == 6 - done_first  # finished shards are never redone
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["totals"]["in"] == 48 and len(m["outputs"]) == 6


@pytest.mark.cluster
def test_a_job_that_used_up_its_requeues_ends_instead_of_requeueing(services, tmp_path):
    """CORPUS_MAX_REQUEUES=0: pre-empted, the job stops at a shard boundary and ends with the stage's
    status rather than requeue, so no job outlives its waiter's bound."""
    backend = LocalBackend()
    sub = backend.submit(slow_toy_job(tmp_path, max_requeues=0))
    preempt_after_first_shard(sub, "exit status", time.monotonic() + 120)
    st = wait_done(backend, sub)
    text = Path(sub.log_path).read_text()
    assert st.state == "FAILED" and "requeued 0 times already (CORPUS_MAX_REQUEUES=0): not again" in text, (
        text
    )
    assert "(run 2," not in text and Path(sub.exit_path).read_text() == f"job={sub.job_id} exit=75\n"
