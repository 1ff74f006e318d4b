"""``corpus diff A B``: names what changed between two builds and what it did to the data."""

from __future__ import annotations

import json

from corpus.formats.docshard import iter_records
from tests.conftest import run_corpus


def diff_json(a, b) -> tuple[int, dict]:
    proc = run_corpus("diff", str(a), str(b), "--json", check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_identical_builds_diff_as_identical_and_exit_0(builds):
    proc = run_corpus("diff", str(builds.base), str(builds.rebuild), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "identical" in proc.stdout
    rc, d = diff_json(builds.base, builds.rebuild)
    assert rc == 0 and d["identical"] and d["config"] == [] and d["counts"] == {} and d["documents"] is None


def test_a_changed_threshold_is_the_only_config_named(builds):
    rc, d = diff_json(builds.base, builds.strict)
    assert rc == 1 and not d["identical"]
    assert d["config"] == [{"key": "policy.min_quality", "a": 0.3, "b": 0.5}]
    assert d["stage_versions"] == [] and d["tokenizer"] == []


def test_a_changed_threshold_moves_exactly_the_counts_it_affects(builds):
    rc, d = diff_json(builds.base, builds.strict)
    # documents the stricter threshold newly drops: policy's inputs (exact dedup's survivors) of an
    # allowed language with quality in [0.3, 0.5)
    newly_dropped = sum(
        1
        for p in (builds.base / "stages/exact_dedup/shards").glob("*.zst")
        for r in iter_records(p)
        if r["lang"] in ("en", "de", "fr") and 0.3 <= r["scores"]["quality"] < 0.5
    )
    assert newly_dropped > 0
    assert set(d["counts"]) == {"policy"}  # ingest and exact_dedup, upstream of the change, are untouched
    policy = d["counts"]["policy"]
    assert policy["out"]["delta"] == -newly_dropped
    assert policy["filtered"] == {
        "low_quality": {
            "a": policy["filtered"]["low_quality"]["a"],
            "b": policy["filtered"]["low_quality"]["a"] + newly_dropped,
            "delta": newly_dropped,
        }
    }
    assert d["shards"]["ingest"] == {"shared": 4, "only_a": 0, "only_b": 0}


def test_the_summary_reads_as_what_changed_and_what_it_did(builds):
    proc = run_corpus("diff", str(builds.base), str(builds.strict), check=False)
    assert proc.returncode == 1
    text = proc.stdout
    assert "policy.min_quality: 0.3 -> 0.5" in text
    assert "filtered low_quality" in text
    assert "tokens per bucket:" in text
    assert text.index("config:") < text.index("counts per stage")


def test_removed_documents_are_named_by_doc_id_and_really_gone(builds):
    rc, d = diff_json(builds.base, builds.strict)
    docs = d["documents"]
    assert docs["removed"] > 0 and docs["removed_sample"]
    kept_in_strict = {
        r["doc_id"] for p in (builds.strict / "stages/policy/shards").glob("*.zst") for r in iter_records(p)
    }
    kept_in_base = {
        r["doc_id"] for p in (builds.base / "stages/policy/shards").glob("*.zst") for r in iter_records(p)
    }
    assert docs["removed"] == len(kept_in_base - kept_in_strict)
    assert docs["added"] == len(kept_in_strict - kept_in_base)
    for x in docs["removed_sample"]:
        assert x["doc_id"] in kept_in_base and x["doc_id"] not in kept_in_strict


def test_diff_takes_snapshot_directories_and_manifests(builds):
    rc, d = diff_json(builds.base / "snapshot", builds.rebuild / "snapshot" / "manifest.json")
    assert rc == 0 and d["identical"]


def test_diff_of_a_missing_path_is_a_one_line_error(builds, tmp_path):
    proc = run_corpus("diff", str(builds.base), str(tmp_path / "nope"), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "not found" in proc.stderr


def test_diff_takes_snapshot_ids_under_the_snapshots_root(builds, monkeypatch):
    sid = json.loads((builds.strict / "snapshot" / "manifest.json").read_text())["snapshot_id"]
    monkeypatch.setenv("CORPUS_SNAPSHOTS", str(builds.strict.parent))
    rc, d = diff_json(builds.base, sid[:20])
    assert rc == 1 and d["b"]["snapshot_id"] == sid and d["config"][0]["key"] == "policy.min_quality"


def test_diff_and_report_take_the_snapshots_root_as_a_flag_too(builds, monkeypatch):
    """``--root DIR`` where ``$CORPUS_SNAPSHOTS`` is not set: what the error without either says to do."""
    sid = json.loads((builds.strict / "snapshot" / "manifest.json").read_text())["snapshot_id"]
    monkeypatch.delenv("CORPUS_SNAPSHOTS", raising=False)
    unset = run_corpus("report", sid[:20], "--json", check=False)
    assert unset.returncode == 2 and "--root DIR" in unset.stderr
    report = json.loads(run_corpus("report", sid[:20], "--json", "--root", str(builds.strict.parent)).stdout)
    assert report and report == json.loads(run_corpus("report", str(builds.strict), "--json").stdout)
    proc = run_corpus(
        "diff", str(builds.base), sid[:20], "--json", "--root", str(builds.strict.parent), check=False
    )
    assert proc.returncode == 1 and json.loads(proc.stdout)["b"]["snapshot_id"] == sid
