"""A large gzipped WARC file is cut into units at record boundaries found by content, dealt to every
rank: the same records, the same documents and the same bytes on any rank count."""

from __future__ import annotations

import gzip

import pytest
from warcio.archiveiterator import ArchiveIterator

from corpus.text.warc import BadRecord, iter_warc
from corpus.text.warc_units import warc_units
from tests.stages.chain import docs, manifest, reconciles, run_stage

UNIT = 1 << 20
#: a first crawl and the recrawl of the same sites (the second fetches many pages unchanged)
RECRAWLED = ("crawl-2026-03-part0.warc.gz", "crawl-2026-06.warc.gz")


@pytest.fixture(scope="module")
def crawl(shared_data):
    return shared_data / "warc" / "crawl-2026-03-part0.warc.gz"


def record_offsets(path) -> set[int]:
    with open(path, "rb") as f:
        it = ArchiveIterator(f)
        return {it.get_record_offset() for _ in it}


def items(path, span=None):
    return [
        (type(x).__name__, getattr(x, "url", ""), getattr(x, "reason", ""), getattr(x, "raw_digest", ""))
        for x in iter_warc(path, span=span)
    ]


def test_the_units_tile_the_file_and_each_starts_at_a_record(crawl):
    units = warc_units(crawl, UNIT)
    size = crawl.stat().st_size
    assert len(units) == -(-size // UNIT)
    assert units[0][0] == 0 and units[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(units, units[1:], strict=False))
    assert {start for start, _ in units} <= record_offsets(crawl)


def test_a_small_or_uncompressed_file_is_one_unit(crawl, tmp_path):
    assert warc_units(crawl, crawl.stat().st_size) == [(0, crawl.stat().st_size)]
    plain = tmp_path / "plain.warc"
    plain.write_bytes(gzip.decompress(crawl.read_bytes()))
    assert warc_units(plain, UNIT) == [(0, plain.stat().st_size)]


def test_the_units_read_every_record_of_the_file_once_in_order(crawl):
    assert [x for span in warc_units(crawl, UNIT) for x in items(crawl, span)] == items(crawl)


def test_a_damaged_record_at_a_unit_s_start_is_reported_once_by_that_unit(crawl, tmp_path):
    data = bytearray(crawl.read_bytes())
    start = warc_units(crawl, UNIT)[2][0]
    data[start + 1500 : start + 1600] = bytes(100)  # inside the member, past the probe's first bytes
    damaged = tmp_path / "damaged.warc.gz"
    damaged.write_bytes(bytes(data))
    units = warc_units(damaged, UNIT)
    assert units[2][0] == start
    split = [x for span in units for x in items(damaged, span)]
    assert split == items(damaged)
    assert sum(x[0] == BadRecord.__name__ for x in split) == 1
    assert [x for x in items(damaged, units[1]) if x[0] == BadRecord.__name__] == []


def test_a_one_file_crawl_is_ingested_on_every_rank_with_the_bytes_of_one_rank(shared_data, tmp_path):
    """A crawl and its recrawl in one file (gzip members concatenate): its units collapse the same
    recrawls as the file read whole, each repeat in the unit that holds it."""
    (tmp_path / "in").mkdir()
    crawl = tmp_path / "in" / "crawls.warc.gz"
    crawl.write_bytes(b"".join((shared_data / "warc" / n).read_bytes() for n in RECRAWLED))
    cfg = tmp_path / "units.toml"
    cfg.write_text(f"[ingest]\nunit_bytes = {UNIT}\n")
    run_stage("ingest", 1, [tmp_path / "in"], tmp_path / "whole")  # the default: a 12 MB file is one unit
    run_stage("ingest", 1, [tmp_path / "in"], tmp_path / "one", cfg)
    run_stage("ingest", 2, [tmp_path / "in"], tmp_path / "two", cfg)
    one, two, whole = manifest(tmp_path / "one"), manifest(tmp_path / "two"), manifest(tmp_path / "whole")
    assert len(whole["outputs"]) == 1 and len(one["outputs"]) == len(warc_units(crawl, UNIT))
    assert [o["sha256"] for o in one["outputs"]] == [o["sha256"] for o in two["outputs"]]
    assert one["totals"] == two["totals"] == whole["totals"] and reconciles(one["totals"])
    assert whole["totals"]["filtered"]["recrawl_duplicate"] == whole["extra"]["recrawl_duplicates"] > 0
    assert all(two["run_info"]["processed_by_rank"][r] for r in ("0", "1"))
    assert [d.doc_id for d in docs(tmp_path / "one")] == [d.doc_id for d in docs(tmp_path / "whole")]
