"""Verification of many components in one pass (``groups``) gives each component's own clusters, and the
array label propagation finds the components of any pairs, rooted at their smallest member."""

from __future__ import annotations

import numpy as np

from corpus.dedup.union_find import UnionFind
from corpus.dedup.verify import min_roots, verified_roots


def families(rng, n, k=112):
    """Noisy copies of a few bases: some pairs above the threshold, some below, shared bands."""
    bases = rng.integers(0, 2**40, size=(4, k), dtype=np.uint64)
    sigs = bases[rng.integers(0, 4, size=n)].copy()
    noise = rng.random((n, k)) < rng.uniform(0.05, 0.5, size=(n, 1))
    sigs[noise] = rng.integers(0, 2**40, size=int(noise.sum()), dtype=np.uint64)
    return sigs


def test_components_verified_together_get_their_own_clusters():
    rng = np.random.default_rng(4)
    parts = [families(rng, n) for n in (2, 3, 40, 7, 120, 2)]
    alone = [verified_roots(p, bands=14, rows=8, threshold=0.65, max_leaders=3) for p in parts]
    offsets = np.cumsum([0] + [len(p) for p in parts])
    groups = np.repeat(np.arange(len(parts)), [len(p) for p in parts])
    together = verified_roots(np.concatenate(parts), 14, 8, 0.65, max_leaders=3, groups=groups)
    # the same signatures in two components never join them, though they share every band
    assert together.tolist() == np.concatenate([r + o for r, o in zip(alone, offsets, strict=False)]).tolist()
    assert len(set(together.tolist())) > len(parts)


def test_min_roots_are_the_union_find_roots():
    rng = np.random.default_rng(1)
    n = 500
    a, b = rng.integers(0, n, size=300), rng.integers(0, n, size=300)
    uf = UnionFind()
    for i in range(n):
        uf.find(i.to_bytes(4, "big"))
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        uf.union(x.to_bytes(4, "big"), y.to_bytes(4, "big"))
    want = [int.from_bytes(uf.find(i.to_bytes(4, "big")), "big") for i in range(n)]
    assert min_roots(n, a, b).tolist() == want
