"""Distributed connected components: every node learns the minimum node of its component.

Nodes are byte strings compared lexicographically (doc_ids as 16 raw bytes, so the minimum node is the
minimum doc_id). The result is a mathematical property of the edge set, so it is the same whatever the
rank count and however the edges were spread over the ranks.

Algorithm:

1. **Local union-find.** Each rank contracts its own edges: union-find with the smaller node as root,
   then one edge (node, root) per node. Connectivity is unchanged and most edges of a dedup workload
   (stars inside LSH buckets) collapse here.
2. **Large-star / small-star rounds** (Kiveris et al., "Connected Components in MapReduce and Beyond",
   SoCC 2014). Each round shuffles every edge to the owners of both endpoints (``shuffle_by_key``), so
   the owner of node u sees its whole neighbourhood N(u), and rewrites u's edges:
   *large-star* links every larger neighbour of u to m = min(N(u) + u);
   *small-star* links u and its smaller neighbours to the smallest of them.
   Both keep connectivity; alternated they converge in O(log^2 n) rounds to one star per component,
   centred on its minimum.
3. **Fixpoint.** Every round checks (one ``allreduce``) whether the edge set already is such a set of
   stars: no node with a smaller neighbour has a second neighbour. Then each node's label is the
   smallest of itself and its neighbours, held by the node's owner rank.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

from corpus.dedup.union_find import UnionFind
from mpi_kernels.shuffle import shuffle_by_key

MAX_ROUNDS = 200


def local_components(edges: Iterable[tuple[bytes, bytes]]) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
    """Contract edges to one (node, min) star per local component; also the nodes seen only in self-loops."""
    uf = UnionFind()
    for u, v in edges:
        if u != v:
            uf.union(u, v)
        else:
            uf.find(u)
    stars = list(uf.star_edges())
    in_star = {root for _, root in stars}
    alone = sorted(n for n, p in uf.parent.items() if p == n and n not in in_star)
    return stars, alone


class Components(Iterator[tuple[bytes, bytes]]):
    """(node, label) for the nodes this rank owns, sorted by node; ``rounds`` exchanges were needed."""

    def __init__(self, labels: list[tuple[bytes, bytes]], rounds: int) -> None:
        self.labels = labels
        self.rounds = rounds
        self._it = iter(labels)

    def __next__(self) -> tuple[bytes, bytes]:
        return next(self._it)


def connected_components(
    comm: Any,
    edges: Iterable[tuple[bytes, bytes]],
    *,
    memory_budget_bytes: int = 256 << 20,
    spill_dir: Path | None = None,
) -> Components:
    """Collective: label every node of every edge (on any rank) with the minimum node of its component.

    Each rank passes its share of the edges; each rank gets back (node, label) for the nodes it owns
    (``shuffle_by_key``'s default partition of the node), sorted by node. Self-loops add their node.
    """
    from mpi4py import MPI

    current, alone = local_components(edges)
    for rounds in range(1, MAX_ROUNDS + 1):
        large = rounds % 2 == 1

        def both_directions(es=current):
            for u, v in es:
                yield u, v
                yield v, u

        received = shuffle_by_key(
            comm, both_directions(), memory_budget_bytes=memory_budget_bytes, spill_dir=spill_dir
        )
        nxt: list[tuple[bytes, bytes]] = []
        labels: list[tuple[bytes, bytes]] = []
        stars = True
        for u, group in groupby(received, key=itemgetter(0)):
            nbrs = sorted({v for _, v in group})
            m = min(nbrs[0], u)
            labels.append((u, m))
            if nbrs[0] < u and len(nbrs) > 1:
                stars = False
            if large:
                nxt.extend((v, m) for v in nbrs if v > u)
            else:
                smaller = [v for v in nbrs if v < u]
                if smaller:
                    nxt.extend((v, m) for v in (*smaller, u) if v != m)
        if not comm.allreduce(0 if stars else 1, op=MPI.SUM):
            return Components(_with_alone(comm, labels, alone, memory_budget_bytes, spill_dir), rounds)
        current = nxt
    raise RuntimeError(f"connected components did not converge in {MAX_ROUNDS} rounds")


def _with_alone(
    comm: Any, labels: list[tuple[bytes, bytes]], alone: list[bytes], budget: int, spill_dir: Path | None
) -> list[tuple[bytes, bytes]]:
    """Nodes seen only in self-loops on some rank: their own component unless an edge elsewhere joined
    them to one (the same owner as ``labels``: both shuffles use the default partition)."""
    if not comm.allreduce(len(alone)):
        return labels
    received = shuffle_by_key(
        comm, ((u, b"") for u in alone), memory_budget_bytes=budget, spill_dir=spill_dir
    )
    known = dict(labels)
    for u, _ in received:
        known.setdefault(u, u)
    return sorted(known.items())
