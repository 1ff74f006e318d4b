"""Running this area's stages on real ranks, in build order, and reading what they wrote."""

from __future__ import annotations

import json
from pathlib import Path

from corpus.formats.docshard import iter_docs, iter_records
from tests.conftest import run_mpi

STAGES = ("ingest", "extract", "annotate")


def run_stage(name: str, ranks: int, inputs: list[Path], out: Path, config: Path | None = None, **kw):
    args = ["-m", f"hpc_jobs.{name}", "--input", *map(str, inputs), "--out", str(out)]
    if config is not None:
        args += ["--config", str(config)]
    return run_mpi(ranks, *args, **kw)


def run_chain(
    ranks: int, inputs: list[Path], build: Path, config: Path | None = None, upto: str = "annotate"
) -> dict:
    """Run ingest .. ``upto`` like ``corpus build`` does; returns {stage: stderr}."""
    logs = {}
    prev = inputs
    for name in STAGES[: STAGES.index(upto) + 1]:
        out = build / name
        logs[name] = run_stage(name, ranks, prev, out, config).stderr
        prev = [out]
    return logs


#: the Perl manuals declared as what they are: a JSONL file no source table matches is tier ``web``
PERL_DOC_CURATED = '[[ingest.sources]]\nmatch = "*/perl-doc.jsonl.gz"\nname = "perl-doc"\ntier = "curated"\n'


def manifest(stage_dir: Path) -> dict:
    return json.loads((stage_dir / "manifest.json").read_text())


def docs(stage_dir: Path, kind: str = "shards"):
    m = manifest(stage_dir)
    refs = (
        m["outputs"]
        if kind == "shards"
        else [s for s in m["side_outputs"] if s["path"].startswith(kind + "/")]
    )
    for ref in refs:
        if kind in ("shards", "holdout"):
            yield from iter_docs(stage_dir / ref["path"])
        else:
            yield from iter_records(stage_dir / ref["path"])


def reconciles(totals: dict) -> bool:
    return totals["in"] == totals["out"] + sum(totals["filtered"].values()) + sum(
        totals["quarantined"].values()
    )
