"""The submission module: commands are argument vectors, hostile paths stay literal, job states are
read the way SLURM prints them, and a stage's manifest is checked before the build moves on."""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest

from corpus.model.stages import PIPELINE
from orchestration.buildsteps import NothingLeft, VerifyError, verify_stage
from orchestration.submit import (
    LocalBackend,
    Result,
    StageJob,
    SubmitError,
    _drive,
    _slurm_status_steps,
    expand_log_template,
    parse_job_id,
    parse_sacct,
    parse_scontrol,
    remote_command,
)
from tests.conftest import ROOT
from tests.orchestration.conftest import scripted

HOSTILE = [
    "dir with spaces/x.warc.gz",
    "$(touch /tmp/corpus-pwned)",
    "`touch /tmp/corpus-pwned`",
    "a;touch /tmp/corpus-pwned;b",
    'it\'s "quoted"',
    "100%j done",
    "new\nline",
    "-n",
    "*",
]


def job(**kw) -> StageJob:
    base = dict(
        stage="ingest",
        inputs=("/data/in",),
        out="/builds/b1/stages/ingest",
        config="/builds/b1/build-config.json",
        log_dir="/builds/b1/logs",
        ranks=4,
        root="/srv/corpus",
    )
    return StageJob(**{**base, **kw})


def test_the_remote_shell_gets_every_word_back_literally(tmp_path):
    """What the ssh backend sends is parsed by a real shell into exactly the argument vector."""
    argv = ["printf", "%s\\0", *HOSTILE]
    cmd = remote_command(argv, env={"CORPUS_ROOT": "/srv/a b;$(x)"})
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert out.split("\0")[:-1] == HOSTILE
    env_out = subprocess.run(
        [
            "bash",
            "-c",
            remote_command(["sh", "-c", 'printf %s "$CORPUS_ROOT"'], env={"CORPUS_ROOT": "/srv/a b;$(x)"}),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert env_out == "/srv/a b;$(x)"
    assert not (tmp_path / "corpus-pwned").exists()


def test_the_local_backend_runs_without_a_shell():
    r = LocalBackend().run(["printf", "%s\\0", *HOSTILE])
    assert r.rc == 0 and r.out.split("\0")[:-1] == HOSTILE


def test_sbatch_line_passes_stage_arguments_as_separate_words():
    inputs = tuple("/" + h for h in HOSTILE)
    j = job(
        inputs=inputs,
        out="/b/o u;t",
        sbatch_args=("--oversubscribe",),
        partition="debug",
        time_limit="01:00:00",
    )
    argv = j.sbatch_argv()
    assert argv[:2] == ["sbatch", "--parsable"]
    assert "--ntasks=4" in argv and "--partition=debug" in argv and "--time=01:00:00" in argv
    assert "--oversubscribe" in argv
    script = argv.index("/srv/corpus/sbatch/ingest.sbatch")
    assert argv[script + 1 :] == [
        "--input",
        *inputs,
        "--out=/b/o u;t",
        "--config=/builds/b1/build-config.json",
    ]


def test_the_submitters_own_options_and_environment_win_over_the_extra_ones():
    """sbatch takes the last of repeated options; the extra options come before the job's own."""
    j = job(sbatch_args=("--chdir=/", "--output=/tmp/x", "--ntasks=99"), env=(("CORPUS_PYTHON", "/bin/sh"),))
    argv = j.sbatch_argv()
    for mine in ("--chdir=/srv/corpus", "--output=/builds/b1/logs/ingest-%j.log", "--ntasks=4"):
        option = mine.split("=")[0]
        assert [a for a in argv if a.startswith(option + "=")][-1] == mine
    assert j.job_env()["CORPUS_PYTHON"] == "/srv/corpus/.venv/bin/python"


@pytest.mark.parametrize(
    "field,value",
    [
        ("inputs", ("rel/in",)),
        ("inputs", ("-n",)),
        ("out", "build"),
        ("config", "cfg.json"),
        ("root", "."),
        ("log_dir", "logs"),
    ],
)
def test_a_relative_path_or_an_option_as_a_path_is_refused(field, value):
    name = "input" if field == "inputs" else field
    with pytest.raises(SubmitError, match=f"{name} must be an absolute path"):
        job(**{field: value})


def test_a_percent_in_the_log_directory_is_not_a_filename_pattern():
    j = job(log_dir="/b/100% full/logs")
    assert j.log_template() == "/b/100%% full/logs/ingest-%j.log"
    assert expand_log_template(j.log_template(), "42") == "/b/100% full/logs/ingest-42.log"


def test_bad_stage_names_ranks_and_env_names_are_refused():
    with pytest.raises(SubmitError):
        job(stage="ingest; rm -rf /")
    with pytest.raises(SubmitError):
        job(ranks=0)
    with pytest.raises(SubmitError):
        job(env=(("A=B", "x"),))


def test_every_planned_stage_has_a_job_script_that_runs_it():
    for stage in PIPELINE:
        script = ROOT / "sbatch" / f"{stage}.sbatch"
        text = script.read_text()
        assert f"#SBATCH --job-name=corpus-{stage}" in text
        assert f'/sbatch/stage.sbatch" {stage} "$@"' in text
        subprocess.run(["bash", "-n", str(script)], check=True)
    subprocess.run(["bash", "-n", str(ROOT / "sbatch" / "stage.sbatch")], check=True)


def test_the_job_script_refuses_a_bad_stage_name():
    r = subprocess.run(
        ["bash", str(ROOT / "sbatch" / "stage.sbatch"), "x;id", "--in", "a", "--out", "b"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "usage" in r.stderr


def test_job_ids_from_sbatch_parsable():
    assert parse_job_id("123\n") == "123"
    assert parse_job_id("sbatch: warning: something\n77;cluster\n") == "77"
    with pytest.raises(SubmitError):
        parse_job_id("sbatch: error: Batch job submission failed\n")


SCONTROL = (
    "JobId=17 JobName=corpus-ingest UserId=root(0) GroupId=root(0) Priority=1 JobState=CANCELLED "
    "Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 ExitCode=0:15 RunTime=00:00:03 "
    "StdOut=/b/logs/ingest-17.log\n"
)


def test_scontrol_states():
    st = parse_scontrol(SCONTROL, "17")
    assert (st.state, st.exit_code, st.done, st.ok) == ("CANCELLED", "0:15", True, False)
    assert parse_scontrol(SCONTROL, "1") is None
    running = parse_scontrol(SCONTROL.replace("JobState=CANCELLED", "JobState=RUNNING"), "17")
    assert not running.done
    requeued = parse_scontrol(SCONTROL.replace("JobState=CANCELLED", "JobState=REQUEUED"), "17")
    assert not requeued.done


def test_sacct_states_with_and_without_slurmdbd():
    assert parse_sacct("5|CANCELLED by 0|0:0\n", "5", "sacct").state == "CANCELLED"
    assert parse_sacct("5|TIMEOUT|0:0\n", "5", "sacct -c").state == "TIMEOUT"
    assert parse_sacct("5|OUT_OF_MEMORY|0:125\n", "5", "sacct").state == "OUT_OF_MEMORY"
    # a requeued job has one record per run: the last one is how it ended
    assert parse_sacct("5|PREEMPTED|0:0\n5|COMPLETED|0:0\n", "5", "sacct -c").ok
    assert parse_sacct("51|COMPLETED|0:0\n", "5", "sacct") is None


def test_state_falls_back_from_scontrol_to_sacct_to_sacct_c():
    gone = Result(1, "", "slurm_load_jobs error: Invalid job id specified")
    run, calls = scripted(
        {
            "scontrol show": gone,
            "sacct -X": Result(1, "", "Slurm accounting storage is disabled"),
            "sacct -c": Result(0, "9|FAILED|3:0\n", ""),
        }
    )
    st = _drive(_slurm_status_steps("9"), run)
    assert (st.state, st.exit_code, st.source) == ("FAILED", "3:0", "sacct -c")
    assert calls == ["scontrol show", "sacct -X", "sacct -c"]

    run, calls = scripted({"scontrol show": Result(0, SCONTROL, "")})
    assert _drive(_slurm_status_steps("17"), run).state == "CANCELLED" and calls == ["scontrol show"]

    run, _ = scripted({"scontrol show": gone, "sacct -X": Result(0, "", ""), "sacct -c": Result(0, "", "")})
    with pytest.raises(SubmitError, match="does not know job 9"):
        _drive(_slurm_status_steps("9"), run)


def manifest(stage: str, shards: dict[str, dict], inputs: list[str], outputs: list[str]) -> dict:
    totals = Counter()
    filtered, quarantined = Counter(), Counter()
    for c in shards.values():
        for cell in c.values():
            totals["in"] += cell["in"]
            totals["out"] += cell["out"]
            filtered.update(cell["filtered"])
            quarantined.update(cell["quarantined"])
    return {
        "stage": stage,
        "stage_version": "1",
        "config": {},
        "config_hash": "h",
        "inputs": [{"path": f"i/{d}", "sha256": d, "records": -1} for d in inputs],
        "outputs": [{"path": f"shards/{d}", "sha256": d, "records": 1} for d in outputs],
        "side_outputs": [],
        "shard_counts": shards,
        "totals": {
            "in": totals["in"],
            "out": totals["out"],
            "bytes_in": 0,
            "bytes_out": 0,
            "filtered_bytes": 0,
            "filtered": dict(filtered),
            "quarantined": dict(quarantined),
        },
    }


def cell(n_in, n_out, filtered=None, quarantined=None):
    return {
        "web|en": {
            "in": n_in,
            "out": n_out,
            "bytes_in": 0,
            "bytes_out": 0,
            "filtered_bytes": 0,
            "filtered": filtered or {},
            "quarantined": quarantined or {},
        }
    }


def test_verify_passes_a_reconciled_stage_built_on_its_predecessor():
    first = manifest("ingest", {"a": cell(10, 8, {"short": 2}), "b": cell(5, 5)}, ["r1", "r2"], ["A", "B"])
    second = manifest(
        "extract", {"a": cell(8, 7, quarantined={"bad_html": 1}), "b": cell(5, 5)}, ["B", "A"], ["C", "D"]
    )
    r = verify_stage("extract", second, first)
    assert r["manifest_digest"].startswith("sha256:") and r["totals"]["in"] == 13 and r["shards"] == 2
    assert verify_stage("ingest", first, None)["totals"]["out"] == 13


def test_verify_stops_the_build_in_one_line_when_a_stage_keeps_no_document():
    """As `corpus build` does: a DAG run whose inputs yield nothing fails (without retries) naming
    the inputs and the reasons, instead of building an empty snapshot."""
    empty = manifest("ingest", {"a": cell(1, 0, quarantined={"not_warc": 1})}, ["r"], ["A"])
    with pytest.raises(NothingLeft) as e:
        verify_stage("ingest", empty, None, ["/data/in/requests.tar.gz"])
    assert str(e.value) == (
        "no document left after stage ingest of requests.tar.gz: ingest read 1 document(s); dropped not_warc 1"
    )
    assert verify_stage("ingest", empty, None)["totals"]["out"] == 0, "without inputs: the counts only"


def test_verify_refuses_counts_that_do_not_add_up():
    bad = manifest("ingest", {"a": cell(10, 9)}, ["r"], ["A"])
    with pytest.raises(VerifyError, match="do not reconcile"):
        verify_stage("ingest", bad, None)
    lying_totals = manifest("ingest", {"a": cell(10, 10)}, ["r"], ["A"])
    lying_totals["totals"].update({"in": 11, "out": 11})
    with pytest.raises(VerifyError, match="not the sum"):
        verify_stage("ingest", lying_totals, None)


def test_verify_refuses_a_stage_not_built_from_the_previous_outputs():
    first = manifest("ingest", {"a": cell(3, 3)}, ["r"], ["A"])
    stale = manifest("extract", {"a": cell(3, 3)}, ["OLD"], ["C"])
    with pytest.raises(VerifyError, match="not the outputs of ingest"):
        verify_stage("extract", stale, first)
    fewer = manifest("extract", {"a": cell(2, 2)}, ["A"], ["C"])
    with pytest.raises(VerifyError, match="2 documents in, but ingest let 3 out"):
        verify_stage("extract", fewer, first)
    with pytest.raises(VerifyError, match="of stage 'ingest'"):
        verify_stage("extract", json.loads(json.dumps(first)), None)
