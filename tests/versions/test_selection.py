"""A selection is data: checked key by key, run as one parameterised DuckDB query over the metadata
table, with the documented order (row rules, per-language quantiles, then cluster representatives)."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from corpus.formats.metadata import metadata_table
from corpus.model.errors import UserError
from corpus.select.selection import load_selection, parse_inline, parse_selection
from corpus.version.query import select_rows


def record(i: int, **kw) -> dict:
    """A lineage record (a document without its text), distinct per ``i``."""
    rec = {
        "doc_id": f"{i:032x}",
        "source": "web",
        "source_tier": "web",
        "url": f"https://site{i % 3}.example.org/page/{i}",
        "crawl_date": "2026-03-01",
        "lang": "en",
        "lang_confidence": 0.9,
        "license_hint": "",
        "scores": {"quality": i / 100},
        "annotations": [],
        "dup_cluster_id": "",
        "dup_cluster_size": 1,
        "dup_of": "",
        "text_bytes": 100,
        "text_digest": "",
        "derived_from": "",
    }
    for k, v in kw.items():
        if k in ("quality",):
            rec["scores"] = {**rec["scores"], k: v}
        else:
            rec[k] = v
    return rec


def run(records: list[dict], selection_toml: str, shard: str = "web-00000") -> np.ndarray:
    table = metadata_table(records, shard, [10] * len(records))
    con = duckdb.connect()
    con.register("stored", table)
    return select_rows(con, parse_inline(selection_toml), {shard: len(records)})[shard]


def test_an_empty_selection_keeps_every_stored_document_except_contaminated_ones():
    recs = [record(i) for i in range(5)]
    recs[3]["annotations"] = [
        {"stage": "decontaminate", "name": "contaminated:mmlu", "value": 20, "verdict": "fail"},
        {"stage": "decontaminate", "name": "contaminated_item:mmlu", "value": "q7", "verdict": "info"},
    ]
    assert run(recs, "").tolist() == [True, True, True, False, True]
    assert run(recs, "include_contaminated = true").all()


def test_thresholds_are_global_or_per_language_and_a_missing_score_fails():
    recs = [
        record(i, quality=q, lang=lang)
        for i, (q, lang) in enumerate([(0.1, "en"), (0.3, "en"), (0.1, "fr"), (0.05, "fr")])
    ]
    del recs[1]["scores"]["quality"]
    sel = "min_scores = { quality = 0.2 }\n[min_scores_by_lang.fr]\nquality = 0.08\n"
    assert run(recs, sel).tolist() == [False, False, True, False]
    # a per-language threshold without a global one leaves other languages alone
    assert run(recs, "[max_scores_by_lang.fr]\nquality = 0.07\n").tolist() == [True, True, False, True]


def test_excluding_a_host_removes_the_host_and_its_subdomains_only():
    recs = [
        record(0, url="https://example.org/a"),
        record(1, url="https://www.example.org/b"),
        record(2, url="https://notexample.org/c"),
        record(3, url="https://EXAMPLE.org:8443/d"),
    ]
    assert run(recs, 'exclude_hosts = ["example.org"]').tolist() == [False, False, True, False]


def test_the_opt_out_list_file_is_read_relative_to_the_selection(tmp_path):
    (tmp_path / "optout.txt").write_text("# hosts that asked\nsite1.example.org\n\n")
    (tmp_path / "sel.toml").write_text('exclude_hosts_file = "optout.txt"\n')
    sel = load_selection(tmp_path / "sel.toml")
    assert sel.exclude_hosts == ("site1.example.org",)
    assert "site1.example.org" in sel.canonical()["exclude_hosts"]


def test_a_knowledge_cutoff_is_global_or_per_source():
    recs = [
        record(0, crawl_date="2026-01-10"),
        record(1, crawl_date="2026-07-01"),
        record(2, crawl_date="2026-07-01", source="perl-doc"),
        record(3, crawl_date=""),
    ]
    assert run(recs, 'crawl_date_max = "2026-06-30"').tolist() == [True, False, False, False]
    by_source = "[crawl_date_max_by_source]\nweb = 2026-06-30\n"
    assert run(recs, by_source).tolist() == [True, False, True, False]


def test_licence_classes_and_sources_are_selections():
    recs = [
        record(0, license_hint="MIT"),
        record(1, license_hint="CC-BY-NC-4.0"),
        record(2, source="perl-doc"),
    ]
    sel = 'allowed_licence_classes = ["permissive", "unknown"]'
    assert run(recs, sel).tolist() == [True, False, True]
    assert run(recs, 'exclude_sources = ["perl-doc"]').tolist() == [True, True, False]


def test_code_is_selected_by_default_only_under_a_permissive_licence_and_other_tiers_are_not_limited():
    def code(i: int, licence: str) -> dict:
        return record(i, source="code", source_tier="code", url=f"repo://r{i}/", license_hint=licence)

    recs = [
        record(0),  # web, no licence: unknown, selected as before
        code(1, "MIT"),
        code(2, "CC0-1.0"),
        code(3, "MPL-2.0"),
        code(4, "GPL-2.0-or-later"),
        code(5, "NOASSERTION"),  # a licence file nothing recognised: unknown
        code(6, "NONE"),  # no licence at all: none
    ]
    assert run(recs, "").tolist() == [True, True, True, False, False, False, False]
    weak = 'allowed_licence_classes_by_tier = { code = ["public_domain", "permissive", "weak_copyleft"] }'
    assert run(recs, weak).tolist() == [True, True, True, True, False, False, False]
    everything = 'allowed_licence_classes_by_tier = { code = ["permissive", "strong_copyleft", "none"] }'
    assert run(recs, everything).tolist() == [True, True, False, False, True, False, True]
    # a tier given beside the default keeps the default for code
    assert parse_inline('allowed_licence_classes_by_tier = { web = ["unknown"] }').canonical()[
        "allowed_licence_classes_by_tier"
    ] == {"code": ["permissive", "public_domain"], "web": ["unknown"]}


def test_a_per_language_quantile_keeps_the_stated_share_of_each_language_within_one_document():
    recs = [record(i, lang="en" if i < 37 else "fr", quality=((i * 7919) % 101) / 101) for i in range(60)]
    sel = parse_inline('[[top_fraction]]\nscore = "quality"\nkeep = 0.35\nby_lang = { fr = 0.5 }\n')
    bits = run(recs, '[[top_fraction]]\nscore = "quality"\nkeep = 0.35\nby_lang = { fr = 0.5 }\n')
    en, fr = bits[:37], bits[37:]
    assert abs(int(en.sum()) - 0.35 * 37) <= 1 and abs(int(fr.sum()) - 0.5 * 23) <= 1
    # and it is the top of each language by the score
    q = np.array([r["scores"]["quality"] for r in recs])
    assert q[:37][en].min() >= q[:37][~en].max()
    assert sel.top_fraction[0].by_lang == {"fr": 0.5}


def test_the_quantile_is_taken_among_the_documents_the_row_rules_kept():
    recs = [
        record(i, quality=i / 10, url=f"https://{'gone' if i >= 5 else 'kept'}.org/{i}") for i in range(10)
    ]
    bits = run(recs, 'exclude_hosts = ["gone.org"]\n[[top_fraction]]\nscore = "quality"\nkeep = 0.4\n')
    assert np.flatnonzero(bits).tolist() == [3, 4]


def test_a_cluster_keeps_its_best_selected_member_so_an_excluded_representative_hands_over():
    recs = [
        record(0, dup_cluster_id="c1", dup_cluster_size=3, quality=0.9, url="https://optout.org/x"),
        record(1, dup_cluster_id="c1", dup_cluster_size=3, quality=0.5),
        record(
            2, dup_cluster_id="c1", dup_cluster_size=3, quality=0.7, source_tier="curated", source="books"
        ),
        record(3),
    ]
    # curated beats web whatever the quality (minhash_dedup's order)
    assert run(recs, "").tolist() == [False, False, True, True]
    assert run(recs, 'exclude_sources = ["books"]').tolist() == [True, False, False, True]
    assert run(recs, 'exclude_sources = ["books"]\nexclude_hosts = ["optout.org"]').tolist() == [
        False,
        True,
        False,
        True,
    ]
    assert run(recs, 'near_duplicates = "all"').tolist() == [True, True, True, True]


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("min_quality = 0.1", "unknown key(s) min_quality; known: min_scores"),
        ('min_scores = { quality = "high" }', "min_scores.quality must be a finite number"),
        ('crawl_date_max = "last year"', "crawl_date_max must be a date YYYY-MM-DD"),
        ('allowed_licence_classes = ["free"]', "unknown licence class(es) free"),
        ('allowed_licence_classes_by_tier = { code = ["copyleft"] }', "unknown licence class(es) copyleft"),
        (
            'allowed_licence_classes_by_tier = ["permissive"]',
            "allowed_licence_classes_by_tier must be a table",
        ),
        ("[[top_fraction]]\nkeep = 0.5\n", 'top_fraction[0] needs score = "NAME"'),
        ('[[top_fraction]]\nscore = "quality"\nkeep = 2\n', "top_fraction[0].keep must be a share"),
        ('near_duplicates = "none"', "near_duplicates must be one of representative, all"),
        ('prefer = "newest"', 'prefer must be a table of source = "first" or "newest"'),
        ('prefer = { web = "latest" }', "prefer.web must be one of first, newest, not 'latest'"),
        ("prefer = { web = 1 }", "prefer.web must be one of first, newest, not 1"),
        ('[prefer]\nweb = ["newest"]\n', "prefer.web must be one of first, newest"),
        ('prefr = { web = "newest" }', "unknown key(s) prefr; known: "),
        (
            'near_duplicates = "all"\nprefer = { web = "newest" }',
            'prefer chooses which copy of a near-duplicate group is kept, and near_duplicates = "all"',
        ),
    ],
)
def test_a_malformed_selection_is_a_one_line_error_naming_the_key(toml, message):
    with pytest.raises(UserError) as e:
        parse_inline(toml)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_selection_naming_an_unknown_column_lists_the_known_ones():
    with pytest.raises(UserError, match=r"unknown column\(s\) qualty; known: .*quality"):
        run([record(0)], "min_scores = { qualty = 0.1 }")


def test_values_are_parameters_never_sql():
    """Spliced into the SQL, the language would read ``lang IN ('de') OR TRUE`` and keep the English
    document (a host is checked as a hostname before it gets this far: tests/versions/test_optout_lists.py)."""
    recs = [record(0, url="https://x.org/a")]
    assert run(recs, 'langs = ["de\') OR TRUE --"]').tolist() == [False]
    assert run(recs, "exclude_sources = [\"web', 'x\"]").tolist() == [True]  # spliced: NOT IN ('web', 'x')


def test_the_canonical_form_ignores_spelling_and_order():
    a = parse_selection({"exclude_hosts": ["B.org", "a.org"], "min_scores": {"quality": 0.1}})
    b = parse_selection({"min_scores": {"quality": 0.1}, "exclude_hosts": ["a.org", "b.org", "a.org"]})
    assert a.digest == b.digest
    assert a.digest != parse_selection({"min_scores": {"quality": 0.2}}).digest


def test_an_exact_copys_origin_keeps_the_stored_document_when_the_keepers_origin_is_excluded():
    from corpus.select.provenance import copy_record
    from tests.documents import make_doc

    recs = [record(i, url=f"https://keeper{i}.example.org/p", crawl_date="2026-05-01") for i in range(4)]
    for r in recs[:2]:  # exact dedup kept these for their copies (then a later stage changed their text)
        r["annotations"] = [
            {"stage": "exact_dedup", "name": "keeper_id", "value": f"kept-{r['doc_id']}", "verdict": "info"}
        ]
    copy = make_doc("t", source="mirror", url="https://mirror.example.net/p", crawl_date="2026-01-15")
    copies = pa.Table.from_pylist([copy_record(copy, f"kept-{r['doc_id']}") for r in recs[:2]])
    table = metadata_table(recs, "web-00000", [10] * len(recs))

    def run_with_copies(selection_toml: str) -> list[bool]:
        con = duckdb.connect()
        con.register("stored", table)
        con.register("copy_rows", copies)  # as connect() reads copies/: crawl_date a DATE
        con.execute(
            "CREATE VIEW copies AS SELECT * REPLACE (CAST(crawl_date AS DATE) AS crawl_date) FROM copy_rows"
        )
        return select_rows(con, parse_inline(selection_toml), {"web-00000": len(recs)})["web-00000"].tolist()

    assert run_with_copies('exclude_hosts = ["keeper0.example.org", "keeper2.example.org"]') == [
        True,
        True,
        False,
        True,
    ]
    assert run_with_copies('exclude_hosts = ["keeper0.example.org", "mirror.example.net"]') == [
        False,
        True,
        True,
        True,
    ]
    # a cutoff before the keeper's date: the earlier copy vouches for documents 0 and 1
    assert run_with_copies('crawl_date_max = "2026-02-01"') == [True, True, False, False]
    # every rule must hold for one origin: the copy is early enough but its source is excluded
    assert run_with_copies('crawl_date_max = "2026-02-01"\nexclude_sources = ["mirror"]') == [False] * 4


def test_two_stored_documents_sharing_a_doc_id_are_told_apart_by_place_on_every_run():
    """line_dedup can make two texts identical after exact_dedup ran, so two stored documents of one
    cluster can share a doc_id and so a representative key: the representative is then the first by
    (shard, index), whatever order DuckDB reads the rows in (it read them in another order on each run
    of a 12,000-document build before the query said so)."""
    twin = {"doc_id": "ab" * 16, "dup_cluster_id": "ab" * 16, "dup_cluster_size": 2}
    first = metadata_table([record(1, **twin)], "web-00000", [10])
    second = metadata_table([record(2), record(1, **twin)], "web-00001", [10, 10])
    con = duckdb.connect()
    con.register("stored", pa.concat_tables([second, first]))  # the later place is read first
    docs = {"web-00000": 1, "web-00001": 2}
    for _ in range(5):
        bits = select_rows(con, parse_inline('near_duplicates = "representative"'), docs)
        assert bits["web-00000"].tolist() == [True] and bits["web-00001"].tolist() == [True, False]
