"""The shape a newcomer can read, kept by checks: formatted by ruff, functions of bounded complexity (the
exceptions written down), short module docstrings (prose lives in docs/), files of bounded length."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

#: the project's own code (what a stage, the loader or an operator runs)
PACKAGES = ("corpus", "mpi_kernels", "runtime", "hpc_jobs", "orchestration", "loader", "cli", "dags")
#: folders whose files stay short enough to read in one sitting
LENGTH_CAPPED = ("corpus", "runtime", "hpc_jobs")
MAX_FILE_LINES = 700
MAX_DOCSTRING_LINES = 12
MAX_COMPLEXITY = 15
#: functions allowed above MAX_COMPLEXITY, one ``path:function`` a line: the list only shrinks
COMPLEXITY_ALLOWED = ROOT / "tests" / "complexity_allowlist.txt"
RUFF = [sys.executable, "-m", "ruff"]


def project_files(*packages: str) -> list:
    return sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py"))


def test_the_code_is_formatted_by_ruff():
    got = subprocess.run([*RUFF, "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert got.returncode == 0, f"run `ruff format .`:\n{got.stdout}{got.stderr}"


def complex_functions() -> set[str]:
    """``path:function`` of every function over MAX_COMPLEXITY (McCabe), as ruff's C901 counts it."""
    got = subprocess.run(
        [
            *RUFF,
            "check",
            "--select",
            "C901",
            "--config",
            f"lint.mccabe.max-complexity={MAX_COMPLEXITY}",
            "--output-format",
            "json",
            "--exit-zero",
            ".",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    found = set()
    for finding in json.loads(got.stdout):
        name = finding["message"].split("`")[1]
        found.add(f"{finding['filename'].removeprefix(str(ROOT) + '/')}:{name}")
    return found


def test_no_function_is_more_complex_than_the_limit_unless_written_down():
    allowed = {line.split("#")[0].strip() for line in COMPLEXITY_ALLOWED.read_text().splitlines()} - {""}
    found = complex_functions()
    assert not found - allowed, f"over complexity {MAX_COMPLEXITY} (split it): {sorted(found - allowed)}"
    assert not allowed - found, (
        f"no longer over the limit: remove from {COMPLEXITY_ALLOWED.name}: {sorted(allowed - found)}"
    )


def long_docstrings(paths) -> list[str]:
    """``path: N lines`` of every module whose docstring is longer than MAX_DOCSTRING_LINES."""
    found = []
    for p in paths:
        n = len((ast.get_docstring(ast.parse(p.read_text()), clean=False) or "").splitlines())
        if n > MAX_DOCSTRING_LINES:
            found.append(f"{p.name if not p.is_relative_to(ROOT) else p.relative_to(ROOT)}: {n} lines")
    return found


def long_files(paths) -> list[str]:
    """``path: N lines`` of every file longer than MAX_FILE_LINES."""
    return [f"{p.name}: {n} lines" for p in paths if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES]


@pytest.mark.parametrize("package", PACKAGES)
def test_a_module_docstring_says_what_the_module_is_in_at_most_twelve_lines(package):
    long = long_docstrings(project_files(package))
    assert not long, "move the prose to docs/ and link it:\n" + "\n".join(long)


@pytest.mark.parametrize("package", LENGTH_CAPPED)
def test_no_file_is_longer_than_the_cap(package):
    long = long_files(project_files(package))
    assert not long, f"split by concern (at most {MAX_FILE_LINES} lines):\n" + "\n".join(long)


def test_the_checks_see_a_thirteen_line_docstring_and_a_701_line_file(tmp_path):
    short, long = tmp_path / "short.py", tmp_path / "long.py"
    short.write_text('"""' + "line\n" * 11 + 'line"""\n' + "x = 1\n" * 687)
    long.write_text('"""' + "line\n" * 12 + 'line"""\n' + "x = 1\n" * 688)
    assert long_docstrings([short, long]) == ["long.py: 13 lines"]
    assert long_files([short, long]) == ["long.py: 701 lines"]
