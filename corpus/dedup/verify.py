"""Verification of near-duplicate clusters by estimated Jaccard, and the choice of representative.

LSH proposes pairs; in a component that grew beyond a configured size (a chain through boilerplate, say)
a pair is only trusted when its signatures agree on at least ``threshold`` of their values (the MinHash
estimate of the Jaccard similarity of the shingle sets). The component is then clustered again from the
trusted pairs only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from corpus.dedup.union_find import UnionFind

#: members compared with a bucket's leaders at once (bounds the (chunk, leaders, K) comparison)
CHUNK = 4096
#: below this many members a band's buckets are grouped with a dict, above it by one sort
SMALL = 64


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.count_nonzero(a == b)) / a.shape[-1]


def band_buckets(block: np.ndarray) -> list[np.ndarray]:
    """The rows of ``block`` (n, r) grouped by equal value: each group's row indices ascending, groups of
    two or more only (their order does not matter: unions commute)."""
    if len(block) < 2:
        return []
    if len(block) < SMALL:  # a small component: a dict is cheaper than a sort
        groups: dict[bytes, list[int]] = {}
        for i, row in enumerate(np.ascontiguousarray(block)):
            groups.setdefault(row.tobytes(), []).append(i)
        return [np.array(g) for g in groups.values() if len(g) > 1]
    flat = np.ascontiguousarray(block).view(f"V{block.shape[1] * block.itemsize}").reshape(-1)
    _, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True)
    order = np.argsort(inverse.reshape(-1), kind="stable")
    groups = np.split(order, np.cumsum(counts)[:-1])
    return [g for g in groups if len(g) > 1]


def verified_clusters(
    ids: list[bytes], sigs: Any, bands: int, rows: int, threshold: float, max_leaders: int = 8
) -> list[bytes]:
    """Cluster one oversized component again: members (``ids`` sorted, rows of ``sigs``) sharing a band are
    compared with up to ``max_leaders`` leaders of that bucket (its earliest members that matched no
    other leader) and joined to every leader whose estimated Jaccard reaches ``threshold`` (so chains
    of verified pairs stay connected). Returns each member's new label, the smallest id of its cluster.

    ``sigs`` is an (n, K) array or anything indexed like one (``sigs[:, lo:hi]`` for a band's columns,
    ``sigs[index_array]`` for rows): a giant component's signatures may stay memory-mapped on disk.
    Members are compared with the leaders a chunk at a time; a member that matches no leader becomes
    one and the rest of the chunk is compared again, so the result is the one-by-one rule's."""
    uf = UnionFind()  # over member indices: ids are sorted, so the smallest index is the smallest id
    for i in range(len(ids)):
        uf.find(i)
    k = sigs.shape[1]
    for band in range(bands):
        for members in band_buckets(np.asarray(sigs[:, band * rows : (band + 1) * rows])):
            _verify_bucket(uf, sigs, members, k, threshold, max_leaders)
    return [ids[uf.find(i)] for i in range(len(ids))]


def _verify_bucket(
    uf: UnionFind, sigs: Any, members: np.ndarray, k: int, threshold: float, max_leaders: int
) -> None:
    leaders: list[int] = [int(members[0])]
    lead_sigs = np.asarray(sigs[np.array(leaders)])
    pos = 1
    while pos < len(members):
        chunk = members[pos : pos + CHUNK]
        agree = (np.asarray(sigs[chunk])[:, None, :] == lead_sigs[None, :, :]).sum(axis=2) / k >= threshold
        matched = agree.any(axis=1)
        # 1. the first member that matches no leader becomes one (while there is room): members after
        #    it must also be compared with it, so the chunk stops there
        stop = len(chunk)
        if len(leaders) < max_leaders and not matched.all():
            stop = int(np.argmin(matched))
        # 2. join every member before the stop to each leader it matches
        for row, col in zip(*np.nonzero(agree[:stop]), strict=True):
            uf.union(int(chunk[row]), leaders[col])
        if stop < len(chunk):
            leaders.append(int(chunk[stop]))
            lead_sigs = np.asarray(sigs[np.array(leaders)])
            stop += 1
        pos += stop
