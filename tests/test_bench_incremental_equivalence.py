"""The incremental benchmark's equivalence check (bench/bench_incremental.py): every document one default
version selects and the other does not gets its cause, from the metadata rows of both builds alone."""

from __future__ import annotations

from bench.bench_incremental import classify_differences, line_difference


def doc(
    doc_id, url, *, selected=True, base=False, derived="", date="2026-06-01", cluster="", size=1, held=False
):
    return {
        "doc_id": doc_id,
        "url": url,
        "source": "web",
        "tier": "web",
        "crawl_date": date,
        "selected": selected,
        "base": base,
        "derived_from": derived,
        "dup_cluster_id": cluster,
        "dup_cluster_size": size,
        "holdout_copy": held,
    }


def by_id(*docs):
    return {d["doc_id"]: d for d in docs}


def causes(rows):
    return sorted((r["side"], r["doc_id"], r["cause"]) for r in rows)


def test_the_same_selection_has_no_difference():
    same = by_id(doc("a", "u/a", base=True), doc("b", "u/b"))
    assert classify_differences(same, by_id(doc("a", "u/a"), doc("b", "u/b")), {}, {}) == []


def test_a_near_duplicate_the_full_build_clustered_with_a_base_document_is_not_probed():
    inc = by_id(doc("m", "u/m", base=True, date="2026-03-01"), doc("j", "u/j"))
    full = by_id(
        doc("m", "u/m", date="2026-03-01", cluster="m", size=2),
        doc("j", "u/j", selected=False, cluster="m", size=2),
    )
    [row] = classify_differences(inc, full, {}, {})
    assert (row["side"], row["doc_id"], row["cause"]) == ("incremental only", "j", "near_dup_not_probed")
    assert row["full_representative"] == ["m"] and row["full_cluster_size"] == 2


def test_a_june_representative_of_a_cluster_across_crawls_stays_a_member_of_the_base_cluster():
    """Keep-first: the full build's representative is the June page j; the incremental build joined j to the
    base cluster of m (its cluster id is m's), so m stays selected there, j not: both sides are keep-first."""
    inc = by_id(doc("m", "u/m", base=True, date="2026-03-01"), doc("j", "u/j", selected=False, cluster="m"))
    full = by_id(
        doc("m", "u/m", date="2026-03-01", cluster="j", size=2, selected=False),
        doc("j", "u/j", cluster="j", size=2),
    )
    assert causes(classify_differences(inc, full, {}, {})) == [
        ("full only", "j", "near_dup_keep_first"),
        ("incremental only", "m", "near_dup_keep_first"),
    ]


def test_a_june_page_joined_to_a_base_cluster_the_full_build_did_not_verify_is_a_trusted_lsh_match():
    inc = by_id(doc("m", "u/m", base=True, date="2026-03-01"), doc("j", "u/j", selected=False, cluster="m"))
    full = by_id(doc("m", "u/m", date="2026-03-01"), doc("j", "u/j"))
    [row] = classify_differences(inc, full, {}, {})
    assert (row["side"], row["doc_id"], row["cause"]) == ("full only", "j", "near_dup_lsh_trusted")


def test_a_june_page_joined_on_a_text_line_dedup_made_otherwise_is_a_cluster_difference():
    """The join was verified on the delta's text (line_dedup kept lines there that the full build
    removed), so the cause is line_dedup's, not an unverified LSH match."""
    inc = by_id(
        doc("m", "u/m", base=True, date="2026-03-01"),
        doc("j1", "u/j", selected=False, cluster="m", derived="j0"),
    )
    full = by_id(doc("m", "u/m", date="2026-03-01"), doc("j2", "u/j", derived="j0"))
    [row] = classify_differences(inc, full, {}, {})
    assert (row["side"], row["doc_id"], row["cause"]) == ("full only", "j2", "near_dup_cluster_differs")


def test_a_june_page_near_a_base_text_the_full_build_shortened_is_a_base_frozen_difference():
    """The full build removed lines from the March page m (m2) and clustered it with the June page j;
    the incremental build's March page kept its own build's text (m1), which j is not near enough to."""
    inc = by_id(doc("m1", "u/m", base=True, derived="m0", date="2026-03-01"), doc("j", "u/j"))
    full = by_id(
        doc("m2", "u/m", derived="m0", date="2026-03-01", cluster="j", size=2, selected=False),
        doc("j", "u/j", cluster="j", size=2),
    )
    assert causes(classify_differences(inc, full, {}, {})) == [
        ("incremental only", "m1", "near_dup_base_frozen")
    ]


def test_a_cluster_of_one_crawl_that_differs_is_not_a_probe_miss():
    inc = by_id(doc("j1", "u/1", cluster="j1", size=1), doc("j2", "u/2", cluster="j2", size=1))
    full = by_id(
        doc("j1", "u/1", cluster="j2", size=2, selected=False), doc("j2", "u/2", cluster="j2", size=2)
    )
    [row] = classify_differences(inc, full, {}, {})
    assert (row["doc_id"], row["cause"]) == ("j1", "near_dup_cluster_differs")


def test_a_copy_of_a_held_out_page_of_the_other_crawl_is_tagged_by_the_full_build_only():
    inc = by_id(doc("j", "u/arm64"))
    full = by_id(doc("j", "u/arm64", selected=False, held=True))
    [row] = classify_differences(inc, full, {}, {})
    assert (row["doc_id"], row["cause"]) == ("j", "holdout_copy_not_tagged")


def test_a_text_line_dedup_changed_in_one_build_only_is_the_same_document_at_exact_dedup():
    """A base document keeps its own build's text (base-frozen); a delta document's text differing is
    line_dedup counting otherwise."""
    inc = by_id(doc("m1", "u/m", base=True, derived="m0", date="2026-03-01"))  # m0 -> m1 (line_dedup)
    full = by_id(doc("m2", "u/m", derived="m1", date="2026-03-01"))  # m1 there too, then another change
    assert causes(classify_differences(inc, full, {}, {})) == [
        ("full only", "m2", "line_dedup_base_frozen"),
        ("incremental only", "m1", "line_dedup_base_frozen"),
    ]
    inc = by_id(doc("j1", "u/j", derived="j0"))
    full = by_id(doc("j2", "u/j", derived="j0"))
    assert causes(classify_differences(inc, full, {}, {})) == [
        ("full only", "j2", "line_dedup_text_differs"),
        ("incremental only", "j1", "line_dedup_text_differs"),
    ]


def test_keep_first_keeps_the_base_copy_where_the_full_build_keeps_the_other():
    inc = by_id(doc("m", "u/m", base=True, date="2026-03-01"))  # the June copy j was dup_of m
    full = by_id(doc("j", "u/j"))  # the full build kept j, m was its copy
    rows = classify_differences(inc, full, {"j": "m"}, {"m": "j"})
    assert causes(rows) == [
        ("full only", "j", "exact_dup_keep_first"),
        ("incremental only", "m", "exact_dup_keep_first"),
    ]
    assert {r["doc_id"]: r["kept_instead"] for r in rows} == {"j": ["m u/m"], "m": ["j u/j"]}


def test_the_same_text_kept_from_another_fetch_is_keep_first_by_url():
    inc = by_id(doc("d", "u/march", base=True, date="2026-03-01"))  # one text, one source: one doc_id
    full = by_id(doc("d", "u/june"))
    rows = classify_differences(inc, full, {}, {})
    assert sorted((r["side"], r["url"], r["cause"]) for r in rows) == [
        ("full only", "u/june", "exact_dup_keep_first"),
        ("incremental only", "u/march", "exact_dup_keep_first"),
    ]


def test_another_fetch_of_the_same_url_is_a_recrawl_and_anything_else_is_other():
    inc = by_id(doc("m", "u/x", base=True, date="2026-03-01"), doc("lone", "u/lone"))
    full = by_id(doc("j", "u/x", date="2026-06-01"))
    rows = {r["doc_id"]: r for r in classify_differences(inc, full, {}, {})}
    assert rows["m"]["cause"] == rows["j"]["cause"] == "recrawl"
    assert rows["m"]["other_crawl_date"] == ["2026-06-01"]
    assert rows["lone"]["cause"] == "other" and "no counterpart" in rows["lone"]["known"]


def test_line_difference_counts_lines_as_multisets():
    assert line_difference("a\nb\nb\nc", "a\nb\nd") == (2, 1)
