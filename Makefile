# corpus-pipeline: the two commands a fresh machine needs are `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# the CPU build of torch pinned in requirements.lock lies on this machine's disk
WHEELS ?= /opt/wheels
FIND_LINKS := $(if $(wildcard $(WHEELS)),--find-links $(WHEELS),)
PYTEST_ARGS ?=

.PHONY: venv lock demo test test-fast services services-down airflow bench lint clean

venv: $(VENV)/.installed

# with bytecode: a machine that sets PYTHONDONTWRITEBYTECODE (this one does) would otherwise compile
# every module it imports in every process (an MPI rank's imports: 5.8 CPU s from source, 2.5 from .pyc)
$(VENV)/.installed: requirements.lock pyproject.toml
	command -v uv >/dev/null || python3 -m pip install -q uv
	uv venv -q --allow-existing --python 3.11 $(VENV)
	uv pip sync -q --compile-bytecode --python $(PY) $(FIND_LINKS) requirements.lock
	uv pip install -q --compile-bytecode --python $(PY) --no-deps -e .
	$(PY) -m compileall -q -j 0 corpus cli orchestration hpc_jobs runtime mpi_kernels loader dags >/dev/null
	touch $@

## Re-resolve requirements.in into requirements.lock (what CI installs).
lock:
	uv pip compile -q requirements.in --override requirements-overrides.txt --python 3.11 $(FIND_LINKS) -o requirements.lock

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
