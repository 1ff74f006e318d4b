"""Buckets by predicate are data: a small grammar parsed into clauses, one canonical text (what a version's
id covers), one-line errors naming the bucket and the token, and SQL with quoted columns and bound values
whose first match, quantiles and NULLs behave as docs/versions.md says."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from corpus.formats.metadata import metadata_table
from corpus.model.errors import UserError
from corpus.select.selection import check_columns, parse_inline, parse_selection
from corpus.version.buckets import assign_buckets
from corpus.version.open import StoredShard
from tests.versions.test_selection import record


def buckets_toml(*pairs: tuple[str, str | None]) -> str:
    out = []
    for name, where in pairs:
        out.append(f'[[buckets]]\nname = "{name}"\n' + ("" if where is None else f'where = "{where}"\n'))
    return "".join(out)


def test_a_predicate_has_one_canonical_text_whatever_its_spacing_and_keyword_case():
    sel = parse_inline(
        buckets_toml(
            ("web_en_hq", "tier='web'  and lang = 'en' AND quality>=q90.0"),
            (
                "picked",
                "source in ('a', 'it''s') AND tokens < 32768 AND quality != 0.25 AND quality <= q99.5",
            ),
            ("rest", None),
        )
    )
    assert sel.canonical()["buckets"] == [
        {"name": "web_en_hq", "where": "tier = 'web' AND lang = 'en' AND quality >= q90"},
        {
            "name": "picked",
            "where": "source IN ('a', 'it''s') AND tokens < 32768 AND quality != 0.25 AND quality <= q99.5",
        },
        {"name": "rest", "where": None},
    ]
    # the canonical buckets read back as the same buckets (what a tombstone of the version does)
    assert parse_selection({"buckets": sel.canonical()["buckets"]}).buckets == sel.buckets


@pytest.mark.parametrize("percentile", ["q0.00001", "q0.000001", "q12.5", "q100", "q0", "q99.999"])
def test_every_stored_predicate_parses_back_to_the_same_bucket(percentile):
    sel = parse_inline(buckets_toml(("hq", f"quality >= {percentile} AND tokens < 9223372036854775807")))
    (stored,) = sel.canonical()["buckets"]
    assert "e-" not in stored["where"]
    assert parse_selection({"buckets": [stored]}).buckets == sel.buckets


def test_a_selection_without_buckets_has_the_canonical_form_it_had_before_buckets():
    plain = parse_inline("min_scores = { quality = 0.1 }")
    assert "buckets" not in plain.canonical()
    with_buckets = parse_inline("min_scores = { quality = 0.1 }\n" + buckets_toml(("hq", "quality >= q90")))
    assert with_buckets.digest != plain.digest
    assert {k: v for k, v in with_buckets.canonical().items() if k != "buckets"} == plain.canonical()


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (buckets_toml(("hq", "quality >= ")), r"bucket hq: expected a number, a 'string' or qNN at the end"),
        (buckets_toml(("hq", "quality >> 3")), r"bucket hq: expected a number, .*not '>' at character 9"),
        (
            buckets_toml(("hq", "quality >= 0.5 OR lang = 'en'")),
            r"bucket hq: expected AND, not 'OR' at character 15",
        ),
        (buckets_toml(("hq", "lang = 'en")), r"bucket hq: unexpected \"'en\" at character 7"),
        (buckets_toml(("hq", "lang; DROP TABLE docs")), r"bucket hq: unexpected ';' at character 4"),
        (buckets_toml(("hq", "lang IN ('en', q50)")), r"bucket hq: .*no quantile inside IN.*'q50'"),
        (
            buckets_toml(("hq", "quality >= q101")),
            r"bucket hq: expected a percentile q0 \.\. q100, not 'q101'",
        ),
        (buckets_toml(("hq", "quality >= q90x")), r"bucket hq: expected a number, .*not 'q90x'"),
        (buckets_toml(("hq", "'en' = lang")), r"bucket hq: expected a column, not \"'en'\" at character 0"),
        (buckets_toml(("hq", "quality 3")), r"bucket hq: expected an operator .* or IN, not '3'"),
        (buckets_toml(("hq", "")), r"bucket hq: where must be a predicate"),
        (
            buckets_toml(("Web-HQ", "quality >= 1")),
            r"buckets\[0\]\.name must match \[a-z0-9_\]\+, not 'Web-HQ'",
        ),
        (buckets_toml(("hq", "quality >= 1"), ("hq", "lang = 'en'")), r"bucket hq is defined twice"),
        (buckets_toml(("rest", None), ("hq", "lang = 'en'")), r"bucket rest has no where .*only the last"),
        (
            '[[buckets]]\nname = "hq"\nfilter = "x"\n',
            r"bucket hq has unknown key\(s\) filter; known: name, where",
        ),
        ('buckets = "hq"', r"buckets must be an array of tables"),
        (buckets_toml(("hq", "tokens >= " + "9" * 400)), r"bucket hq: expected an integer within 64 bits"),
        (buckets_toml(("hq", "tokens >= " + "9" * 5000)), r"bucket hq: expected an integer within 64 bits"),
        (buckets_toml(("hq", "tokens >= 9223372036854775808")), r"expected an integer within 64 bits"),
        (
            buckets_toml(("hq", "quality >= \u0669\u0660")),
            r"bucket hq: unexpected '\u0669\u0660' at character 11",
        ),
        (
            buckets_toml(("hq", "lang IN (" + ", ".join(["'en'"] * 20_000) + ")")),
            r"bucket hq: the predicate has 120,008 characters, at most 65,536",
        ),
    ],
)
def test_a_malformed_bucket_is_one_line_naming_it_and_the_offending_token(toml, message):
    with pytest.raises(UserError, match=message) as e:
        parse_inline(toml)
    assert "\n" not in str(e.value)


def test_a_bucket_naming_an_unknown_column_is_refused_listing_the_known_ones():
    sel = parse_inline(buckets_toml(("hq", "lang = 'en' AND qualty >= q90")))
    with pytest.raises(
        UserError, match=r"^selection bucket hq names unknown column qualty; known: lang, quality$"
    ):
        check_columns(sel, ["quality", "lang"])


def assign(records: list[dict], tokens: list[int], toml: str, selected: list[bool] | None = None):
    """The buckets of a one-shard table (every document selected unless ``selected`` says otherwise)."""
    con = duckdb.connect()
    con.register("stored", metadata_table(records, "web-00000", tokens))
    shard = StoredShard("web-00000", "web", len(records), sum(tokens), "", Path("-"), Path("-"))
    bits = np.array(selected if selected is not None else [True] * len(records))
    buckets, match = assign_buckets(con, parse_inline(toml).buckets, (shard,), {shard.name: bits})
    return buckets, buckets.of_doc[shard.name].tolist(), match[shard.name].tolist()


def test_first_match_wins_a_null_never_matches_and_a_document_in_no_bucket_is_in_none():
    recs = [
        record(0, quality=0.9, crawl_date="2026-02-01"),
        record(1, quality=0.9, crawl_date="2025-12-31"),
        record(2, quality=0.1, crawl_date="2026-02-01"),
        record(3, quality=0.1, crawl_date=""),  # undated: NULL
        record(4, crawl_date="2026-02-01", lang="fr"),
    ]
    del recs[4]["scores"]["quality"]  # no score: NULL
    toml = buckets_toml(
        ("hq", "quality >= 0.5"), ("recent", "crawl_date >= '2026-01-01'"), ("low", "quality < 0.5")
    )
    _, of_doc, _ = assign(recs, [10] * 5, toml)
    assert of_doc == [0, 0, 1, 2, 1]
    toml = buckets_toml(("not_hq", "quality != 0.9"), ("en", "lang IN ('en')"))
    _, of_doc, _ = assign(recs, [10] * 5, toml)
    assert of_doc == [1, 1, 0, 0, -1]  # document 4: no quality (NULL) and French


def test_the_rest_takes_every_selected_document_no_earlier_bucket_took_and_no_unselected_one():
    recs = [record(i, quality=i / 10) for i in range(6)]
    toml = buckets_toml(("hq", "quality >= 0.3"), ("rest", None))
    _, of_doc, match = assign(recs, [10] * 6, toml, selected=[True, False, True, True, False, True])
    assert of_doc == [1, -1, 1, 0, -1, 0]
    assert match == [1, 1, 1, 0, 0, 0]  # what the stored documents would fall in (the kept table's "of")


def test_a_quantile_is_resolved_over_the_selected_documents_that_pass_the_other_clauses():
    recs = [record(i, quality=i / 100, lang="en" if i % 2 else "fr") for i in range(100)]
    selected = [i < 80 for i in range(100)]
    toml = buckets_toml(("en_top", "lang = 'en' AND quality >= q75"))
    buckets, of_doc, _ = assign(recs, list(range(1, 101)), toml, selected)
    con = duckdb.connect()
    con.register("t", metadata_table(recs, "web-00000", list(range(1, 101))))
    want = con.execute(
        "SELECT quantile_disc(quality, 0.75) FROM t WHERE lang = 'en' AND \"index\" < 80"
    ).fetchall()
    assert buckets.resolved == ({"quality": {"q75": want[0][0]}},)
    assert [i for i, b in enumerate(of_doc) if b == 0] == [
        i for i in range(80) if i % 2 and i / 100 >= want[0][0]
    ]


def test_a_predicate_duckdb_cannot_compare_is_one_line_naming_the_bucket():
    with pytest.raises(UserError, match=r"^selection bucket odd \(lang > 3\): \w+ Error: ") as e:
        assign([record(0)], [10], buckets_toml(("ok", "quality >= 0"), ("odd", "lang > 3")))
    assert "\n" not in str(e.value)
