"""policy: keep/drop from stored values only; a threshold change re-runs the policy alone."""

from __future__ import annotations

import shutil

from corpus.model import Document
from corpus.policy import PolicyConfig, decide
from tests.conftest import SAMPLE
from tests.stages.chain import STAGES, docs, manifest, reconciles, run_chain
from tests.stages.warc_fixtures import real_pages, warc_bytes

GOOD_WEB = {
    "word_count": 400,
    "mean_word_length": 5.0,
    "symbol_word_ratio": 0.0,
    "bullet_line_fraction": 0.1,
    "ellipsis_line_fraction": 0.0,
    "alpha_word_fraction": 0.95,
    "stop_word_count": 30,
    "dup_line_fraction": 0.0,
    "dup_line_char_fraction": 0.0,
    "dup_paragraph_fraction": 0.0,
    "top_2gram_char_fraction": 0.01,
    "top_3gram_char_fraction": 0.01,
    "top_4gram_char_fraction": 0.01,
    "javascript_line_fraction": 0.0,
    "policy_line_fraction": 0.0,
    "lorem_ipsum": 0.0,
    "curly_brace": 0.0,
    "quality": 0.5,
    "script_fraction": 1.0,
}


def doc(tier="web", lang="en", conf=0.9, **scores) -> Document:
    return Document.create(
        text="stored text is never read by the policy",
        source="s",
        source_tier=tier,
        url="https://x.example/",
        crawl_date="2026-03-01",
        raw_digest="0" * 64,
        lang=lang,
        lang_confidence=conf,
        scores={**GOOD_WEB, **scores},
    )


def test_a_document_passing_every_check_is_kept_with_its_decision_recorded():
    reason, notes = decide(doc(), PolicyConfig())
    assert reason is None and [(a.name, a.value, a.verdict) for a in notes] == [("decision", "keep", "pass")]


def test_each_threshold_names_its_reason():
    cfg = PolicyConfig()
    assert decide(doc(conf=0.3), cfg)[0] == "lang_confidence"
    assert decide(doc(word_count=20), cfg)[0] == "gopher_word_count"
    assert decide(doc(mean_word_length=14), cfg)[0] == "gopher_mean_word_length"
    assert decide(doc(stop_word_count=0), cfg)[0] == "gopher_stop_words"
    assert decide(doc(dup_line_fraction=0.5), cfg)[0] == "gopher_dup_lines"
    assert decide(doc(lorem_ipsum=1.0), cfg)[0] == "c4_lorem_ipsum"
    assert decide(doc(quality=0.001), cfg)[0] == "quality"
    reason, notes = decide(doc(word_count=20, quality=0.001), cfg)
    assert reason == "gopher_word_count"
    assert {(a.name, a.value, a.verdict) for a in notes} >= {
        ("gopher_word_count", 20, "fail"),
        ("quality", 0.001, "fail"),
    }


def test_per_language_confidence_script_check_and_language_list():
    cfg = PolicyConfig(lang_confidence={"de": 0.95}, languages=["en", "de", "bg"])
    assert decide(doc(lang="de", conf=0.9), cfg)[0] == "lang_confidence"
    assert decide(doc(lang="en", conf=0.9), cfg)[0] is None
    assert decide(doc(lang="fr"), cfg)[0] == "language"
    assert decide(doc(lang="bg", script_fraction=0.3), cfg)[0] == "script_fraction"
    assert decide(doc(lang="bg", script_fraction=0.9, stop_word_count=0), cfg)[0] is None, (
        "stop words are English"
    )


def test_trusted_tiers_skip_web_heuristics_but_not_language_checks():
    cfg = PolicyConfig()
    assert decide(doc(tier="curated", word_count=3, quality=0.0, curly_brace=1.0), cfg)[0] is None
    assert decide(doc(tier="curated", conf=0.1), cfg)[0] == "lang_confidence"
    assert decide(doc(lang="ja", mean_word_length=1.0, alpha_word_fraction=0.5), cfg)[0] is None, (
        "no spaces in ja"
    )


def small_inputs(d, shared_data):
    d.mkdir()
    (d / "a.warc.gz").write_bytes(warc_bytes(real_pages(shared_data, 14, part=2)))
    (d / "b.warc.gz").write_bytes(warc_bytes(real_pages(shared_data, 10, host_prefix="maint-guide", part=3)))
    shutil.copyfile(SAMPLE / "curated" / "perl-doc.jsonl.gz", d / "perl-doc.jsonl.gz")
    shutil.copyfile(SAMPLE / "edge" / "example-bad.warc.gz", d / "example-bad.warc.gz")
    return [d]


def outputs(build):
    return {
        s: (
            manifest(build / s)["outputs"],
            manifest(build / s)["side_outputs"],
            manifest(build / s)["totals"],
        )
        for s in STAGES
    }


def test_identical_outputs_on_1_and_3_ranks(tmp_path, shared_data):
    inputs = small_inputs(tmp_path / "in", shared_data)
    run_chain(1, inputs, tmp_path / "r1")
    run_chain(3, inputs, tmp_path / "r3")
    one, three = outputs(tmp_path / "r1"), outputs(tmp_path / "r3")
    for stage in STAGES:
        assert one[stage] == three[stage], f"{stage} differs between 1 and 3 ranks"
        assert reconciles(one[stage][2])
    assert manifest(tmp_path / "r3" / "policy")["run_info"]["ranks"] == 3
    kept = list(docs(tmp_path / "r1" / "policy"))
    assert kept and all(d.annotation("policy", "decision").value == "keep" for d in kept)


def test_changing_a_threshold_reruns_only_the_policy(tmp_path, shared_data):
    inputs = small_inputs(tmp_path / "in", shared_data)
    build = tmp_path / "b"
    cfg = tmp_path / "c.toml"
    cfg.write_text("[policy]\nmin_words = 50\n")
    run_chain(2, inputs, build, cfg)
    before = {s: manifest(build / s) for s in STAGES}
    mtimes = {p: p.stat().st_mtime_ns for s in STAGES[:3] for p in (build / s).rglob("*") if p.is_file()}

    cfg.write_text("[policy]\nmin_words = 400\n")
    logs = run_chain(2, inputs, build, cfg)
    for s in STAGES[:3]:
        assert "nothing to do" in logs[s], f"{s} re-ran"
        assert manifest(build / s) == before[s]
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    after = manifest(build / "policy")
    assert after["config_hash"] != before["policy"]["config_hash"]
    assert after["inputs"] == before["policy"]["inputs"]
    assert after["totals"]["filtered"].get("gopher_word_count", 0) > before["policy"]["totals"][
        "filtered"
    ].get("gopher_word_count", 0)
    assert after["totals"]["in"] == before["policy"]["totals"]["in"] and reconciles(after["totals"])
