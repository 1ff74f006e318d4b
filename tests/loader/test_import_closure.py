"""The loader runs in every training process: neither it nor what it reads a version with imports DuckDB
or pyarrow (a version is opened with numpy alone, :mod:`corpus.version.open`). Checked in a fresh
interpreter, since this test session has imported both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from snapshot_factory import CAPS, MIXTURE

from corpus.select.selection import parse_inline
from corpus.version.open import open_version
from corpus.version.query import evaluate
from corpus.version.write import version_manifest, write_version
from tests.conftest import ROOT

HEAVY = ("duckdb", "pyarrow")

#: every module of the loader imported, a loader made on a version and one batch read from it
PROBE = """
import importlib, json, pkgutil, sys
{prelude}
import loader
for m in pkgutil.iter_modules(loader.__path__):
    importlib.import_module("loader." + m.name)
from loader import SnapshotLoader
dl = SnapshotLoader({version!r}, mixture={mixture!r}, seed=5, seq_len=16, batch_size=2, dp_rank=0, dp_world=1,
                    epoch_caps={caps!r}, run_len=2, chunk_tokens=24)
next(iter(dl))
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & {heavy!r})))
"""


@pytest.fixture(scope="module")
def version_dir(id_snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("closure") / "v"
    version = open_version(id_snapshot)
    selection = parse_inline('exclude_hosts = ["b.example.org"]\n')
    bits = evaluate(version, selection)
    write_version(version, version_manifest(version, selection, bits, []), bits, out, version.base_dir)
    return out


def heavy_modules_loaded(version: Path, prelude: str = "") -> list[str]:
    """The heavy packages a fresh interpreter holds after importing the loader and reading a version."""
    code = PROBE.format(prelude=prelude, version=str(version), mixture=MIXTURE, caps=CAPS, heavy=set(HEAVY))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_loader_reads_a_version_without_duckdb_or_pyarrow(version_dir):
    assert heavy_modules_loaded(version_dir) == []


def test_the_probe_sees_a_heavy_import(version_dir):
    assert heavy_modules_loaded(version_dir, prelude="import pyarrow") == ["pyarrow"]
