"""The DAG's final task (``buildsteps.finalize``) fails loudly on a yield alarm, or warns by config."""

from __future__ import annotations

import pytest

from corpus.model.errors import UserError
from corpus.model.stages import PIPELINE
from orchestration.buildsteps import finalize
from tests.conftest import SAMPLE, run_corpus

pytestmark = pytest.mark.slow


def build(out, config_text=""):
    cfg = out.parent.parent / f"{out.name}.toml"
    cfg.write_text(config_text)
    run_corpus(
        "build", "--input", str(SAMPLE / "curated"), "--out", str(out), "--ranks", "2", "--config", str(cfg)
    )


def test_a_planted_language_id_regression_fails_the_final_task_unless_told_to_warn(tmp_path):
    builds = tmp_path / "builds"
    build(builds / "good")
    assert finalize(builds / "good", list(PIPELINE))["snapshot_id"].startswith("sha256:")

    broken = "[policy]\nmin_lang_confidence = 0.9999\n"  # language ID "broken": almost nothing passes
    build(builds / "broken", broken)
    with pytest.raises(UserError, match="alarm on"):
        finalize(builds / "broken", list(PIPELINE))

    build(builds / "broken-warn", broken + '[alarms]\non_alarm = "warn"\n')
    assert finalize(builds / "broken-warn", list(PIPELINE))["snapshot_id"].startswith("sha256:")
