"""Inputs in the formats exports are written in (issue 31, item 2): Parquet files and Hugging Face
datasets saved to disk are read a row a record, as JSONL lines are; Dolma/datatrove JSONL keeps url, date
and source under ``metadata``, mapped once per source with ``fields``; an undeclared file is in its
tier's source, not a source named after the file."""

from __future__ import annotations

import datetime as dt
import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus.text.curated import CuratedError, CuratedRecord, iter_jsonl
from corpus.text.sources import DECLARATION_FILE, parse_source_tables
from corpus.text.tables import iter_hf_dataset, iter_parquet
from tests.stages.chain import docs, manifest, reconciles, run_stage

ROWS = [
    {
        "text": "The first page of a table, with enough words to be a page.",
        "url": "https://a.example/1",
        "date": "2026-02-01",
    },
    {
        "text": "A second page that says something else entirely.",
        "url": "https://b.example/2",
        "date": "2026-02-03",
    },
    {"text": "", "url": "https://c.example/3", "date": None},
]
DOLMA = [
    {
        "id": "d1",
        "text": "A Dolma document from one source.",
        "source": "c4",
        "metadata": {"url": "https://d.example/1", "date": "2025-11-30"},
    },
    {
        "id": "d2",
        "text": "Another, from a second source.",
        "source": "stack-exchange",
        "metadata": {"url": "https://e.example/2", "date": "2025-12-01T10:00:00Z"},
    },
    {
        "id": "d3",
        "text": "A source name that names nothing safe.",
        "source": "../etc",
        "metadata": {"url": "https://f.example/3"},
    },
]


def records(it) -> list[tuple]:
    return [(r.text, r.url, r.date) if isinstance(r, CuratedRecord) else r.reason for r in it]


def test_a_parquet_row_reads_as_the_same_record_as_its_jsonl_line(tmp_path):
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "t.parquet")
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    from_table = records(iter_parquet(tmp_path / "t.parquet", "curated://x/t", 1 << 20, {}))
    assert from_table == records(iter_jsonl(tmp_path / "t.jsonl", "curated://x/t"))
    assert from_table[0] == (ROWS[0]["text"], ROWS[0]["url"], "2026-02-01")


def test_a_parquet_row_over_the_record_cap_is_quarantined_and_the_file_goes_on(tmp_path):
    pq.write_table(pa.Table.from_pylist([{"text": "x" * 5000}, ROWS[0]]), tmp_path / "t.parquet")
    got = list(iter_parquet(tmp_path / "t.parquet", "curated://x/t", 1000, {}))
    assert isinstance(got[0], CuratedError) and got[0].reason == "record_too_large"
    assert isinstance(got[1], CuratedRecord) and got[1].text == ROWS[0]["text"]


def test_a_corrupt_parquet_file_is_one_unreadable_record(tmp_path):
    (tmp_path / "t.parquet").write_bytes(b"PAR1 not really")
    (got,) = list(iter_parquet(tmp_path / "t.parquet", "curated://x/t", 1 << 20, {}))
    assert isinstance(got, CuratedError) and got.reason == "unreadable_file"


def test_renamed_and_nested_columns_are_mapped_once_for_the_source(tmp_path):
    """A timestamp column reads as its ISO text, as a JSON line would hold it."""
    fetched = [dt.datetime.fromisoformat(r["date"] + "T10:30:00") for r in ROWS[:2]]
    rows = [
        {"body": r["text"], "meta": {"link": r["url"], "fetched": f}}
        for r, f in zip(ROWS[:2], fetched, strict=True)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    fields = {"text": "body", "url": "meta.link", "date": "meta.fetched"}
    got = records(iter_parquet(tmp_path / "t.parquet", "curated://x/t", 1 << 20, fields))
    assert got == [(r["text"], r["url"], r["date"]) for r in ROWS[:2]]


def test_a_hugging_face_dataset_saved_to_disk_reads_as_its_rows(tmp_path):
    import datasets

    datasets.Dataset.from_list(ROWS[:2]).save_to_disk(str(tmp_path / "hf"))
    got = records(iter_hf_dataset(tmp_path / "hf", "curated://x/hf", 1 << 20, {}))
    assert got == [(r["text"], r["url"], r["date"]) for r in ROWS[:2]]


def test_a_fields_table_names_only_fields_the_reader_knows():
    with pytest.raises(ValueError, match="fields: unknown title"):
        parse_source_tables([{"match": "*", "name": "x", "fields": {"title": "h1"}}])
    with pytest.raises(ValueError, match="key path"):
        parse_source_tables([{"match": "*", "name": "x", "fields": {"url": "metadata..url"}}])


def test_ingest_reads_parquet_hf_datasets_and_dolma_jsonl_declared_once(tmp_path):
    import datasets

    data = tmp_path / "data"
    (data / "dolma").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(ROWS), data / "pages.parquet")
    wiki = [{**r, "url": r["url"].replace("example", "wiki")} for r in ROWS[:2]]  # (one URL is one page)
    datasets.Dataset.from_list(wiki).save_to_disk(str(data / "wiki_hf"))
    with gzip.open(data / "dolma" / "part-0.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in DOLMA)
    (data / "notes.jsonl").write_text(json.dumps({"text": "An undeclared note."}) + "\n")
    (data / "more.jsonl").write_text(json.dumps({"text": "Another undeclared note."}) + "\n")
    (data / DECLARATION_FILE).write_text(
        '[[sources]]\nmatch = "pages.parquet"\nname = "pages"\ntier = "known_good_web"\n'
        '[[sources]]\nmatch = "wiki_hf"\nname = "wiki"\ntier = "books"\nkind = "hf_dataset"\n'
        '[[sources]]\nmatch = "dolma/*.jsonl.gz"\nname = "dolma"\ntier = "web"\n'
        'fields = { url = "metadata.url", date = "metadata.date", source = "source" }\n'
    )
    run_stage("ingest", 2, [data], tmp_path / "out")
    m = manifest(tmp_path / "out")
    assert reconciles(m["totals"])
    got = sorted((d.source, d.source_tier, d.url, d.crawl_date) for d in docs(tmp_path / "out"))
    assert got == sorted(
        [
            ("pages", "known_good_web", ROWS[0]["url"], "2026-02-01"),
            ("pages", "known_good_web", ROWS[1]["url"], "2026-02-03"),
            ("wiki", "books", wiki[0]["url"], "2026-02-01"),
            ("wiki", "books", wiki[1]["url"], "2026-02-03"),
            ("c4", "web", "https://d.example/1", "2025-11-30"),
            ("stack-exchange", "web", "https://e.example/2", "2025-12-01"),
            ("web", "web", "curated://web/notes.jsonl#0", ""),
            ("web", "web", "curated://web/more.jsonl#0", ""),
        ]
    )
    quarantined = sorted(r["reason"] for r in docs(tmp_path / "out", "quarantine"))
    assert quarantined == ["empty_text", "invalid_source"]
    resolved = {v["source"]: v for v in m["extra"]["sources"].values()}
    assert resolved["dolma"]["fields"] == {"date": "metadata.date", "source": "source", "url": "metadata.url"}
    assert resolved["wiki"]["kind"] == "hf_dataset" and "fields" not in resolved["pages"]
