# corpus-pipeline: the two commands a fresh machine needs are `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# the CPU build of torch pinned in requirements-dev.lock lies on this machine's disk
WHEELS ?= /opt/wheels
FIND_LINKS := $(if $(wildcard $(WHEELS)),--find-links $(WHEELS),)
PYTEST_ARGS ?=

.PHONY: venv venv-runtime lock demo test test-fast services services-down airflow bench lint clean

venv: $(VENV)/.installed

# The dev lock (runtime + Airflow, torch, benchmark peers, test tools): what demo, test and CI need.
# With bytecode: a machine that sets PYTHONDONTWRITEBYTECODE (this one does) would otherwise compile
# every module it imports in every process (an MPI rank's imports: 5.8 CPU s from source, 2.5 from .pyc)
$(VENV)/.installed: requirements-dev.lock pyproject.toml
	command -v uv >/dev/null || python3 -m pip install -q uv
	uv venv -q --allow-existing --python 3.11 $(VENV)
	uv pip sync -q --compile-bytecode --python $(PY) $(FIND_LINKS) requirements-dev.lock
	uv pip install -q --compile-bytecode --python $(PY) --no-deps -e .
	$(PY) -m compileall -q -j 0 corpus cli orchestration hpc_jobs runtime mpi_kernels loader dags >/dev/null
	touch $@

## A venv of the runtime lock alone (what `corpus build` needs; no Airflow, torch or test tools) in
## RUNTIME_VENV. An extra on top, at the dev lock's versions: uv pip install -c requirements-dev.lock '.[loader]'
RUNTIME_VENV ?= .venv-runtime
venv-runtime:
	command -v uv >/dev/null || python3 -m pip install -q uv
	uv venv -q --allow-existing --python 3.11 $(RUNTIME_VENV)
	uv pip sync -q --compile-bytecode --python $(RUNTIME_VENV)/bin/python requirements.lock
	uv pip install -q --compile-bytecode --python $(RUNTIME_VENV)/bin/python --no-deps -e .

## Re-resolve pyproject.toml into the runtime lock, then the dev lock (its extras) at the runtime lock's
## versions (requirements-dev.in says -c requirements.lock). An existing lock's versions are kept (uv
## prefers them) unless a new requirement needs another; `uv pip compile --upgrade-package P` moves one.
lock:
	uv pip compile -q pyproject.toml --override requirements-overrides.txt --python 3.11 -o requirements.lock
	uv pip compile -q pyproject.toml requirements-dev.in --all-extras --override requirements-overrides.txt \
	  --python 3.11 $(FIND_LINKS) -o requirements-dev.lock

## Run the main job end to end on the bundled sample (no cluster needed).
demo: venv
	bash scripts/demo.sh

## Set everything up (venv, local SLURM, sshd, PostgreSQL) and run the whole test suite, on two workers
## (tests/conftest.py keeps the cluster's tests on one of them, one at a time).
test: venv services
	$(PY) -m pytest -ra --durations=20 -n 2 --dist loadgroup $(PYTEST_ARGS)

## The suite without the slow end-to-end tests (for a quick local loop).
test-fast: venv
	$(PY) -m pytest -ra -m "not slow and not cluster" $(PYTEST_ARGS)

## Start / stop the local single-node SLURM cluster, sshd on 127.0.0.1 and PostgreSQL.
services:
	bash scripts/services_up.sh

services-down:
	bash scripts/services_down.sh

## The Airflow UI (standalone, with login); prints the URL and the login.
airflow: venv services
	bash scripts/airflow_standalone.sh

bench: venv
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) "$$b" || exit 1; done

## ruff's lint and format, and the shape checks the suite runs (layers, complexity, docstring and file lengths).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q tests/test_layering.py tests/test_code_shape.py

clean:
	rm -rf demo-out test-artifacts
