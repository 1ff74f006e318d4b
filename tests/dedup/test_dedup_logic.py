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
from hpc_jobs.minhash_dedup import size_histogram
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
