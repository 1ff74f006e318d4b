"""A run id is one directory name, one to one: two ids never share a build or a version directory, and no
id makes ``out`` the build root, its parent or a hidden directory (issue 30, item 20)."""

from __future__ import annotations

import itertools
import re

import pytest

from orchestration.deployment import Deployment
from orchestration.rundir import run_dir_name
from tests.orchestration.test_params import GOOD, load_dag_module, trigger

ALPHABET = ["a", "_", ":", "+", "~", ".", "3", "f", "é"]


def test_different_run_ids_get_different_names():
    """Every id of up to three characters over letters, hex digits, the escape and what it escapes."""
    ids = ["".join(t) for n in (1, 2, 3) for t in itertools.product(ALPHABET, repeat=n)]
    names = [run_dir_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert len({run_dir_name(i) for i in ("a:b", "a+b", "a~b", "a_b", "a_3ab", "a__b")}) == 6


def test_a_name_is_one_plain_directory_never_dot_dotdot_or_hidden():
    ids = ["".join(t) for n in (1, 2, 3) for t in itertools.product(ALPHABET, repeat=n)]
    for name in map(run_dir_name, [*ids, "..", "../../etc", "a/b", "\x00", "x\n"]):
        assert re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", name), name
    assert (run_dir_name("."), run_dir_name("..")) == ("_2e", "_2e.")


def test_airflows_run_ids_stay_readable():
    assert run_dir_name("manual__2026-01-01T00:00:00+00:00") == "manual____2026-01-01T00_3a00_3a00_2b00_3a00"
    assert run_dir_name("b42") == "b42"


def test_an_empty_or_too_long_run_id_asks_for_an_out():
    for run_id in ("", "é" * 50):
        with pytest.raises(ValueError, match="give the Param 'out'"):
            run_dir_name(run_id)


@pytest.mark.parametrize("run_id", [".", "..", "a:b"])
def test_the_dags_default_out_is_a_directory_of_its_own(run_id, monkeypatch, tmp_path):
    monkeypatch.setenv("CORPUS_BUILD_ROOT", str(tmp_path / "builds"))
    build_dag = load_dag_module("build_snapshot")
    p = trigger(build_dag.PARAMS, {k: v for k, v in GOOD.items() if k != "out"})
    out = build_dag.resolve_build(p, run_id, Deployment())["out"]
    assert out.startswith(f"{tmp_path}/builds/") and out != f"{tmp_path}/builds/"
    assert out != build_dag.resolve_build(p, "a_b", Deployment())["out"]

    version_dag = load_dag_module("build_version")
    q = trigger(version_dag.PARAMS, {"build": "/b/b1", "selection_toml": "near_duplicates = 'all'"})
    step = version_dag.resolve_step(q, run_id, Deployment())
    assert step["out"].startswith("/b/b1/versions/") and "/." not in step["out"]
    assert step["out"] != version_dag.resolve_step(q, "a_b", Deployment())["out"]
