"""The exact-dedup record round-trips, and its byte order is the keeper order."""

from corpus.dedup.exact_copy import ExactCopy
from corpus.dedup.order import exact_keeper_key
from tests.dedup.dedup_corpus import make_doc


def test_an_exact_copy_round_trips_through_its_bytes():
    c = ExactCopy.of(make_doc("some text", 3, crawl_date="2026-03-01"), 17, "part-003")
    assert ExactCopy.decode(c.encode()) == c
    assert (c.ordinal, c.shard, c.date) == (17, "part-003", "2026-03-01")


def test_byte_order_is_keeper_order():
    docs = [
        make_doc("t", 1, crawl_date="2026-06-01"),
        make_doc("t", 2, crawl_date="2026-03-01", source="perl-doc", tier="curated"),
        make_doc("t", 3, crawl_date="2026-03-01"),
        make_doc("t", 4, crawl_date=""),  # undated: last
    ]
    by_bytes = sorted(docs, key=lambda d: ExactCopy.of(d, 0, "s").encode())
    assert by_bytes == sorted(docs, key=exact_keeper_key)
