"""The card's check of near-duplicate representatives: the share of clusters whose kept document is
more than 1.2x the cluster's median length, and a sample of them chosen by a hash of the cluster id."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from corpus.report.representatives import representative_lengths

# (cluster, tokens, selected, dup_of): A's representative is twice its median; B's is within 1.2x;
# C has no selected member and D two (no single representative); E is a cluster of one
ROWS = [
    ("A", 100, False, "a1"),
    ("A", 100, False, "a1"),
    ("A", 200, True, ""),
    ("B", 100, False, "b1"),
    ("B", 110, True, ""),
    ("C", 300, False, "c1"),
    ("C", 900, False, ""),
    ("D", 100, True, ""),
    ("D", 900, True, "d1"),
    ("E", 900, True, ""),
    ("", 5000, True, ""),
]


def table(with_selection: bool, reverse: bool = False) -> duckdb.DuckDBPyConnection:
    rows = [(i, *r) for i, r in enumerate(ROWS)][:: -1 if reverse else 1]
    cols = {
        "dup_cluster_id": [r[1] for r in rows],
        "tokens": [r[2] for r in rows],
        "doc_id": [f"d{r[0]:02d}" for r in rows],
        "url": [f"https://x.example/{r[0]}" for r in rows],
        "dup_of": [r[4] for r in rows],
    }
    if with_selection:
        cols["selected"] = [r[3] for r in rows]
    con = duckdb.connect()
    con.register("docs", pa.table(cols))
    return con


def test_a_representative_much_longer_than_its_cluster_is_counted_and_sampled():
    r = representative_lengths(table(with_selection=True))
    assert (r["clusters"], r["longer"]) == (2, 1)  # A and B have one selected member; only A is long
    [a] = r["sample"]
    assert (a["cluster_id"], a["size"], a["median_tokens"], a["representative_tokens"]) == (
        "A",
        3,
        100.0,
        200,
    )
    assert a["url"] == "https://x.example/2"


def test_without_a_version_the_member_no_other_points_at_is_the_representative():
    r = representative_lengths(table(with_selection=False))
    # A: 200 vs 100 (long); B: 110 vs 105; C: 900 vs 600 (long); D: 100 vs 500
    assert (r["clusters"], r["longer"]) == (4, 2)
    assert {s["cluster_id"] for s in r["sample"]} == {"A", "C"}


def test_the_sample_is_the_same_whatever_the_rows_order():
    assert representative_lengths(table(False, reverse=True)) == representative_lengths(table(False))


def test_a_base_singleton_and_the_delta_s_copies_of_it_are_one_cluster():
    """An incremental build tags its near copies of a base singleton with that document's doc_id; the
    base's own row (append-only) has no cluster id: the cluster is the three of them, keep-first."""
    con = duckdb.connect()
    cols = {
        "dup_cluster_id": ["", "base1", "base1"],
        "tokens": [100, 300, 320],
        "doc_id": ["base1", "new1", "new2"],
        "url": [f"https://x.example/{d}" for d in ("base1", "new1", "new2")],
        "dup_of": ["", "base1", "base1"],
        "selected": [True, False, False],
    }
    con.register("docs", pa.table(cols))
    r = representative_lengths(con)
    assert (r["clusters"], r["longer"]) == (1, 0)  # kept: the base's 100 tokens, median 300
    con.execute("DROP VIEW docs")
    con.register("docs", pa.table({**cols, "tokens": [900, 300, 320]}))
    [kept] = representative_lengths(con)["sample"]
    assert (kept["cluster_id"], kept["size"], kept["doc_id"]) == ("base1", 3, "base1")
