"""The quality policy: a decision from stored values only (language, tier, scores), made when a
version is made; the same function judges a Document and a metadata row."""

from __future__ import annotations

import dataclasses

import duckdb
import numpy as np
import pytest

from corpus.formats.metadata import metadata_table
from corpus.model import Document
from corpus.model.errors import UserError
from corpus.select.policy import PolicyConfig, decide, decide_rows, missing_values
from corpus.select.selection import parse_inline
from corpus.version.query import select_rows

GOOD_WEB = {
    "word_count": 400,
    "mean_word_length": 5.0,
    "hash_word_ratio": 0.02,
    "ellipsis_word_ratio": 0.04,
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
        "bg has no stop-word list: the check is off"
    )


def test_trusted_tiers_skip_web_heuristics_but_not_language_checks():
    cfg = PolicyConfig()
    assert decide(doc(tier="curated", word_count=3, quality=0.0, curly_brace=1.0), cfg)[0] is None
    assert decide(doc(tier="curated", conf=0.1), cfg)[0] == "lang_confidence"
    # code is not natural language: lid.176's guess for a Python module is no reason to drop it
    assert decide(doc(tier="code", lang="sv", conf=0.1), PolicyConfig(languages=["en"]))[0] is None
    assert decide(doc(tier="code", conf=0.1), PolicyConfig(language_exempt_tiers=[]))[0] == "lang_confidence"
    assert decide(doc(lang="ja", mean_word_length=1.0), cfg)[0] is None, "no spaces in ja: short words"
    assert decide(doc(lang="ja", alpha_word_fraction=0.5), cfg)[0] == "gopher_alpha_words", "ja is segmented"


def test_the_stop_word_check_applies_to_each_language_with_a_list_and_is_off_for_the_others():
    cfg = PolicyConfig()
    for lang in ("en", "de", "ru", "zh", "ja"):
        assert decide(doc(lang=lang, stop_word_count=1), cfg)[0] == "gopher_stop_words", lang
        assert decide(doc(lang=lang, stop_word_count=2), cfg)[0] is None, lang
    for lang in ("ko", "th", "bg"):  # Korean's list is off by default; Thai and Bulgarian have none
        unscored = dataclasses.replace(
            doc(lang=lang), scores={k: v for k, v in GOOD_WEB.items() if k != "stop_word_count"}
        )
        assert decide(unscored, cfg)[0] is None, lang
    assert (
        decide(doc(lang="ko", stop_word_count=1), PolicyConfig(stop_word_languages=["ko"]))[0]
        == "gopher_stop_words"
    )
    with pytest.raises(UserError, match=r"stop_word_languages \['th'\] have no stop-word list"):
        parse_inline('[policy]\nstop_word_languages = ["en", "th"]\n')


def test_a_document_the_quality_model_does_not_score_is_judged_as_the_policy_says():
    unscored = dataclasses.replace(
        doc(lang="sv"), scores={k: v for k, v in GOOD_WEB.items() if k != "quality"}
    )
    assert decide(unscored, PolicyConfig())[0] is None, "kept by default, on every other check"
    reason, notes = decide(unscored, PolicyConfig(unscored_quality="drop"))
    assert reason == "quality" and notes[0].value is None, "no made-up value in the record"
    assert decide(dataclasses.replace(unscored, scores={**unscored.scores, "word_count": 3}), PolicyConfig())[
        0
    ] == ("gopher_word_count")
    with pytest.raises(UserError, match="unscored_quality must be one of keep, drop"):
        parse_inline('[policy]\nunscored_quality = "ignore"\n')


def row_record(i: int, d: Document) -> dict:
    """``d`` as write_shards' lineage record (what the metadata table is derived from)."""
    rec = d.to_dict()
    rec.pop("text")
    return {**rec, "doc_id": f"{i:032x}"}


CASES = [
    doc(),
    doc(conf=0.3),
    doc(word_count=20),
    doc(lang="de", conf=0.9),
    doc(lang="fr"),
    doc(lang="bg", script_fraction=0.3),
    doc(tier="curated", word_count=3, quality=0.0),
    doc(lang="ja", mean_word_length=1.0, alpha_word_fraction=0.5),
    doc(quality=0.001),
    doc(lorem_ipsum=1.0),
    doc(lang="", conf=0.0),
    dataclasses.replace(doc(lang="sv"), scores={k: v for k, v in GOOD_WEB.items() if k != "quality"}),
    dataclasses.replace(doc(tier="code", lang="sv", conf=0.2), license_hint="MIT"),  # selected by licence
]


@pytest.mark.parametrize(
    "policy_toml, cfg",
    [
        ("[policy]\n", PolicyConfig()),
        (
            '[policy]\nmin_quality = 0.3\nlanguages = ["en", "de", "bg"]\nlang_confidence = { de = 0.95 }\n',
            PolicyConfig(min_quality=0.3, languages=["en", "de", "bg"], lang_confidence={"de": 0.95}),
        ),
        ('[policy]\nunscored_quality = "drop"\n', PolicyConfig(unscored_quality="drop")),
    ],
)
def test_a_selections_policy_judges_each_metadata_row_as_decide_judges_its_document(policy_toml, cfg):
    records = [row_record(i, d) for i, d in enumerate(CASES)]
    con = duckdb.connect()
    con.register("stored", metadata_table(records, "web-00000", [10] * len(records)))
    got = select_rows(
        con, parse_inline("include_contaminated = true\n" + policy_toml), {"web-00000": len(CASES)}
    )
    want = [decide(d, cfg)[0] is None for d in CASES]
    assert got["web-00000"].tolist() == want
    assert 2 <= sum(want) < len(CASES), "the cases exercise both verdicts"


def random_subjects(rng: np.random.Generator, n: int) -> list[Document]:
    """Rows around every threshold: each score near its limits, missing, NaN or infinite at times,
    in languages with and without spaces and script checks, in web and trusted tiers."""
    near = {
        k: [0.0, v, v * 0.5, v * 2, 0.3, 0.8, 1.0, 2.5, 3.0, 10.0, 10.5, 50, 99_999, 100_001]
        for k, v in GOOD_WEB.items()
    }
    docs = []
    for _ in range(n):
        scores = {}
        for k, values in near.items():
            r = rng.random()
            if r < 0.08:
                continue  # missing: counts as its check's missing value
            if r < 0.11:
                scores[k] = float("nan") if r < 0.1 else float("inf")
            else:  # the good value half the time, so that rows reach the later checks too
                scores[k] = float(GOOD_WEB[k]) if r < 0.55 else float(rng.choice(values))
        lang = str(rng.choice(["en", "de", "fr", "bg", "ja", "th", "und", "km", "ko", ""]))
        d = doc(
            tier=str(rng.choice(["web", "curated", "code", "books", ""])),
            lang=lang or None,
            conf=float(rng.choice([0.0, 0.3, 0.5, 0.9, 0.95, 1.0, float("nan")])),
        )
        docs.append(dataclasses.replace(d, scores=scores))
    return docs


def row_reasons(subjects: list[Document], cfg: PolicyConfig) -> list[str | None]:
    """What decide_rows (the columnar policy) names for each subject, from its columns; None: kept."""
    names, first = decide_rows(
        np.array([d.lang or "und" for d in subjects], dtype=object),
        np.array([d.lang_confidence for d in subjects], dtype=np.float64),
        np.array([d.source_tier for d in subjects], dtype=object),
        {
            k: np.array([d.scores.get(k, m) for d in subjects], dtype=np.float64)
            for k, m in missing_values(cfg).items()
        },
        cfg,
    )
    return [names[i] if i >= 0 else None for i in first]


@pytest.mark.parametrize(
    "cfg",
    [
        PolicyConfig(),
        PolicyConfig(
            min_quality=0.3,
            languages=["en", "de", "bg", "und"],
            lang_confidence={"de": 0.95, "und": 0.0},
            drop_curly_brace=True,
            drop_lorem_ipsum=False,
            exempt_tiers=["curated"],
            unscored_quality="drop",
            language_exempt_tiers=["code", "books"],
            stop_word_languages=["en", "ko"],
        ),
    ],
)
def test_the_columnar_policy_names_the_reason_decide_names_for_every_row(cfg):
    """decide_rows is what the version step runs; decide is the rule written for one document."""
    subjects = random_subjects(np.random.default_rng(12), 5_000)
    want = [decide(d, cfg)[0] for d in subjects]
    assert row_reasons(subjects, cfg) == want
    assert len(set(want)) > 10 and want.count(None) > 50, "the rows reach many reasons and both verdicts"


def test_a_policy_key_the_policy_does_not_have_is_a_one_line_error():
    with pytest.raises(UserError, match="unknown config keys: min_qualty"):
        parse_inline("[policy]\nmin_qualty = 0.3\n")
