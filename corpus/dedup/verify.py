"""Verification of near-duplicate clusters by estimated Jaccard, and the choice of representative.

LSH proposes pairs; in a component that grew beyond a configured size (a chain through boilerplate, say)
a pair is only trusted when its signatures agree on at least ``threshold`` of their values (the MinHash
estimate of the Jaccard similarity of the shingle sets). The component is then clustered again from the
trusted pairs only.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from corpus.dedup.union_find import UnionFind


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.count_nonzero(a == b)) / a.shape[-1]


def verified_clusters(
    ids: list[bytes], sigs: np.ndarray, bands: int, rows: int, threshold: float, max_leaders: int = 8
) -> list[bytes]:
    """Cluster one oversized component again: members (``ids`` sorted, rows of ``sigs``) sharing a band are
    compared with up to ``max_leaders`` leaders of that bucket (its earliest members that matched no
    other leader) and joined to every leader whose estimated Jaccard reaches ``threshold`` (so chains
    of verified pairs stay connected). Returns each member's new label, the smallest id of its cluster."""
    uf = UnionFind()
    for i in ids:
        uf.find(i)
    for band in range(bands):
        buckets: dict[bytes, list[int]] = defaultdict(list)
        block = np.ascontiguousarray(sigs[:, band * rows : (band + 1) * rows])
        for i in range(len(ids)):
            buckets[block[i].tobytes()].append(i)
        for members in buckets.values():
            if len(members) < 2:
                continue
            leaders: list[int] = []
            for i in members:
                if leaders:
                    agree = np.count_nonzero(sigs[leaders] == sigs[i], axis=1) / sigs.shape[1]
                    hit = np.flatnonzero(agree >= threshold)
                    for h in hit:
                        uf.union(ids[i], ids[leaders[h]])
                    if hit.size:
                        continue
                if len(leaders) < max_leaders:
                    leaders.append(i)
    return [uf.find(i) for i in ids]
