"""Union-find whose root is the smallest member, over byte strings, one union at a time.

The plain reference: tests check the array forms the stage runs (``corpus.dedup.verify.min_roots``,
:mod:`mpi_kernels.union_find`) against it, and the benchmarks cluster their baselines' LSH pairs with it.
"""

from __future__ import annotations

from collections.abc import Iterator


class UnionFind:
    """Union-find whose root is always the smallest member (path halving)."""

    def __init__(self) -> None:
        self.parent: dict[bytes, bytes] = {}

    def find(self, x: bytes) -> bytes:
        parent = self.parent
        if x not in parent:
            parent[x] = x
            return x
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: bytes, b: bytes) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            if rb < ra:
                ra, rb = rb, ra
            self.parent[rb] = ra

    def star_edges(self) -> Iterator[tuple[bytes, bytes]]:
        """(node, root) for every non-root node, in node order."""
        for node in sorted(self.parent):
            root = self.find(node)
            if root != node:
                yield node, root
