"""Faults on the real local cluster while a stage job is waited for: sshd restarted, slurmctld restarted,
the session of a lookup in flight dropped, and two runs writing one stage directory.

Every job is submitted as the DAG's operator submits it (``attach_or_submit`` over the SSH backend, with
its run's comment) and waited for by the operator's own trigger (``StageJobTrigger``, polling over SSH
with short intervals). A fault is injected by a coroutine running beside the trigger, at a point it waits
for (a poll seen, the stage's writer lock taken, a lookup in flight), never after a fixed sleep; a
stopped service (or process) is brought back in a ``finally`` and checked answering, so the tests after
these find the cluster as it was. Each stage's output is compared with an undisturbed run of the same stage.

The input is one real crawl part (827 records, ~1.5 s of ingest on one rank), not the 32-record
``small_inputs``: a stage that short holds its writer lock for ~0.1 s, too little to stop the first
writer inside it reliably, and a job that ends before the controller goes down tests nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from corpus.model.layout import WRITER_LOCK
from orchestration.operators import StageJobTrigger, backoff_delay
from orchestration.submit import SSHBackend, StageJob, Submitted, job_comment
from runtime.output_lock import process_alive
from tests.conftest import run_corpus
from tests.orchestration.conftest import SERVICES, ssh_connection, ssh_true

pytestmark = pytest.mark.cluster

SSHD_PIDFILE = Path("/run/sshd_corpus.pid")
SLURMCTLD_PIDFILE = Path("/run/slurmctld.pid")
#: a job that waits to be released (``scontrol update starttime=now``): PENDING for BeginTime, which
#: the trigger does not take for stuck, so the wait is under way before the job starts
HELD = ("--begin=now+600",)
#: the trigger's timing here: a poll a second; after a transient failure 1, 2, 4, 4, ... s
POLL_S, BACKOFF_BASE_S, BACKOFF_CAP_S = 1.0, 1.0, 4.0
#: bounds of the waits: past them a test fails (the trigger itself cancels its job at JOB_DEADLINE_S)
STEP_S, JOB_DEADLINE_S, SCENARIO_S = 60.0, 180.0, 240.0


# -- the services ---------------------------------------------------------------------------------


def resume(pid: int) -> None:
    """SIGCONT, in a ``finally``: a process that has ended meanwhile needs none."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def process_stopped(pid: int) -> bool:
    """Stopped by a signal (state T in /proc/PID/stat)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def daemon_pid(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if process_alive(pid) else None


def until(condition: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(every)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


async def auntil(condition: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    """``until`` inside the event loop the trigger runs in (``condition`` must be quick)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        await asyncio.sleep(every)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


def stop_daemon(pidfile: Path, name: str) -> int:
    """SIGTERM, as an init system stops it; returns the pid once the process is gone."""
    pid = daemon_pid(pidfile)
    assert pid is not None, f"{name} is not running (no live pid in {pidfile})"
    os.kill(pid, signal.SIGTERM)
    until(lambda: not process_alive(pid), 30, f"{name} (pid {pid}) exits after SIGTERM")
    return pid


def sshd_answers() -> bool:
    r = subprocess.run(ssh_true("LogLevel=ERROR"), capture_output=True, timeout=30)
    return r.returncode == 0


def ensure_sshd_up() -> None:
    """sshd as scripts/services_up.sh starts it, unless it runs; then it must accept the key."""
    if daemon_pid(SSHD_PIDFILE) is None:
        subprocess.run(
            [
                "/usr/sbin/sshd",
                "-o",
                "ListenAddress=127.0.0.1",
                "-o",
                "Port=22",
                "-o",
                f"PidFile={SSHD_PIDFILE}",
                "-o",
                "MaxStartups=50:30:100",
                "-E",
                str(SERVICES / "logs" / "sshd.log"),
            ],
            check=True,
        )
    until(sshd_answers, 30, "sshd on 127.0.0.1 accepts the key again")


def slurm_answers() -> bool:
    """The controller answers and the node takes jobs (what scripts/services_up.sh waits for)."""
    try:
        r = subprocess.run(
            ["sinfo", "-h", "-n", socket.gethostname().split(".")[0], "-o", "%T"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0 and r.stdout.strip() in ("idle", "mixed", "allocated")


def ensure_slurmctld_up() -> None:
    """slurmctld as scripts/services_up.sh starts it (its slurm.conf, its pid file), unless it runs. Not
    the script itself: with slurmctld down it wipes /var/spool/slurmctld, and a restart must recover the
    saved state (jobs included) from there."""
    if daemon_pid(SLURMCTLD_PIDFILE) is None:
        subprocess.run(["/usr/sbin/slurmctld"], check=True)
    until(slurm_answers, 60, "slurmctld answers and the node takes jobs again")


# -- jobs -----------------------------------------------------------------------------------------


@pytest.fixture
def ssh_backend(services, monkeypatch) -> SSHBackend:
    """The DAG's backend: its Connection is what the trigger's SSHHookAsync reads too."""
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_LOGIN", ssh_connection())
    return SSHBackend("slurm_login")


@pytest.fixture(scope="module")
def crawl_part(shared_data) -> Path:
    return shared_data / "warc" / "crawl-2026-03-part0.warc.gz"


def manifest_digest(stage_dir: Path) -> dict:
    m = json.loads((stage_dir / "manifest.json").read_text())
    return {k: m[k] for k in ("outputs", "side_outputs", "totals")}


@pytest.fixture(scope="module")
def undisturbed(crawl_part, tmp_path_factory) -> dict:
    """The ingest stage of the crawl part run directly under mpiexec: what every faulted job must equal."""
    out = tmp_path_factory.mktemp("undisturbed") / "ingest"
    run_corpus("stage", "ingest", "--input", str(crawl_part), "--out", str(out), "--ranks", "1")
    return manifest_digest(out)


def ingest_job(build: Path, crawl_part: Path, sbatch_args: tuple[str, ...] = ()) -> StageJob:
    """The ingest stage of build ``build`` as the DAG's first task submits it, for a run of its own."""
    run_id = f"manual__faults_{uuid.uuid4().hex[:8]}"
    return StageJob(
        stage="ingest",
        inputs=(str(crawl_part),),
        out=str(build / "stages" / "ingest"),
        config=None,
        log_dir=str(build / "logs"),
        ranks=1,
        sbatch_args=("--oversubscribe", *sbatch_args),
        comment=job_comment("build_snapshot", run_id, "ingest", 1),
    )


def submit(backend: SSHBackend, job: StageJob) -> Submitted:
    submitted, how = backend.attach_or_submit(job)
    assert how == "submitted", how
    return submitted


def release(job_id: str) -> None:
    subprocess.run(
        ["scontrol", "update", f"jobid={job_id}", "starttime=now"], check=True, capture_output=True
    )


def slurm_state(job_id: str) -> str:
    r = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30)
    return r.stdout.strip()


def jobs_of(job: StageJob) -> list[str]:
    """Every job SLURM holds (queued, running or finished) that any try of the job's run and stage submitted."""
    out = subprocess.run(
        ["squeue", "--me", "-h", "-t", "all", "-o", "%i|%k"], capture_output=True, text=True, check=True
    ).stdout
    return [
        line.split("|", 1)[0]
        for line in out.splitlines()
        if line.split("|", 1)[1].startswith(job.owner + " try=")
    ]


def writer_lock(stage_dir: Path) -> dict | None:
    try:
        return json.loads((stage_dir / WRITER_LOCK).read_text())
    except (OSError, ValueError):
        return None  # not taken, or created and not written yet


def lookup_session(job_id: str) -> int | None:
    """The sshd session running the wait's ``scontrol show job -o ID`` now, if one does (with the
    controller down, scontrol keeps trying to connect for a while before it fails)."""
    argv = [b"scontrol", b"show", b"job", b"-o", job_id.encode()]
    for proc in Path("/proc").iterdir():
        try:
            words = (proc / "cmdline").read_bytes().split(b"\0")[:-1]
            if words[1:] != argv[1:] or Path(words[0].decode()).name != "scontrol":
                continue
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if Path(f"/proc/{parent}/cmdline").read_bytes().startswith(b"sshd: "):
                return parent
        except (OSError, ValueError, IndexError):
            continue
    return None


# -- the wait -------------------------------------------------------------------------------------


class TriggerLog:
    """Stands in for the trigger's logger, keeping what the wait says: its polls, its transient failures."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def _keep(self, level: str, msg: str, *args: Any, **_: Any) -> None:
        self.lines.append((level, msg % args if args else msg))

    def info(self, msg: str, *args: Any, **kw: Any) -> None:
        self._keep("info", msg, *args, **kw)

    def warning(self, msg: str, *args: Any, **kw: Any) -> None:
        self._keep("warning", msg, *args, **kw)

    def error(self, msg: str, *args: Any, **kw: Any) -> None:
        self._keep("error", msg, *args, **kw)

    def debug(self, msg: str, *args: Any, **kw: Any) -> None:
        self._keep("debug", msg, *args, **kw)

    def saw(self, text: str) -> bool:
        return any(text in line for _, line in self.lines)

    def transient(self) -> list[str]:
        return [line for level, line in self.lines if level == "warning" and "transient: try" in line]

    def backoff(self) -> list[float]:
        """The waits the trigger chose after each transient failure, in order."""
        return [float(m.group(1)) for line in self.transient() if (m := re.search(r" in (\d+)s$", line))]

    def __str__(self) -> str:
        return "\n".join(f"{level}: {line}" for level, line in self.lines) or "(the wait logged nothing)"


def waiting(job: Submitted) -> tuple[asyncio.Task, TriggerLog]:
    """The operator's trigger on ``job`` (a task of the running loop): its first event is the wait's end."""
    trigger = StageJobTrigger(
        job.to_dict(),
        poll_interval=POLL_S,
        deadline=time.time() + JOB_DEADLINE_S,
        backoff_base=BACKOFF_BASE_S,
        backoff_cap=BACKOFF_CAP_S,
        transient_budget=120,
    )
    log = trigger._log = TriggerLog()

    async def first_event() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.ensure_future(first_event()), log


def run_scenario(scenario: Callable[[], Any], restore: Callable[[], None] = lambda: None) -> Any:
    """Run the fault scenario within its deadline; ``restore`` undoes the fault whatever happened."""
    try:
        return asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
    finally:
        restore()


def one_job_wrote_it(job: StageJob, submitted: Submitted, undisturbed: dict) -> None:
    """One job for the run's stage, which ended well and wrote what an undisturbed run writes."""
    assert jobs_of(job) == [submitted.job_id]
    assert [p.name for p in Path(job.log_dir).glob("ingest-*.log")] == [f"ingest-{submitted.job_id}.log"]
    assert Path(submitted.exit_path).read_text() == f"job={submitted.job_id} exit=0\n"
    assert manifest_digest(Path(job.out)) == undisturbed
    assert writer_lock(Path(job.out)) is None


# -- the faults -----------------------------------------------------------------------------------


def test_a_wait_over_ssh_rides_out_an_sshd_restart(ssh_backend, crawl_part, undisturbed, tmp_path):
    """sshd goes away while the trigger polls the job over SSH, and the job runs while nobody can log
    in: every refused connection is transient, the trigger backs off exponentially up to its cap, and
    once sshd is back it reads the job's end -- one job, the stage as an undisturbed run writes it."""
    job = ingest_job(tmp_path / "b", crawl_part, HELD)
    submitted = submit(ssh_backend, job)

    async def scenario() -> tuple[dict, TriggerLog]:
        wait, log = waiting(submitted)
        await auntil(
            lambda: log.saw(f"job {submitted.job_id} PENDING"), STEP_S, "the wait's first poll over SSH"
        )
        try:
            await asyncio.to_thread(stop_daemon, SSHD_PIDFILE, "sshd")
            await asyncio.to_thread(release, submitted.job_id)
            await auntil(
                lambda: len(log.transient()) >= 3, STEP_S, f"three polls refused while sshd is down\n{log}"
            )
        finally:
            await asyncio.to_thread(ensure_sshd_up)
        return await wait, log

    event, log = run_scenario(scenario, ensure_sshd_up)
    assert event["ok"] and event["state"] == "COMPLETED", f"{event}\n{log}"
    assert log.backoff()[:3] == [backoff_delay(n, BACKOFF_BASE_S, BACKOFF_CAP_S) for n in (1, 2, 3)], str(log)
    assert max(log.backoff()) <= BACKOFF_CAP_S
    one_job_wrote_it(job, submitted, undisturbed)


def test_a_running_job_and_its_wait_survive_a_slurmctld_restart(
    ssh_backend, crawl_part, undisturbed, tmp_path
):
    """slurmctld is stopped while the job writes its stage and started again on its saved state: the job
    runs on and ends while the controller is down, the wait's lookup that met the outage waits for the
    controller, and the restarted controller itself reports the job COMPLETED (it recovered the job and
    was told how it ended) -- the same run of one job, the stage as undisturbed. The job's rank 0 is
    held (SIGSTOP) until the controller is down, so the job is certainly running through the outage."""
    job = ingest_job(tmp_path / "b", crawl_part, HELD)
    submitted = submit(ssh_backend, job)
    before = daemon_pid(SLURMCTLD_PIDFILE)

    async def scenario() -> tuple[dict, TriggerLog]:
        wait, log = waiting(submitted)
        await auntil(
            lambda: log.saw(f"job {submitted.job_id} PENDING"), STEP_S, "the wait's first poll over SSH"
        )
        await asyncio.to_thread(release, submitted.job_id)
        holder = await auntil(
            lambda: writer_lock(Path(job.out)), STEP_S, "the job writing its stage", every=0.005
        )
        try:
            os.kill(holder["pid"], signal.SIGSTOP)
            try:
                await asyncio.to_thread(stop_daemon, SLURMCTLD_PIDFILE, "slurmctld")
                await auntil(
                    lambda: lookup_session(submitted.job_id),
                    STEP_S,
                    f"a lookup of the wait waiting for the controller\n{log}",
                )
            finally:
                resume(holder["pid"])
            await auntil(
                lambda: Path(submitted.exit_path).exists(),
                STEP_S,
                "the job ending while the controller is down",
            )
        finally:
            await asyncio.to_thread(ensure_slurmctld_up)
        return await wait, log

    event, log = run_scenario(scenario, ensure_slurmctld_up)
    assert daemon_pid(SLURMCTLD_PIDFILE) not in (None, before), "slurmctld was not restarted"
    assert event["ok"] and event["state"] == "COMPLETED", f"{event}\n{log}"
    assert event["description"].endswith("(from scontrol)"), event[
        "description"
    ]  # the saved state was recovered
    text = Path(submitted.log_path).read_text()
    assert "(run 1," in text and "(run 2," not in text, text  # the same run of the job, never requeued
    one_job_wrote_it(job, submitted, undisturbed)


def test_a_lookup_whose_ssh_session_drops_mid_command_is_asked_again_not_taken_for_an_answer(
    ssh_backend, crawl_part, undisturbed, tmp_path
):
    """The login node drops the session of a lookup still running (here an scontrol waiting on a hung
    controller, so that one is certainly in flight): no exit status came back, so nothing was learnt
    about the job -- a transient failure, asked again after the backoff, never "no record" (which, with
    the job's exit record not written yet, would fail the task of a job that runs on)."""
    job = ingest_job(tmp_path / "b", crawl_part, HELD)
    submitted = submit(ssh_backend, job)
    controller = daemon_pid(SLURMCTLD_PIDFILE)
    assert controller is not None

    async def scenario() -> tuple[dict, TriggerLog]:
        wait, log = waiting(submitted)
        await auntil(
            lambda: log.saw(f"job {submitted.job_id} PENDING"), STEP_S, "the wait's first poll over SSH"
        )
        os.kill(controller, signal.SIGSTOP)  # hung: it accepts connections and answers none
        try:
            session = await auntil(
                lambda: lookup_session(submitted.job_id),
                STEP_S,
                f"a lookup of the wait waiting for the controller\n{log}",
            )
            os.kill(session, signal.SIGKILL)
            await auntil(lambda: log.transient() or wait.done(), STEP_S, f"the wait noticing the drop\n{log}")
            assert not wait.done(), f"the wait ended on a dropped session: {wait.result()}\n{log}"
        finally:
            resume(controller)
        await asyncio.to_thread(release, submitted.job_id)
        return await wait, log

    event, log = run_scenario(scenario, lambda: (resume(controller), ensure_slurmctld_up()))
    assert "the SSH session ended before scontrol did" in log.transient()[0], str(log)
    assert event["ok"] and event["state"] == "COMPLETED", f"{event}\n{log}"
    one_job_wrote_it(job, submitted, undisturbed)


def test_of_two_runs_writing_one_stage_directory_one_writes_and_the_other_is_refused(
    ssh_backend, crawl_part, undisturbed, tmp_path
):
    """A second run with the same ``out`` is submitted while the first one's job writes the stage (its
    rank 0, holding the writer lock, is stopped there so that the overlap is certain): the second job
    fails naming the first, writes nothing, and the first completes the stage as undisturbed."""
    first = ingest_job(tmp_path / "b", crawl_part)
    second = ingest_job(tmp_path / "b", crawl_part)
    assert first.out == second.out and first.owner != second.owner
    first_submitted = submit(ssh_backend, first)
    out = Path(first.out)

    async def scenario() -> tuple[dict, dict, Submitted, TriggerLog]:
        first_wait, first_log = waiting(first_submitted)
        holder = await auntil(
            lambda: (w := writer_lock(out)) and w["job_id"] == first_submitted.job_id and w,
            STEP_S,
            "the first job taking the writer lock",
            every=0.005,
        )
        os.kill(holder["pid"], signal.SIGSTOP)
        try:
            await auntil(lambda: process_stopped(holder["pid"]), 5, "the first job's rank 0 stopping")
            assert not (out / "manifest.json").exists(), (
                "the first job finished before it could be held inside"
            )
            second_submitted = await asyncio.to_thread(submit, ssh_backend, second)
            second_wait, _ = waiting(second_submitted)
            second_event = await second_wait
            assert writer_lock(out) == holder  # the refused job left the lock alone
        finally:
            resume(holder["pid"])
        return await first_wait, second_event, second_submitted, first_log

    first_event, second_event, second_submitted, first_log = run_scenario(scenario)
    assert first_event["ok"] and first_event["state"] == "COMPLETED", f"{first_event}\n{first_log}"
    assert not second_event["ok"] and second_event["state"] == "FAILED", second_event
    refusal = f"{out} is being written by job {first_submitted.job_id} on host"
    assert (
        refusal in second_event["log_tail"] and "a second writer would corrupt it" in second_event["log_tail"]
    )
    assert ": done, " not in second_event["log_tail"]  # it wrote no shard
    assert jobs_of(second) == [second_submitted.job_id]
    assert jobs_of(first) == [first_submitted.job_id]
    assert manifest_digest(out) == undisturbed and writer_lock(out) is None
