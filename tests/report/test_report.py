"""``corpus report``: the per-stage counts contract and the HTML data card with the same numbers as JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from corpus.model import StageManifest
from tests.conftest import run_corpus
from tests.report.browser import screenshots
from tests.report.toy_pipeline import make_build


def manifest(build, stage) -> StageManifest:
    return StageManifest.from_dict(json.loads((build / "stages" / stage / "manifest.json").read_text()))


def make_card(build, out) -> dict:
    run_corpus("report", str(build), "--html", str(out))
    return json.loads(out.with_suffix(".json").read_text())


@pytest.fixture(scope="module")
def base_card(builds, tmp_path_factory) -> tuple[dict, Path]:
    """The card of the baseline build (with no history beside it), made once for the tests that read it."""
    out = tmp_path_factory.mktemp("card") / "card.html"
    return make_card(builds.base, out), out


def test_json_prints_every_stage_in_out_filtered_quarantined(builds):
    counts = json.loads(run_corpus("report", str(builds.base), "--json").stdout)
    assert list(counts) == ["ingest", "exact_dedup", "policy"]
    for stage, c in counts.items():
        t = manifest(builds.base, stage).yield_counts().total()
        assert (c["in"], c["out"], c["filtered"], c["quarantined"]) == (
            t.docs_in,
            t.docs_out,
            dict(t.filtered),
            dict(t.quarantined),
        )
        assert c["in"] == c["out"] + sum(c["filtered"].values()) + sum(c["quarantined"].values())
    assert counts["ingest"]["quarantined"] == {"bad_json": 8}


def test_json_counts_are_the_same_from_the_snapshot_directory(builds):
    from_build = json.loads(run_corpus("report", str(builds.base), "--json").stdout)
    from_snapshot = json.loads(run_corpus("report", str(builds.base / "snapshot"), "--json").stdout)
    assert from_build == from_snapshot


def test_card_funnel_matches_the_manifests_per_source_and_language(builds, base_card):
    card = base_card[0]
    assert [r["stage"] for r in card["funnel"]["total"]] == ["ingest", "exact_dedup", "policy"]
    for stage in ("ingest", "exact_dedup", "policy"):
        y = manifest(builds.base, stage).yield_counts()
        for source, c in y.by(0).items():
            row = next(r for r in card["funnel"]["by_source"][source] if r["stage"] == stage)
            assert (row["in"], row["out"], row["bytes_out"]) == (c.docs_in, c.docs_out, c.bytes_out)
    policy_by_lang = {
        lang: next(r for r in rows if r["stage"] == "policy")
        for lang, rows in card["funnel"]["by_lang"].items()
        if any(r["stage"] == "policy" for r in rows)
    }
    assert policy_by_lang["xx"]["retention"] == 0.0  # a language the policy does not allow


def test_card_distributions_are_full_and_show_the_policy_cut(builds, base_card):
    card = base_card[0]
    annotated, kept = card["distributions"]["annotated"], card["distributions"]["kept"]
    assert (annotated["stage"], kept["stage"]) == ("ingest", "policy")
    assert annotated["docs"] == manifest(builds.base, "ingest").yield_counts().total().docs_out
    quality = annotated["scores"]["quality"]
    assert quality["min"] < 0.3 and sum(quality["histogram"]["counts"]) == pytest.approx(
        annotated["docs"], abs=0.1
    )
    assert kept["scores"]["quality"]["min"] >= 0.3  # the threshold of [policy] min_quality
    assert set(kept["languages"]) == {"en", "de", "fr"}
    assert annotated["lang_confidence"]["max"] <= 1.0


def test_card_lists_the_largest_duplicate_clusters_and_quarantine_samples(builds, base_card):
    card = base_card[0]
    d = card["dedup"]["exact_dedup"]
    assert d["removed"] == sum(int(size) * n - n for size, n in d["cluster_sizes"].items())
    largest = d["largest"][0]
    assert largest["size"] == max(int(s) for s in d["cluster_sizes"])
    assert card["stage_alarms"] == {"exact_dedup": [f"largest cluster has {largest['size']} documents"]}
    bad = card["quarantine"]["ingest"]["bad_json"]
    assert bad["count"] == 8 and len(bad["samples"]) == 3
    digests = [s["raw_digest"] for s in bad["samples"]]
    assert digests == sorted(digests) and all(len(x) == 64 for x in digests)


def test_card_records_the_snapshot_and_stage_versions(builds, base_card):
    card = base_card[0]
    snap = json.loads((builds.base / "snapshot" / "manifest.json").read_text())
    assert card["build"]["snapshot_id"] == snap["snapshot_id"]
    assert card["build"]["stage_versions"] == snap["stage_versions"]
    assert card["tokens"]["by"]["bucket"]["web"]["tokens"] > 0


def test_absent_sections_say_so(base_card):
    card, path = base_card
    assert "contamination" in card["absent"] and card["contamination"] is None
    html = path.read_text()
    assert "no decontaminate stage in this build" in html


def test_a_snapshot_copied_away_from_its_build_still_reports_itself(builds, tmp_path):
    away = tmp_path / "snap"
    shutil.copytree(builds.base / "snapshot", away)
    card = make_card(away, tmp_path / "card.html")
    assert card["build"]["snapshot_id"] and card["funnel"]["total"] == [] and "stages" in card["absent"]
    proc = run_corpus("report", str(away), check=False)
    assert proc.returncode == 2 and "--html" in proc.stderr


def test_a_partial_build_reports_what_exists(builds, tmp_path):
    partial = make_build(tmp_path / "partial", builds.inputs)
    shutil.rmtree(partial / "snapshot")
    shutil.rmtree(partial / "stages" / "exact_dedup")
    card = make_card(partial, tmp_path / "card.html")
    assert card["build"]["stages"] == ["ingest", "policy"]
    assert {"snapshot", "dedup", "tokens"} <= set(card["absent"])


def test_default_card_goes_into_the_build(builds):
    proc = run_corpus("report", str(builds.rebuild))
    assert f"report html {builds.rebuild / 'report' / 'card.html'}" in proc.stdout
    assert (builds.rebuild / "report" / "card.json").is_file()


def test_card_shows_alarms_first_and_opens_in_chromium_without_errors(
    builds, base_card, tmp_path, artifacts_dir
):
    from corpus.report.alarms import check_build

    hist = tmp_path / "yield-history.jsonl"
    check_build(builds.base, hist)
    alarm_card = tmp_path / "card.html"
    run_corpus("report", str(builds.lid_broken), "--html", str(alarm_card), "--history", str(hist))
    html = alarm_card.read_text()
    assert html.index("yield alarm") < html.index("Yield funnel")
    assert 'src="http' not in html and "<script" not in html  # self-contained
    shots = {"report-card": base_card[1], "report-card-alarm": alarm_card}
    for name, (errors, widths) in screenshots(shots, artifacts_dir).items():
        assert errors == [], name
        assert widths and all(w > 100 for w in widths), name  # every plot decoded and laid out
    assert (artifacts_dir / "report-card.png").stat().st_size > 50_000


def test_record_adds_the_build_to_the_history_and_exits_3_on_an_alarm(builds, tmp_path):
    hist = tmp_path / "yield-history.jsonl"
    out = tmp_path / "card.html"
    assert (
        run_corpus(
            "report", str(builds.quiet), "--record", "--history", str(hist), "--html", str(out)
        ).returncode
        == 0
    )
    proc = run_corpus(  # no yield alarm against quiet, but exact_dedup's own cluster-size alarm
        "report", str(builds.base), "--record", "--history", str(hist), "--html", str(out), check=False
    )
    assert proc.returncode == 3 and "STAGE ALARM: exact_dedup: largest cluster" in proc.stdout
    assert "YIELD ALARM" not in proc.stdout
    proc = run_corpus(
        "report", str(builds.lid_broken), "--record", "--history", str(hist), "--html", str(out), check=False
    )
    assert proc.returncode == 3
    assert "YIELD ALARM: policy retention 0.0%" in proc.stdout
    assert len(hist.read_text().splitlines()) == 3


def test_a_damaged_shard_costs_its_section_not_the_card(builds, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(builds.base, damaged)
    victim = sorted((damaged / "stages" / "exact_dedup" / "filtered").glob("*.zst"))[0]
    victim.write_bytes(b"not zstd at all")
    card = make_card(damaged, tmp_path / "card.html")
    assert "cannot read the exact_dedup stage's shards" in card["absent"]["dedup (exact_dedup)"]
    assert card["funnel"]["total"] and card["distributions"]["kept"]["docs"] > 0
    assert "dedup (exact_dedup)" in (tmp_path / "card.html").read_text()
