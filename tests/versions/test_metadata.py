"""The metadata table: row i is document i of its shard, every value a selection can name is a column,
and its bytes depend only on the records (the same on any number of ranks, any day)."""

from __future__ import annotations

import pytest

from corpus.dedup.order import encode_representative_key
from corpus.formats.metadata import FIXED_COLUMNS, metadata_table, write_metadata
from corpus.model import Document
from corpus.select.provenance import host_of
from tests.versions.test_selection import record


def test_row_i_describes_document_i_with_its_token_count():
    recs = [record(i) for i in range(4)]
    t = metadata_table(recs, "web-00007", [5, 6, 7, 8])
    assert t.column("index").to_pylist() == [0, 1, 2, 3]
    assert t.column("shard").to_pylist() == ["web-00007"] * 4
    assert t.column("tokens").to_pylist() == [5, 6, 7, 8]
    assert t.column("doc_id").to_pylist() == [r["doc_id"] for r in recs]
    assert t.column_names[: len(FIXED_COLUMNS)] == list(FIXED_COLUMNS)
    assert "quality" in t.column_names


def test_every_score_is_a_column_and_a_missing_score_is_null():
    recs = [record(0), record(1)]
    recs[1]["scores"] = {"word_count": 12.0}
    t = metadata_table(recs, "s", [1, 1])
    assert t.column("quality").to_pylist() == [0.0, None]
    assert t.column("word_count").to_pylist() == [None, 12.0]


def test_contamination_copies_and_licence_come_from_the_lineage():
    rec = record(
        1,
        license_hint="Artistic-1.0-Perl OR GPL-1.0-or-later",
        annotations=[
            {"stage": "exact_dedup", "name": "copies", "value": 3, "verdict": "pass"},
            {"stage": "decontaminate", "name": "contaminated:gsm8k", "value": 14, "verdict": "fail"},
            {
                "stage": "decontaminate",
                "name": "contaminated_item:gsm8k",
                "value": "test/42",
                "verdict": "info",
            },
            {"stage": "decontaminate", "name": "contaminated:mmlu", "value": 30, "verdict": "fail"},
            {"stage": "decontaminate", "name": "contaminated_item:mmlu", "value": "q9", "verdict": "info"},
        ],
    )
    row = metadata_table([rec], "s", [1]).to_pylist()[0]
    assert (row["copies"], row["licence_class"]) == (3, "permissive")
    assert (row["contaminated_benchmark"], row["contaminated_run"], row["contaminated_item"]) == (
        "mmlu",
        30,
        "q9",
    )


def test_the_representative_key_orders_like_minhash_dedup():
    recs = [record(0, quality=0.9), record(1, quality=0.2, source_tier="curated"), record(2, quality=0.95)]
    keys = metadata_table(recs, "s", [1, 1, 1]).column("representative_key").to_pylist()
    docs = [
        Document(
            doc_id=r["doc_id"],
            source=r["source"],
            source_tier=r["source_tier"],
            url="",
            text="",
            crawl_date=r["crawl_date"],
            raw_digest="",
            text_digest="",
            scores=r["scores"],
        )
        for r in recs
    ]
    assert keys == [encode_representative_key(d).hex() for d in docs]
    assert sorted(range(3), key=keys.__getitem__) == [1, 2, 0]


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://Example.ORG:8443/a?b", "example.org"),
        ("http://user:pw@www.example.org./x", "www.example.org"),
        ("perldoc://perlfunc", "perlfunc"),
        ("not a url", ""),
    ],
)
def test_the_host_is_the_unit_of_an_opt_out(url, host):
    assert host_of(url) == host


def test_a_score_named_like_a_column_is_refused():
    rec = record(0)
    rec["scores"] = {"tokens": 1.0}
    with pytest.raises(ValueError, match="collide"):
        metadata_table([rec], "s", [1])


def test_the_file_bytes_depend_only_on_the_records(tmp_path):
    recs = [record(i) for i in range(3)]
    write_metadata(metadata_table(recs, "s", [1, 2, 3]), tmp_path / "a.parquet")
    write_metadata(metadata_table(recs, "s", [1, 2, 3]), tmp_path / "b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
