"""The incremental benchmark's generated mode (bench/bench_incremental.py --generated), its pure parts only:
the split of one generator call into base and delta, what the delta shares with the base, the stage
times from the manifests' finish stamps, and the table. No build runs here."""

from __future__ import annotations

import pytest

from bench.bench_incremental import (
    build_facts,
    format_generated,
    planted_overlap,
    split_generated,
    stage_seconds,
    utc_seconds,
)
from bench.bench_scale import GenDoc, Mix, Page, generate


def gen(index, text, kind="original", of=-1):
    return GenDoc(index, "web", f"https://x.example/{index}", text, kind, of)


@pytest.fixture(scope="module")
def pages():
    """Made-up pages of distinct words: the generator needs lines, not real text, to plant its copies."""
    return [
        Page(
            "web",
            f"https://p.example/{p}",
            tuple(" ".join(f"w{p}x{i}y{j}" for j in range(12)) for i in range(60)),
        )
        for p in range(40)
    ]


def test_split_keeps_order_and_indices():
    docs = [gen(i, f"t{i}") for i in range(11)]
    base, delta = split_generated(docs, 10)
    assert [d.index for d in base] == list(range(10))
    assert [d.index for d in delta] == [10]
    with pytest.raises(ValueError):
        split_generated(docs, 11)
    with pytest.raises(ValueError):
        split_generated(docs, 0)


def test_planted_overlap_counts_exact_and_near_copies_of_the_base():
    base = [gen(0, "a"), gen(1, "b"), gen(2, "a", "exact_copy", 0)]
    delta = [
        gen(3, "a", "exact_copy", 0),  # the base's text
        gen(4, "b edited", "near_duplicate", 1),  # a near-duplicate of a base original
        gen(5, "c"),  # new
        gen(6, "c", "exact_copy", 5),  # a copy of a new original: within the delta
    ]
    assert planted_overlap(base, delta) == {
        "base_documents": 3,
        "delta_documents": 4,
        "delta_exact_of_base": 1,
        "delta_near_of_base": 1,
        "delta_planted_copies": 3,
    }


def test_one_call_split_points_most_of_the_deltas_copies_into_the_base(pages):
    """Why the bench generates N + N/10 in one call: the delta's planted copies are then mostly copies of
    (or copied by) base documents, about N / (N + N/10) of them."""
    n = 1000
    docs, _ = generate(pages, n + n // 10, seed=3, mix=Mix(min_words=40, max_words=120))
    base, delta = split_generated(docs, n)
    p = planted_overlap(base, delta)
    shared = p["delta_exact_of_base"] + p["delta_near_of_base"]
    assert p["delta_planted_copies"] >= 15  # ~25 % of 100
    assert shared >= 0.7 * p["delta_planted_copies"]
    assert {d.url for d in base}.isdisjoint(d.url for d in delta)


def test_stage_seconds_from_finish_stamps():
    t0 = utc_seconds("2026-12-02T10:00:00Z")
    assert t0 == 1796205600.0
    finished = [
        ("ingest", "2026-12-02T10:00:05Z"),
        ("extract", "2026-12-02T10:00:09Z"),
        ("exact_dedup", "2026-12-02T10:00:09Z"),
    ]
    assert stage_seconds(t0 + 0.4, finished, t0 + 12.5) == {
        "ingest": 4.6,
        "extract": 4.0,
        "exact_dedup": 0.0,
        "finish": 3.5,
    }
    # a launch stamped after the first finish (whole seconds) never gives a negative time
    assert stage_seconds(t0 + 5.7, finished[:1], t0 + 6.0) == {"ingest": 0.0, "finish": 0.3}


def manifest(stamp, n_in, n_out, peaks=None, extra=None):
    return {
        "run_info": {
            "finished_at": stamp,
            "memory_budget_mb": 64,
            "peak_rss_mb_by_rank": peaks or {"0": 50.0, "1": 51.0},
        },
        "totals": {"in": n_in, "out": n_out},
        "extra": extra or {},
    }


def facts(n_in, seconds, peak, index=None):
    t0 = utc_seconds("2026-12-02T10:00:00Z")
    manifests = {
        "ingest": manifest("2026-12-02T10:00:02Z", n_in, n_in),
        "exact_dedup": manifest(
            "2026-12-02T10:00:04Z", n_in, n_in - 10, {"1": peak, "0": peak - 1}, {"index": index or {}}
        ),
        "minhash_dedup": manifest("2026-12-02T10:00:06Z", n_in - 10, n_in - 10, {"0": 70.0, "1": 71.0}),
        "write_shards": manifest("2026-12-02T10:00:07Z", n_in - 10, n_in - 12),
    }
    return build_facts(manifests, t0, t0 + seconds)


def test_build_facts_reads_what_the_table_needs():
    f = facts(100, 9.0, 80.0, {"base_keys": 5})
    assert f["wall_s"] == 9.0
    assert f["stages_s"] == {
        "ingest": 2.0,
        "exact_dedup": 2.0,
        "minhash_dedup": 2.0,
        "write_shards": 1.0,
        "finish": 2.0,
    }
    assert f["peak_mb_by_rank"] == {"exact_dedup": [79.0, 80.0], "minhash_dedup": [70.0, 71.0]}
    assert f["docs_in"] == 100
    assert f["exact_dedup"] == {"in": 100, "out": 90}
    assert f["stored"] == 88
    assert f["index"] == {"base_keys": 5}
    assert f["budget_mb"] == 64


def result(delta_seconds):
    index = {"base_keys": 7, "base_duplicates": 9, "base_records": 100, "base_generations": ["g000001"]}
    return {
        "ranks": 2,
        "budget_mb": 64,
        "partitions": 2,
        "seed": 0,
        "planted": {
            "base_documents": 100,
            "delta_documents": 10,
            "delta_exact_of_base": 2,
            "delta_near_of_base": 1,
            "delta_planted_copies": 3,
        },
        "load_avg": {"base": [3.0, 2.5, 2.0]},
        "builds": {
            "base": facts(100, 40.0, 80.0),
            "delta": facts(10, delta_seconds, 82.0, index),
            "full": facts(110, 50.0, 80.0),
        },
    }


def test_the_table_has_every_build_every_stage_and_the_ratio():
    table = format_generated(result(10.0))
    lines = table.splitlines()
    assert lines[0] == "| | base (full build) | delta (`--base`) | base + delta (full build) | delta / full |"
    assert "| **whole build, wall s** | **40.0** | **10.0** | **50.0** | **20.0%** |" in lines
    assert "| exact_dedup peak MB per rank | 79 / 80 | 81 / 82 | 79 / 80 | 102.5% |" in lines
    assert "| minhash_dedup peak MB per rank | 70 / 71 | 70 / 71 | 70 / 71 | 100.0% |" in lines
    assert "| documents in | 100 | 10 | 110 | 9.1% |" in lines
    for stage in ("ingest", "exact_dedup", "minhash_dedup", "write_shards"):
        assert any(line.startswith(f"| {stage}, s |") for line in lines)
    assert any(line.startswith("| after the last stage") for line in lines)
    assert "target ≤ 25% met" in table
    assert "found 7 of its keys in the base" in table and "tagged 9 documents" in table
    assert "load" in table.lower()


def test_a_missed_target_is_said_not_raised():
    assert "Incremental / full = 60.0% (whole builds): target ≤ 25% missed." in format_generated(result(30.0))


def test_repeated_pairs_are_listed_and_the_verdict_is_their_median():
    r = result(10.0)  # the table's pair: 20 %
    r["pairs"] = [
        {
            "order": ["delta", "full"],
            "delta_s": 10.0,
            "full_s": 50.0,
            "share": 0.2,
            "load_avg": {"delta": [3.0]},
        },
        {
            "order": ["full", "delta"],
            "delta_s": 15.0,
            "full_s": 50.0,
            "share": 0.3,
            "load_avg": {"full": [6.0]},
        },
        {
            "order": ["delta", "full"],
            "delta_s": 14.0,
            "full_s": 50.0,
            "share": 0.28,
            "load_avg": {"delta": [5.0]},
        },
    ]
    table = format_generated(r)
    assert (
        "* pair 2 (full then delta): delta 15.0 s, full 50.0 s, 30.0% (1-min load at the start: full 6.0)"
        in table
    )
    assert "Incremental / full = 28.0% (the median of 3 pairs): target ≤ 25% missed." in table
