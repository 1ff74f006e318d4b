"""Run a dedup stage through the real runner on real MPI ranks and read back what it wrote."""

from __future__ import annotations

import json
from pathlib import Path

from corpus.formats.docshard import iter_docs, iter_records
from tests.conftest import run_mpi


def run_stage(stage: str, ranks: int, in_dir: Path, out_dir: Path, config: Path | None = None, **kw):
    args = ["-m", f"hpc_jobs.{stage}", "--input", str(in_dir), "--out", str(out_dir)]
    if config is not None:
        args += ["--config", str(config)]
    return run_mpi(ranks, *args, **kw)


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def output_digests(out: Path) -> dict:
    m = manifest(out)
    return {"outputs": m["outputs"], "side_outputs": m["side_outputs"], "extra": m["extra"]}


def kept_docs(out: Path) -> list:
    return [d for o in manifest(out)["outputs"] for d in iter_docs(out / o["path"])]


def filtered_records(out: Path) -> list[dict]:
    m = manifest(out)
    return [
        r
        for s in m["side_outputs"]
        if s["path"].startswith("filtered/")
        for r in iter_records(out / s["path"])
    ]
