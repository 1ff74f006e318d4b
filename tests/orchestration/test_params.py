"""Params are data: a run that asks for code (an interpreter, a preloaded library, a job script's
working directory, an option for a path) is refused at trigger by the Params' JSON schema, or in
`prepare`, with a message naming the Param; deployment configuration bounds what a run may ask for."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import subprocess

import pytest
from airflow.sdk.definitions.param import ParamsDict
from airflow.sdk.exceptions import ParamValidationError

from orchestration import buildsteps
from orchestration.deployment import Deployment, DeploymentError, check_run_conf
from orchestration.jobparams import PARAM_DIALECT
from tests.conftest import ROOT
from tests.orchestration.conftest import AIRFLOW


def load_dag_module(name: str):
    spec = importlib.util.spec_from_file_location(f"dag_{name}", ROOT / "dags" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def build_dag():
    return load_dag_module("build_snapshot")


def trigger(params: dict, conf: dict) -> dict:
    """What Airflow does with a run's conf when the run is created: each value against its Param's schema."""
    merged = ParamsDict(copy.deepcopy(params))
    merged.update(conf)
    return merged.validate()


GOOD = {
    "inputs": ["/data/crawl-0.warc.gz", "/data/in put;$(x)"],
    "out": "/builds/b1",
    "backend": "ssh",
    "ranks_per_stage": {"minhash_dedup": 8},
    "sbatch_args": ["--oversubscribe", "--qos=high"],
    "job_env": {"OMP_NUM_THREADS": "4"},
    "time_limit": "1-00:00:00",
    "config": {"policy": {"min_quality": 0.2}, "memory_budget_mb": 512, "alarms": {}},
}


def test_a_run_within_the_bounds_is_accepted(build_dag):
    p = trigger(build_dag.PARAMS, GOOD)
    build = build_dag.resolve_build(p, "manual__1", Deployment())
    assert build["python"] == f"{build['root']}/.venv/bin/python" and build["conn_id"] == "slurm_login"
    check_run_conf(GOOD, build_dag.PARAMS)


@pytest.mark.parametrize(
    "param,value",
    [
        ("job_env", {"LD_PRELOAD": "/tmp/evil.so"}),
        ("job_env", {"BASH_ENV": "/tmp/evil.sh"}),
        ("job_env", {"PYTHONPATH": "/tmp/evil"}),
        ("job_env", {"CORPUS_PYTHON": "/bin/sh"}),
        ("sbatch_args", ["--chdir=/"]),
        ("sbatch_args", ["--output=/etc/cron.d/x"]),
        ("sbatch_args", ["-D", "/"]),
        ("sbatch_args", ["--oversubscribe", "/tmp/evil.sbatch"]),
        ("out", "relative/build"),
        ("out", "-n"),
        ("inputs", ["-rf"]),
        ("inputs", ["data/in"]),
        ("config_file", "cfg.toml"),
        ("ranks_per_stage", {"ingest": 0}),
        ("ranks_per_stage", {"ingest": "4"}),
        ("ranks_per_stage", {"no_such_stage": 4}),
        ("config", {"no_such_stage": {"x": 1}}),
        ("config", {"policy": 0.2}),
        ("config", {"memory_budget_mb": "lots"}),
        ("partition", "gpu"),
        ("time_limit", "--wrap=id"),
    ],
)
def test_a_param_that_is_not_data_is_refused_at_trigger_naming_it(build_dag, param, value):
    with pytest.raises(ParamValidationError, match=f"Invalid input for param {param}:"):
        trigger(build_dag.PARAMS, {**GOOD, param: value})


@pytest.mark.parametrize("param", ["python", "cluster_root", "ssh_conn_id"])
def test_what_runs_is_not_a_per_run_param(build_dag, param):
    with pytest.raises(
        ValueError, match=f"Param '{param}' is not a per-run Param: it is deployment configuration"
    ):
        check_run_conf({**GOOD, param: "/bin/sh"}, build_dag.PARAMS)
    with pytest.raises(ValueError, match="Param 'no_such' is unknown"):
        check_run_conf({"no_such": 1}, build_dag.PARAMS)


def test_prepare_holds_the_run_to_the_deployment_it_runs_under(build_dag, monkeypatch):
    """The schema was built from the DAG processor's deployment; prepare checks the worker's again."""
    p = trigger(build_dag.PARAMS, GOOD)
    narrow = Deployment(job_env_keys=(), sbatch_options=("--oversubscribe",))
    with pytest.raises(ValueError, match="Param 'job_env'"):
        build_dag.resolve_build(p, "r", narrow)
    with pytest.raises(ValueError, match=r"Param 'sbatch_args': \['--qos=high'\]"):
        build_dag.resolve_build({**p, "job_env": {}}, "r", narrow)
    with pytest.raises(ValueError, match="Param 'partition'"):
        build_dag.resolve_build({**p, "partition": "gpu"}, "r", Deployment())
    raw = {"partitions": ["gpu"], "python": "/opt/py/bin/python", "cluster_root": "/srv/c"}
    monkeypatch.setenv("CORPUS_DEPLOYMENT", json.dumps(raw))
    deployed = load_dag_module("build_snapshot")
    accepted = trigger(deployed.PARAMS, {**GOOD, "partition": "gpu"})
    built = deployed.resolve_build(accepted, "r", deployed.DEPLOYMENT)
    assert (built["python"], built["root"], built["partition"]) == ("/opt/py/bin/python", "/srv/c", "gpu")


@pytest.mark.parametrize(
    "raw,match",
    [
        ({"job_env_keys": ["LD_PRELOAD"]}, "may not allow 'LD_PRELOAD'"),
        ({"sbatch_options": ["--chdir"]}, "may not allow '--chdir'"),
        ({"sbatch_options": ["-D"]}, "may not allow '-D'"),
        ({"python": "venv/bin/python"}, "python must be an absolute path"),
        ({"pyhton": "/x"}, "unknown keys"),
    ],
)
def test_a_deployment_cannot_allow_what_loads_code_or_overrides_the_submitter(raw, match):
    with pytest.raises(DeploymentError, match=match):
        Deployment.from_mapping(raw)


def test_contamination_check_params_are_data_too():
    module = load_dag_module("contamination_check")
    good = {"snapshot": "sha256:ab12", "benchmarks": ["/b/new.jsonl"]}
    trigger(module.PARAMS, good)
    for param, value in (("snapshot", "--root=/"), ("benchmarks", ["-x"]), ("snapshots_root", "rel")):
        with pytest.raises(ParamValidationError, match=f"param {param}:"):
            trigger(module.PARAMS, {**good, param: value})
    with pytest.raises(ValueError, match="Param 'python'"):
        check_run_conf({**good, "python": "/bin/sh"}, module.PARAMS)


def test_an_unknown_config_key_fails_prepare_before_any_job(small_inputs, tmp_path, capsys):
    out = tmp_path / "build"
    rc = buildsteps.main(
        [
            "prepare",
            f"--out={out}",
            "--overrides=" + json.dumps({"policy": {"min_qualty": 0.2}}),
            "--input",
            str(small_inputs[0]),
        ]
    )
    assert rc == 2
    assert "[policy] unknown config keys: min_qualty" in capsys.readouterr().err
    assert not out.exists()


def test_a_real_run_naming_python_fails_in_prepare(airflow_env, small_inputs, tmp_path):
    """One real `airflow dags test`: the refusal happens in the prepare task of a real run."""
    conf = {
        "backend": "mpiexec",
        "inputs": [str(small_inputs[0])],
        "out": str(tmp_path / "b"),
        "python": "/bin/sh",
    }
    proc = subprocess.run(
        [AIRFLOW, "dags", "test", "build_snapshot", "-c", json.dumps(conf)],
        env=airflow_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Param 'python' is not a per-run Param" in text, text[-3000:]
    assert not (tmp_path / "b").exists()


#: a run each DAG accepts, to which one value at a time is changed
ACCEPTED = {
    "build_snapshot": GOOD,
    "ingest_crawl": {k: v for k, v in GOOD.items() if k != "inputs"},
    "build_version": {"build": "/b/b1", "selection_toml": "near_duplicates = 'all'"},
    "refresh_optouts": {"build": "/b/b1"},
}


@pytest.mark.parametrize("dag", sorted(ACCEPTED))
@pytest.mark.parametrize(
    "param,good,bad",
    [
        ("time_limit", "04:00:00", "04:00:00\n"),
        ("queue_wait", "1-00:00:00", "1-00:00:00\n"),
        ("job_env", {"OMP_NUM_THREADS": "4"}, {"OMP_NUM_THREADS": "4\n"}),
        ("sbatch_args", ["--qos=high"], ["--qos=high\n"]),
        ("sbatch_args", ["--oversubscribe"], ["--oversubscribe\n"]),
    ],
)
def test_a_trailing_newline_is_refused_by_every_schema_that_let_it_through(dag, param, good, bad):
    """Airflow checks a pattern with Python's re.search, whose ``$`` also matches before a final newline."""
    module = load_dag_module(dag)
    trigger(module.PARAMS, {**ACCEPTED[dag], param: good})
    with pytest.raises(ParamValidationError, match=f"Invalid input for param {param}:"):
        trigger(module.PARAMS, {**ACCEPTED[dag], param: bad})


def patterns(schema) -> list[str]:
    if isinstance(schema, dict):
        found = [schema["pattern"]] if isinstance(schema.get("pattern"), str) else []
        return found + [p for v in schema.values() for p in patterns(v)]
    if isinstance(schema, list):
        return [p for v in schema for p in patterns(v)]
    return []


@pytest.mark.parametrize("dag", [*sorted(ACCEPTED), "contamination_check"])
def test_every_end_anchor_of_every_param_pattern_refuses_a_final_newline(dag):
    """So a pattern added later with a bare ``$`` fails here, before a run can use it."""
    module = load_dag_module(dag)
    found = [p for param in module.PARAMS.values() for p in patterns(param.schema)]
    assert found
    assert [p for p in found if re.search(r"\$(?!\(\?!\\n\))", p)] == []


@pytest.mark.parametrize("dag", [*sorted(ACCEPTED), "contamination_check"])
def test_every_param_schema_is_draft_07_which_airflow_checks_in_a_tenth_of_the_time(dag):
    """Airflow checks a Param's schema against its dialect's metaschema at every resolve: under its
    default, 2020-12, the config Param alone made a parse of the DAG files ~16 s of CPU."""
    module = load_dag_module(dag)
    assert {name: p.schema.get("$schema") for name, p in module.PARAMS.items()} == dict.fromkeys(
        module.PARAMS, PARAM_DIALECT
    )
