"""The pure parts of dedup, without MPI: who wins, how buckets become edges, how clusters are verified."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from corpus.dedup.candidates import bucket_edges
from corpus.dedup.order import (
    encode_exact_keeper_key,
    encode_representative_key,
    exact_keeper_key,
    representative_key,
)
from corpus.dedup.union_find import UnionFind
from corpus.dedup.verify import estimated_jaccard, verified_clusters
from hpc_jobs.minhash_dedup.facts import size_histogram
from mpi_kernels.minhash import MinHasher
from tests.dedup.dedup_corpus import make_doc


def random_docs(n: int, seed: int = 0):
    rnd = random.Random(seed)
    tiers = ["curated", "known_good_web", "web", "no-such-tier"]
    dates = ["2024-01-01", "2026-03-01", "2026-06-01", ""]
    return [
        make_doc(
            f"text {i}",
            i,
            tier=rnd.choice(tiers),
            crawl_date=rnd.choice(dates),
            quality=rnd.choice([None, -1.5, 0.0, 0.25, 0.9, 3.0]),
        )
        for i in range(n)
    ]


def test_byte_encodings_sort_exactly_like_the_keys():
    docs = random_docs(300)
    assert sorted(docs, key=exact_keeper_key) == sorted(docs, key=encode_exact_keeper_key)
    assert sorted(docs, key=representative_key) == sorted(docs, key=encode_representative_key)


def test_representative_prefers_tier_then_quality_then_date_then_id():
    web_best = make_doc("a", 1, tier="web", quality=0.99, crawl_date="2020-01-01")
    curated_poor = make_doc("b", 2, tier="curated", quality=0.1, crawl_date="2026-01-01")
    curated_good = make_doc("c", 3, tier="curated", quality=0.5, crawl_date="2026-01-01")
    curated_good_early = make_doc("d", 4, tier="curated", quality=0.5, crawl_date="2025-01-01")
    order = sorted([web_best, curated_poor, curated_good, curated_good_early], key=representative_key)
    assert order == [curated_good_early, curated_good, curated_poor, web_best]


def test_the_exact_keeper_is_the_most_trusted_tier_then_the_earliest_copy():
    web_early = make_doc("same", 1, tier="web", crawl_date="2025-01-01")
    curated_late = make_doc("same", 2, tier="curated", crawl_date="2026-06-01")
    web_late = make_doc("same", 3, tier="web", crawl_date="2026-06-01")
    assert sorted([web_late, web_early, curated_late], key=exact_keeper_key) == [
        curated_late,
        web_early,
        web_late,
    ]


def test_undated_copies_lose_to_dated_ones():
    dated = make_doc("same", 1, crawl_date="2026-06-01")
    undated = make_doc("same", 2, crawl_date="")
    assert min([undated, dated], key=exact_keeper_key) is dated


def test_small_bucket_is_a_star_around_its_smallest_member():
    members = [b"a", b"b", b"c", b"d"]
    assert list(bucket_edges(b"k", members, cap=10)) == [(b"b", b"a"), (b"c", b"a"), (b"d", b"a")]


def test_hot_bucket_is_split_into_about_cap_sized_stars_deterministically():
    members = sorted(i.to_bytes(4, "big") for i in range(1000))
    edges = list(bucket_edges(b"hot", members, cap=100))
    assert edges == list(bucket_edges(b"hot", members, cap=100))
    uf = UnionFind()
    for u, v in edges:
        uf.union(u, v)
    for m in members:
        uf.find(m)
    sizes = Counter(uf.find(m) for m in members)
    assert len(sizes) == 10 and max(sizes.values()) < 150
    assert len(edges) == len(members) - len(sizes)


def band_rows_of(buckets: dict[bytes, list[bytes]]):
    """BAND_ROW rows of buckets given as {band key: member nodes}, in a scrambled order."""
    from corpus.dedup.records import BAND_ROW, NODE

    pairs = [(k, m) for k, members in buckets.items() for m in members]
    random.Random(5).shuffle(pairs)
    rows = np.zeros(len(pairs), dtype=BAND_ROW)
    rows["key"] = [np.void(k) for k, _ in pairs]
    rows["node"] = np.frombuffer(b"".join(m for _, m in pairs), dtype=NODE)
    return rows


def test_a_bucket_part_gives_the_edges_of_its_buckets_one_by_one():
    """The vectorized stars of a whole bucket part equal ``bucket_edges`` bucket by bucket, in key order,
    hot buckets (above the cap) split the same way, single-member buckets ignored."""
    from corpus.dedup.candidates import bucket_star_edges
    from corpus.dedup.records import EDGE, graph_node

    rnd = random.Random(8)
    node = [graph_node(rnd.randbytes(16), i, "s") for i in range(400)]
    buckets = {
        b"\x00\x01" + rnd.randbytes(16): sorted(rnd.sample(node, size)) for size in (1, 2, 3, 7, 30, 250)
    }
    edges, facts = bucket_star_edges(band_rows_of(buckets), cap=20)
    want = [e for k in sorted(buckets) for e in bucket_edges(k, buckets[k], 20)]
    assert edges.dtype == EDGE
    assert [(e["node"].tobytes(), e["hub"].tobytes()) for e in edges] == want
    assert facts == {
        "shared_buckets": 5,
        "hot_buckets": 2,
        "largest_bucket": 250,
        "candidate_edges": len(want),
    }


def test_verification_splits_a_component_chained_by_one_shared_band():
    """Two unrelated groups of copies that happen to share one band value are not merged."""
    m = MinHasher()
    rnd = random.Random(3)
    base_a = " ".join(f"a{rnd.randrange(10**9)}" for _ in range(200))
    base_b = " ".join(f"b{rnd.randrange(10**9)}" for _ in range(200))
    sigs = m.signatures([base_a, base_a + " tail", base_b, base_b + " end"])
    sigs[2:, 0:8] = sigs[0, 0:8]  # band 0 collides across the groups
    ids = [b"1", b"2", b"3", b"4"]
    assert estimated_jaccard(sigs[0], sigs[2]) < 0.2
    assert verified_clusters(ids, sigs, bands=14, rows=8, threshold=0.65) == [b"1", b"1", b"3", b"3"]


def test_verification_keeps_chains_of_verified_pairs_together():
    """a~b and b~c verified, a and c not: one cluster (connected components of verified pairs)."""
    k = 112
    a = np.arange(k, dtype=np.uint64)
    b = a.copy()
    b[:30] += 1000  # agrees with a on 82/112
    c = b.copy()
    c[30:60] += 2000  # agrees with b on 82/112, with a on 52/112
    labels = verified_clusters([b"a", b"b", b"c"], np.stack([a, b, c]), bands=14, rows=8, threshold=0.65)
    assert estimated_jaccard(a, c) < 0.65 and labels == [b"a", b"a", b"a"]


def one_by_one_verified_clusters(ids, sigs, bands, rows, threshold, max_leaders=8):
    """The verification rule written plainly, member by member (the reference for the chunked one)."""
    uf = UnionFind()
    for i in ids:
        uf.find(i)
    for band in range(bands):
        buckets = {}
        for i in range(len(ids)):
            buckets.setdefault(sigs[i, band * rows : (band + 1) * rows].tobytes(), []).append(i)
        for members in buckets.values():
            leaders = []
            for i in members:
                hits = [h for h in leaders if estimated_jaccard(sigs[h], sigs[i]) >= threshold]
                for h in hits:
                    uf.union(ids[i], ids[h])
                if not hits and len(leaders) < max_leaders:
                    leaders.append(i)
    return [uf.find(i) for i in ids]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chunked_verification_gives_the_member_by_member_result(seed, monkeypatch):
    """Families of noisy copies (some pairs above the threshold, some below) sharing bands, with chunks
    smaller than a bucket so that leaders are found in the middle of a chunk."""
    import corpus.dedup.verify as verify

    monkeypatch.setattr(verify, "CHUNK", 7)
    rng = np.random.default_rng(seed)
    k, n = 112, 300
    bases = rng.integers(0, 2**40, size=(6, k), dtype=np.uint64)
    family = rng.integers(0, 6, size=n)
    sigs = bases[family].copy()
    noise = rng.random((n, k)) < rng.uniform(0.05, 0.5, size=(n, 1))
    sigs[noise] = rng.integers(0, 2**40, size=int(noise.sum()), dtype=np.uint64)
    ids = [i.to_bytes(4, "big") for i in range(n)]
    got = verified_clusters(ids, sigs, bands=14, rows=8, threshold=0.65, max_leaders=3)
    assert got == one_by_one_verified_clusters(ids, sigs, 14, 8, 0.65, max_leaders=3)
    assert 6 <= len(set(got)) < n  # the data has both merges and splits


@pytest.mark.parametrize(
    "sizes,expected", [({2: 5}, {"2": 5}), ({3: 1, 4: 2, 5: 1, 1000: 1}, {"3-4": 3, "5-8": 1, "513-1024": 1})]
)
def test_cluster_size_histogram_in_powers_of_two(sizes, expected):
    assert size_histogram(sizes) == expected


def test_a_malformed_doc_id_is_a_clear_error():
    from dataclasses import replace

    doc = replace(make_doc("x", 1), doc_id="not-an-id")
    with pytest.raises(ValueError, match="not 32 hex characters"):
        encode_representative_key(doc)
