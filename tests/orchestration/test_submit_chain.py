"""`corpus submit`'s chain and `corpus status`'s reading of a build, without a cluster: the sbatch
command lines, the deployment's bounds on the flags, a chain that cannot be queued whole, the error line
of a failed job's log, and a build made without jobs."""

from __future__ import annotations

import argparse
import json

import pytest

from cli.commands.submit import job_settings
from corpus.model.errors import UserError
from corpus.model.stages import PIPELINE
from orchestration.build_status import build_status, last_error_line
from orchestration.chain import JobSettings, chain_jobs, read_record, submit_chain, write_record
from orchestration.deployment import Deployment
from orchestration.submit import Backend, JobStatus, Result, SubmitError
from tests.conftest import run_corpus


def flags(**over) -> argparse.Namespace:
    base = {
        "ranks": 2,
        "ranks_per_stage": [],
        "partition": "",
        "time": "",
        "account": "",
        "qos": "",
        "sbatch_arg": [],
    }
    return argparse.Namespace(**{**base, **over})


def test_the_chain_is_nine_stages_then_finalize_each_reading_the_one_before(tmp_path):
    jobs = chain_jobs(
        tmp_path / "b", [tmp_path / "in"], None, JobSettings(ranks=3, ranks_per_stage={"annotate": 5})
    )
    assert [j.stage for j in jobs] == [*PIPELINE, "finalize"]
    assert jobs[0].inputs == (str(tmp_path / "in"),)
    for before, job in zip(jobs, jobs[1:-1], strict=False):
        assert job.inputs == (before.out,) and job.config == str(tmp_path / "b" / "build-config.json")
    assert [j.ranks for j in jobs if j.stage == "annotate"] == [5] and jobs[-1].ranks == 3
    finalize = jobs[-1].sbatch_argv()
    assert finalize[-2:] == [f"--out={tmp_path / 'b'}", f"--stages={','.join(PIPELINE)}"]
    assert finalize[-3].endswith("sbatch/finalize.sbatch") and "--in" not in finalize


class Queue(Backend):
    """sbatch answers with increasing job ids, and fails on the ``fail_at``-th job; scancel is recorded."""

    name = "fake"

    def __init__(self, fail_at: int | None = None) -> None:
        self.argvs, self.cancelled, self.fail_at = [], [], fail_at

    def run(self, argv, env=None, timeout=120):
        if argv[0] == "sbatch":
            self.argvs.append(argv)
            if len(self.argvs) == self.fail_at:
                return Result(1, "", "sbatch: error: Batch job submission failed: Invalid account")
            return Result(0, f"{100 + len(self.argvs)}\n", "")
        if argv[0] == "scancel":
            self.cancelled.append(argv[1])
        return Result(0, "", "")


def test_each_job_waits_for_the_one_before_and_a_failure_cancels_the_rest(tmp_path):
    jobs = chain_jobs(tmp_path / "b", [tmp_path / "in"], None, JobSettings())
    q = Queue()
    submitted = submit_chain(q, jobs)
    assert [s.job_id for s in submitted] == [str(101 + i) for i in range(10)]
    assert not any(a.startswith("--dependency") for a in q.argvs[0])
    for i, argv in enumerate(q.argvs[1:]):
        assert f"--dependency=afterok:{101 + i}" in argv and "--kill-on-invalid-dep=yes" in argv
    write_record(tmp_path, submitted)
    assert read_record(tmp_path)["finalize"].job_id == "110"

    half = Queue(fail_at=4)
    with pytest.raises(SubmitError, match="Invalid account"):
        submit_chain(half, jobs)
    assert half.cancelled == ["103", "102", "101"]  # nothing of a half-queued chain is left to run


def test_the_flags_stay_within_the_deployments_bounds():
    d = Deployment(partitions=("cpu",), sbatch_options=("--account", "--exclusive"))
    s = job_settings(
        flags(account="proj1", sbatch_arg=["--exclusive"], ranks_per_stage=["minhash_dedup=8"]), d
    )
    assert s.sbatch_args == ("--account=proj1", "--exclusive") and s.ranks_per_stage == {"minhash_dedup": 8}
    refused = {
        "--output": flags(sbatch_arg=["--output=/etc/x"]),
        "--out": flags(sbatch_arg=["--out=/etc/x"]),  # sbatch would read the abbreviation as --output
        "--qos": flags(qos="high"),  # not in this deployment's list
        "partition": flags(partition="gpu"),
        "not a SLURM time": flags(time="tomorrow"),
        "STAGE=N": flags(ranks_per_stage=["minhash=8"]),
        "one line": flags(sbatch_arg=["--account=a\n--wrap=id"]),
    }
    for what, args in refused.items():
        with pytest.raises(UserError, match=what):
            job_settings(args, d)


def test_a_failed_jobs_error_line_is_the_last_one_that_reads_as_an_error(tmp_path):
    log = tmp_path / "ingest-7.log"
    log.write_text(
        "2026-12-05T10:00:00Z stage ingest: SLURM job 7 (run 1, 2 tasks on vm)\n"
        "10:00:01 [ingest r0/2] 3 shards\n"
        "hpc_jobs.ingest: error: input /x is a FIFO, not a regular file or directory\n"
        "10:00:02 [ingest r1/2] stopping\n"
        "2026-12-05T10:00:03Z stage ingest: exit status 2\n"
    )
    assert (
        last_error_line(log) == "hpc_jobs.ingest: error: input /x is a FIFO, not a regular file or directory"
    )
    assert last_error_line(tmp_path / "none.log").startswith("no log at")


def test_a_build_without_jobs_is_read_from_its_directory(tmp_path):
    build = tmp_path / "b"
    (build / "stages" / "ingest" / "stats").mkdir(parents=True)
    (build / "build-config.json").write_text("{}")
    manifest = {"outputs": [{}, {}, {}], "totals": {"in": 10, "out": 9}}
    (build / "stages" / "ingest" / "manifest.json").write_text(json.dumps(manifest))
    (build / "stages" / "extract" / "stats").mkdir(parents=True)
    (build / "stages" / "extract" / "stats" / "s0.json").write_text("{}")

    def no_slurm(job):  # a build without a record never asks
        raise AssertionError("asked SLURM")

    st = build_status(build, {}, no_slurm)
    states = [(s["step"], s["state"], s["detail"]) for s in st["steps"]]
    assert states[:3] == [
        ("prepare", "done", "build config written"),
        ("ingest", "done", "10 documents in, 9 out"),
        ("extract", "started", "not complete: 1 of 3 units done"),
    ]
    assert {s for _, s, _ in states[3:]} == {"not started"} and not st["complete"] and not st["failed"]
    text = run_corpus("status", str(build))
    assert text.stdout.strip().endswith("step 3 of 11 (extract) started")


def test_status_of_a_missing_directory_is_one_line(tmp_path):
    proc = run_corpus("status", str(tmp_path / "nope"), check=False)
    assert (
        proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "no build directory" in proc.stderr
    )


def test_a_jobs_state_is_read_through_the_backend(tmp_path):
    build = tmp_path / "b"
    build.mkdir()
    q = Queue()
    write_record(build, submit_chain(q, chain_jobs(build, [tmp_path / "in"], None, JobSettings())))
    states = {"101": JobStatus("101", "RUNNING"), "102": JobStatus("102", "PENDING", reason="Dependency")}
    st = build_status(
        build, read_record(build), lambda job: states.get(job.job_id, JobStatus(job.job_id, "PENDING"))
    )
    by_step = {s["step"]: s for s in st["steps"]}
    assert by_step["ingest"]["state"] == "running" and by_step["ingest"]["job_id"] == "101"
    assert by_step["extract"] == {
        "step": "extract",
        "state": "pending",
        "detail": "waiting: after the step before",
        "job_id": "102",
    }
