"""Yield alarms: a build's stage retention against the trailing median of earlier builds of the same sources."""

from __future__ import annotations

import json

import pytest

from corpus.report.alarms import (
    AlarmConfig,
    BuildAlarmError,
    check_build,
    enforce,
    evaluate,
    read_history,
)


def metrics(**stages) -> dict:
    """``policy=(70.0, {"lang_not_allowed": 10.0})`` -> the metrics of a build."""
    return {s: {"retention": r, "drops": drops, "in": 100} for s, (r, drops) in stages.items()}


def history(*builds) -> list[dict]:
    return [{"metrics": m} for m in builds]


def test_no_history_no_alarm():
    assert evaluate(metrics(policy=(10.0, {})), [], AlarmConfig()) == []


def test_deviation_beyond_the_band_of_the_trailing_median_is_an_alarm():
    prev = history(*(metrics(exact_dedup=(r, {})) for r in (80.0, 90.0, 82.0)))  # median 82
    assert evaluate(metrics(exact_dedup=(76.5, {})), prev, AlarmConfig()) == []  # -5.5, band 6
    [alarm] = evaluate(metrics(exact_dedup=(75.0, {})), prev, AlarmConfig())
    assert (alarm.metric, alarm.median, alarm.band, alarm.history) == ("exact_dedup", 82.0, 6.0, 3)
    assert "exact_dedup retention 75.0% vs trailing median 82.0% of 3 build(s)" in alarm.message


def test_only_the_trailing_window_counts():
    prev = history(*(metrics(policy=(r, {})) for r in (10.0, 10.0, 10.0, 70.0, 70.0)))
    assert evaluate(metrics(policy=(70.0, {})), prev, AlarmConfig(window=2)) == []
    assert evaluate(metrics(policy=(70.0, {})), prev, AlarmConfig(window=5))  # median 10


def test_reason_bands_sum_the_reasons_their_glob_matches():
    prev = history(metrics(policy=(70.0, {"lang_not_allowed": 10.0, "low_quality": 20.0})))
    now = metrics(policy=(66.0, {"lang_not_allowed": 15.0, "low_quality": 19.0}))  # retention -4: within 8
    [alarm] = evaluate(now, prev, AlarmConfig())
    assert alarm.metric == "policy/*lang*" and alarm.band == 4.0 and alarm.deviation == pytest.approx(5.0)


def test_configured_bands_override_defaults_one_by_one():
    cfg = AlarmConfig(bands={"exact_dedup": 20})
    bands = cfg.effective_bands()
    assert bands["exact_dedup"] == 20.0 and bands["policy/*lang*"] == 4.0


def test_bad_alarm_config_is_refused():
    with pytest.raises(ValueError, match="on_alarm"):
        AlarmConfig(on_alarm="explode")


def test_planted_language_id_regression_trips_the_alarm(builds, tmp_path):
    hist = tmp_path / "yield-history.jsonl"
    assert check_build(builds.base, hist) == []
    alarms = check_build(builds.lid_broken, hist)
    names = {a.metric for a in alarms}
    assert {"policy", "policy/*lang*"} <= names
    policy = next(a for a in alarms if a.metric == "policy")
    assert policy.value == 0.0 and policy.median > 50


def test_a_build_is_recorded_once_and_never_compared_with_itself(builds, tmp_path):
    hist = tmp_path / "h.jsonl"
    check_build(builds.base, hist)
    check_build(builds.rebuild, hist)  # same snapshot id
    check_build(builds.base, hist)
    assert len(read_history(hist)) == 1


def test_builds_of_other_sources_are_not_compared(builds, tmp_path):
    hist = tmp_path / "h.jsonl"
    check_build(builds.lid_broken, hist)
    assert check_build(builds.web_only, hist) == []  # different sources: no history for them
    assert check_build(builds.base, hist)  # same sources as lid_broken: compared, and far apart


def test_enforce_fails_loudly_or_warns_as_configured(builds, tmp_path):
    hist = tmp_path / "h.jsonl"
    assert enforce(builds.quiet, hist) == []
    with pytest.raises(BuildAlarmError, match="policy retention 0.0%") as failed:
        enforce(builds.lid_broken, hist)
    assert {a.metric for a in failed.value.alarms} >= {"policy"}
    assert enforce(builds.lid_broken, hist, on_alarm="warn")


def test_a_stage_alarm_fails_the_final_task_as_a_yield_alarm_does_unless_told_to_warn(builds, tmp_path):
    hist = tmp_path / "h.jsonl"
    assert enforce(builds.quiet, hist) == []  # the same documents: no yield alarm, no stage alarm
    with pytest.raises(BuildAlarmError, match="stage alarm: exact_dedup: largest cluster has") as failed:
        enforce(builds.base, hist)
    assert failed.value.alarms == [] and len(failed.value.stage_alarms) == 1
    assert enforce(builds.base, hist, on_alarm="warn") == []


def test_the_history_lives_next_to_the_builds_by_default(builds):
    hist = builds.base.parent / "yield-history.jsonl"
    check_build(builds.base)
    assert json.loads(hist.read_text().splitlines()[0])["sources"] == ["books", "web"]
    hist.unlink()
