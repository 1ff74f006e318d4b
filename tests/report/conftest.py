"""Builds made once per session with the toy pipeline: a baseline, an identical rebuild, one with a
stricter quality threshold, one with language ID broken, one of a single source, and one whose
exact_dedup raises no alarm about its cluster sizes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.report.toy_pipeline import make_build, write_inputs


@dataclass(frozen=True)
class Builds:
    inputs: list[Path]
    base: Path  # default config
    rebuild: Path  # the same inputs and config, another directory
    strict: Path  # [policy] min_quality = 0.5 instead of 0.3
    lid_broken: Path  # [ingest] lang_field reads a field that is not there: no document has a language
    web_only: Path  # only the web source's inputs
    quiet: Path  # the base's inputs, with exact_dedup's alarm_cluster_size above its largest cluster


@pytest.fixture(scope="session")
def builds(tmp_path_factory) -> Builds:
    root = tmp_path_factory.mktemp("builds")
    inputs = write_inputs(root / "inputs")
    return Builds(
        inputs=inputs,
        base=make_build(root / "base", inputs),
        rebuild=make_build(root / "rebuild", inputs),
        strict=make_build(root / "strict", inputs, "[policy]\nmin_quality = 0.5\n"),
        lid_broken=make_build(root / "lid_broken", inputs, '[ingest]\nlang_field = "language"\n'),
        web_only=make_build(
            root / "web_only", [p for p in inputs if p.name in ("part-0.jsonl", "part-2.jsonl")]
        ),
        quiet=make_build(root / "quiet", inputs, "[exact_dedup]\nalarm_cluster_size = 1000\n"),
    )
