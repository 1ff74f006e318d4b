"""The stages of a build, in order, by name: a stage is the package ``hpc_jobs.<name>`` defining ``STAGE``
in its ``stage.py``; the library names stages and never imports them (the build driver launches
``python -m hpc_jobs.<name>``)."""

from __future__ import annotations

from corpus.model.errors import UserError

#: Every stage of a build, in order.
PIPELINE: tuple[str, ...] = (
    "ingest",  # WARC / JSONL / text -> raw documents; eval holdout; recrawl collapse
    "extract",  # HTML -> text, per-document robustness
    "exact_dedup",  # before the classifiers: an exact copy is never scored (docs/versions.md, cost)
    "annotate",  # language ID, heuristic signals, quality score, PII scrub (annotates, never drops)
    "line_dedup",
    "minhash_dedup",  # clusters and representative keys (annotates; the version picks representatives)
    "decontaminate",  # contamination runs (annotates; the default version excludes contaminated documents)
    "tokenize",
    "write_shards",  # global shuffle and Megatron-format shards
)


def check_stage_name(name: str) -> None:
    """A clear error for a stage name that is not one of the pipeline's."""
    if name not in PIPELINE:
        raise UserError(f"unknown stage {name!r}; stages: {', '.join(PIPELINE)}")
