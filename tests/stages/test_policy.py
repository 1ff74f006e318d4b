"""The quality policy: a decision from stored values only (language, tier, scores), made when a
version is made; the same function judges a Document and a metadata row."""

from __future__ import annotations

import duckdb
import pytest

from corpus.errors import UserError
from corpus.metadata import metadata_table
from corpus.model import Document
from corpus.policy import PolicyConfig, decide
from corpus.selection import parse_inline
from corpus.version import select_rows

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
]


@pytest.mark.parametrize(
    "policy_toml, cfg",
    [
        ("[policy]\n", PolicyConfig()),
        (
            '[policy]\nmin_quality = 0.3\nlanguages = ["en", "de", "bg"]\nlang_confidence = { de = 0.95 }\n',
            PolicyConfig(min_quality=0.3, languages=["en", "de", "bg"], lang_confidence={"de": 0.95}),
        ),
    ],
)
def test_a_selections_policy_judges_each_metadata_row_as_decide_judges_its_document(policy_toml, cfg):
    records = [row_record(i, d) for i, d in enumerate(CASES)]
    con = duckdb.connect()
    con.register("stored", metadata_table(records, "web-00000", [10] * len(records)))
    got = select_rows(con, parse_inline("include_contaminated = true\n" + policy_toml), {"web-00000": len(CASES)})
    want = [decide(d, cfg)[0] is None for d in CASES]
    assert got["web-00000"].tolist() == want
    assert 2 <= sum(want) < len(CASES), "the cases exercise both verdicts"


def test_a_policy_key_the_policy_does_not_have_is_a_one_line_error():
    with pytest.raises(UserError, match="unknown config keys: min_qualty"):
        parse_inline("[policy]\nmin_qualty = 0.3\n")
