"""The layers a newcomer can see: each package imports only the layers below it, anywhere in a module
(inside functions too). corpus <- mpi_kernels <- runtime <- hpc_jobs <- orchestration <- cli and dags;
loader <- corpus."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import ROOT
from tests.support.imports import absolute_imports

PROJECT = {"corpus", "mpi_kernels", "runtime", "hpc_jobs", "orchestration", "loader", "cli", "dags"}
ALLOWED = {
    "corpus": {"corpus"},
    "mpi_kernels": {"corpus", "mpi_kernels"},
    "runtime": {"corpus", "mpi_kernels", "runtime"},
    "hpc_jobs": {"corpus", "mpi_kernels", "runtime", "hpc_jobs"},
    "orchestration": {"corpus", "mpi_kernels", "runtime", "hpc_jobs", "orchestration"},
    "cli": {"corpus", "mpi_kernels", "runtime", "hpc_jobs", "orchestration", "loader", "cli"},
    "dags": {"corpus", "mpi_kernels", "runtime", "hpc_jobs", "orchestration", "loader", "dags"},
    "loader": {"corpus", "loader"},
}


def project_imports(path) -> set[tuple[str, int]]:
    """(top-level project package, line) of every import in a module, nested ones included."""
    return {(top, line) for top, line in absolute_imports(path) if top in PROJECT}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_layer_imports_only_the_layers_below_it(package):
    wrong = [
        f"{p.relative_to(ROOT)}:{line} imports {top}"
        for p in sorted((ROOT / package).rglob("*.py"))
        for top, line in sorted(project_imports(p))
        if top not in ALLOWED[package]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_an_import_hidden_in_a_function(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text(
        "def f():\n    from hpc_jobs.runner import assign\n    return importlib.import_module('loader.state')\n"
    )
    assert project_imports(mod) == {("hpc_jobs", 2), ("loader", 3)}


#: the modules that may name a stage's module in a string: the build driver launches ``python -m
#: hpc_jobs.<stage>``, the runner says so in its usage line, the Airflow build steps check each stage's
#: config table against the stage's Config; a job names itself
NAMES_STAGES = {"runtime/build.py", "runtime/runner.py", "orchestration/buildsteps.py"}


def strings_naming_stages(path) -> list[int]:
    """Lines of the string constants (docstrings aside) that name a module of ``hpc_jobs``."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and "hpc_jobs." in node.value
    )


@pytest.mark.parametrize(
    "package", ["corpus", "mpi_kernels", "runtime", "loader", "orchestration", "cli", "dags"]
)
def test_stages_are_named_by_string_only_where_they_are_launched(package):
    wrong = [
        f"{rel}:{line}"
        for p in sorted((ROOT / package).rglob("*.py"))
        if (rel := str(p.relative_to(ROOT))) not in NAMES_STAGES
        for line in strings_naming_stages(p)
    ]
    assert not wrong, "a stage is launched by runtime.build only: " + ", ".join(wrong)


def test_the_check_sees_a_stage_named_in_an_f_string(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text('"""hpc_jobs.x in a docstring is prose."""\ncmd = f"hpc_jobs.{name}"\n')
    assert strings_naming_stages(mod) == [2]
