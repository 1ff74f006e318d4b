"""Verification of near-duplicate clusters by estimated Jaccard, and the choice of representative.

LSH proposes pairs; in a component that grew beyond a configured size (a chain through boilerplate, say)
a pair is only trusted when its signatures agree on at least ``threshold`` of their values (the MinHash
estimate of the Jaccard similarity of the shingle sets). The component is then clustered again from the
trusted pairs only.

Everything here works on whole arrays: a band's buckets come from one sort, the buckets of two members
(most of them) are compared all at once, larger ones a chunk of members against their leaders at once,
and the clusters are the components of the accepted pairs by array label propagation, so a component
costs no Python work per member.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: members compared with a bucket's leaders at once (bounds the (chunk, leaders, K) comparison)
CHUNK = 4096
#: accepted pairs are folded into the clusters once there are this many per member
FOLD = 2


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.count_nonzero(a == b)) / a.shape[-1]


def band_groups(block: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of ``block`` (n, r) grouped by equal (``groups``, value), groups of two or more only:
    (order, starts, sizes), group g being ``order[starts[g] : starts[g] + sizes[g]]``, row indices
    ascending (a stable sort; the order of the groups does not matter: their pairs are unioned)."""
    block = np.column_stack([groups, np.asarray(block)])
    if len(block) < 2:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, empty
    order = np.lexsort(block.T[::-1])
    ranked = block[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = np.any(ranked[1:] != ranked[:-1], axis=1)
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, len(order)))
    shared = sizes > 1
    return order, starts[shared], sizes[shared]


def verified_roots(
    sigs: Any, bands: int, rows: int, threshold: float, max_leaders: int = 8, groups: np.ndarray | None = None
) -> np.ndarray:
    """Cluster oversized components again: members (rows of ``sigs``, in node order within each
    component) sharing a band are compared with up to ``max_leaders`` leaders of that bucket (its earliest
    members that matched no other leader) and joined to every leader whose estimated Jaccard reaches
    ``threshold`` (so chains of verified pairs stay connected). Returns each member's cluster as the
    smallest member index in it.

    ``groups`` (ascending, one per row; default: one component) verifies many components in one pass:
    a bucket is a band value within one component, so components never join, and a part's thousands of
    small components cost a few array operations per band rather than a few per component.

    ``sigs`` is an (n, K) array or anything indexed like one (``sigs[:, lo:hi]`` for a band's columns,
    ``sigs[index_array]`` for rows): a giant component's signatures may stay memory-mapped on disk.
    A bucket of two compares its pair (all such buckets of a band at once); a larger one compares its
    members with the leaders a chunk at a time, and a member that matches no leader becomes one and the
    rest of the chunk is compared again, so the result is the one-by-one rule's."""
    n, k = sigs.shape
    groups = np.zeros(n, dtype=np.uint64) if groups is None else np.asarray(groups, dtype=np.uint64)
    roots = np.arange(n, dtype=np.int64)
    found: list[tuple[np.ndarray, np.ndarray]] = []
    pending = 0
    for band in range(bands):
        band_pairs = _band_pairs(sigs, band, rows, groups, k, threshold, max_leaders)
        found.extend(band_pairs)
        pending += sum(len(a) for a, _ in band_pairs)
        if pending > FOLD * max(n, 1) or band == bands - 1:
            # fold the pairs into the clusters so far: up to 8 leaders per member and band would
            # otherwise pile up to 8 x bands pairs per member
            moved = np.flatnonzero(roots != np.arange(n))
            a = np.concatenate([moved, *(p[0] for p in found)])
            b = np.concatenate([roots[moved], *(p[1] for p in found)])
            roots = min_roots(n, a, b)
            found, pending = [], 0
    return roots


def _band_pairs(
    sigs: Any, band: int, rows: int, groups: np.ndarray, k: int, threshold: float, max_leaders: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (member, leader) pairs of one band's buckets that agree on ``threshold``."""
    found: list[tuple[np.ndarray, np.ndarray]] = []
    order, starts, sizes = band_groups(sigs[:, band * rows : (band + 1) * rows], groups)
    pairs = starts[sizes == 2]
    for lo in range(0, len(pairs), CHUNK):  # a bucket of two: its second member joins the first
        first, second = order[pairs[lo : lo + CHUNK]], order[pairs[lo : lo + CHUNK] + 1]
        agree = _agreement(np.asarray(sigs[second]), np.asarray(sigs[first]), k) >= threshold
        found.append((second[agree], first[agree]))
    for start, size in zip(starts[sizes > 2].tolist(), sizes[sizes > 2].tolist(), strict=True):
        found.extend(_bucket_pairs(sigs, order[start : start + size], k, threshold, max_leaders))
    return found


def verified_clusters(
    ids: list[bytes], sigs: Any, bands: int, rows: int, threshold: float, max_leaders: int = 8
) -> list[bytes]:
    """:func:`verified_roots` for members named by ``ids`` (sorted): each member's new label, the smallest
    id of its cluster."""
    return [ids[r] for r in verified_roots(sigs, bands, rows, threshold, max_leaders).tolist()]


def _agreement(x: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
    """Estimated Jaccard of each row of ``x`` with the same row of ``y``."""
    return (x == y).sum(axis=1) / k


def _bucket_pairs(
    sigs: Any, members: np.ndarray, k: int, threshold: float, max_leaders: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(member, leader) pairs of one bucket (members ascending) that agree on ``threshold``."""
    first = np.asarray(sigs[members[:1]])
    found, new = scan_leaders(
        lambda lo, hi: np.asarray(sigs[members[1 + lo : 1 + hi]]),
        len(members) - 1,
        first,
        k,
        threshold,
        max_leaders,
    )
    leaders = np.concatenate([members[:1], members[1 + new]])
    return [(members[1 + m], leaders[ld]) for m, ld in found]


def scan_leaders(
    read: Any, n: int, lead_sigs: np.ndarray, k: int, threshold: float, max_leaders: int
) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """The leader rule over ``n`` members of one bucket, in node order, after the bucket's leaders so far
    (``lead_sigs``, in the order they became leaders; none for a bucket that starts here): each member
    is joined to every leader it agrees with on ``threshold``, and one that agrees with none becomes a
    leader while there are fewer than ``max_leaders``. ``read(lo, hi)`` gives the signatures of members
    ``lo:hi``, so a bucket can be scanned in pieces (a chunk at a time here; a bucket split between
    ranks, each with the leaders its predecessor found) with the one-by-one rule's result.

    Returns the (member, leader) pairs found (leader ``j`` the j-th leader overall: those given first,
    then the new ones) and the members that became leaders, in order."""
    lead_sigs = np.asarray(lead_sigs, dtype=np.uint64).reshape(-1, k)
    given = len(lead_sigs)
    found: list[tuple[np.ndarray, np.ndarray]] = []
    new: list[int] = []
    pos = 0
    if not given and n:  # a bucket that starts here: its first member is its first leader
        lead_sigs, pos = read(0, 1).reshape(1, k), 1
        new.append(0)
    while pos < n:
        chunk = read(pos, min(pos + CHUNK, n))
        agree = (chunk[:, None, :] == lead_sigs[None, :, :]).sum(axis=2) / k >= threshold
        matched = agree.any(axis=1)
        # 1. the first member that matches no leader becomes one (while there is room): members after
        #    it must also be compared with it, so the chunk stops there
        stop = len(chunk)
        if len(lead_sigs) < max_leaders and not matched.all():
            stop = int(np.argmin(matched))
        # 2. every member before the stop joins each leader it matches
        row, col = np.nonzero(agree[:stop])
        found.append((pos + row, col))
        if stop < len(chunk):
            new.append(pos + stop)
            lead_sigs = np.concatenate([lead_sigs, chunk[stop : stop + 1]])
            stop += 1
        pos += stop
    return found, np.array(new, dtype=np.int64)


def min_roots(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each of ``n`` nodes, the smallest node of its component under the pairs (a[i], b[i]).

    Array label propagation: every root is hooked under the smallest root it is paired with, then
    pointers jump until each node points at a root; repeated until every pair shares its root. Parents
    only ever decrease, so each tree's root is its smallest node."""
    root = np.arange(n, dtype=np.int64)
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    while True:
        ra, rb = root[a], root[b]
        apart = ra != rb
        if not apart.any():
            return root
        low = np.minimum(ra[apart], rb[apart])
        np.minimum.at(root, ra[apart], low)
        np.minimum.at(root, rb[apart], low)
        while True:
            jumped = root[root]
            if np.array_equal(jumped, root):
                break
            root = jumped
