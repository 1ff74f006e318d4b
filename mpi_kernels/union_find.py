"""Distributed connected components: every node learns the minimum node of its component.

Nodes are fixed-width byte strings compared bytewise (a NODE of ``corpus.dedup.records``: doc_id first,
so the minimum node has the minimum doc_id). The result is a mathematical property of the edge set, so
it is the same whatever the rank count and however the edges were spread over the ranks. Edges are numpy
rows ``(u, v)`` (:func:`pair_dtype`) and every step works on whole arrays, never holding more than one
batch of one node's neighbours. Local contraction, then large-star / small-star rounds (Kiveris et al.,
SoCC 2014) over ``shuffle_array`` until the edges are stars centred on their minimum; the labels are held
by each node's owner rank (:func:`owner_of`). The algorithm step by step: docs/dedup.md (*Connected
components*).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from corpus.dedup.verify import min_roots
from mpi_kernels.shuffle_array import shuffle_array

MAX_ROUNDS = 200
#: rows read back from a round's edge file at once
READ_ROWS = 1 << 16
_MIX = np.uint64(0xFF51AFD7ED558CCD)
_S33 = np.uint64(33)


def pair_dtype(width: int) -> np.dtype:
    """An edge (or a (node, label) pair) of nodes of ``width`` bytes."""
    return np.dtype([("u", f"V{width}"), ("v", f"V{width}")])


def owner_of(nodes: np.ndarray) -> np.ndarray:
    """A hash of each node (a byte field), one u64 per row: its owner is this mod the rank count.
    Every 8-byte word of the node is mixed in, so nodes that share a prefix still spread."""
    raw = np.ascontiguousarray(nodes).view(np.uint8).reshape(len(nodes), -1)
    padded = np.zeros((len(raw), -(-raw.shape[1] // 8) * 8), dtype=np.uint8)
    padded[:, : raw.shape[1]] = raw
    h = np.zeros(len(raw), dtype=np.uint64)
    for word in padded.view("<u8").T:
        h = (h ^ word) * _MIX
        h ^= h >> _S33
    return h


class Components:
    """(node, label) rows (:func:`pair_dtype`: ``u`` the node, ``v`` its label) for the nodes this rank
    owns, sorted by node; ``rounds`` exchanges were needed."""

    def __init__(self, labels: np.ndarray, rounds: int) -> None:
        self.labels = labels
        self.rounds = rounds


def connected_components(
    comm: Any,
    edges: Iterable[np.ndarray],
    *,
    width: int,
    memory_budget_bytes: int = 256 << 20,
    spill_dir: Path | None = None,
) -> Components:
    """Collective: label every node of every edge (on any rank) with the minimum node of its component.

    Each rank passes its share of the edges as batches of :func:`pair_dtype` rows (``width``-byte nodes);
    each rank gets back (node, label) rows for the nodes it owns (:func:`owner_of`), sorted by node.
    A self-loop adds its node. The rounds' edges are spilled under ``spill_dir``, removed at the end."""
    from mpi4py import MPI

    dtype = pair_dtype(width)
    base = Path(spill_dir) if spill_dir is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="components-", dir=base))
    try:
        # each batch is contracted on its own and its stars spilled: a rank holds one batch of edges
        alone_in: list[np.ndarray] = []
        with open(work / "edges-0.bin", "wb") as out:
            for batch in edges:
                stars, loops = local_components([batch], width)
                out.write(stars.tobytes())
                alone_in.append(loops)
        alone = np.unique(np.concatenate([np.empty(0, dtype=f"V{width}"), *alone_in]))
        current = _read_rows(work / "edges-0.bin", dtype)
        for rounds in range(1, MAX_ROUNDS + 1):
            received = shuffle_array(
                comm,
                _both_directions(current, dtype),
                dtype=dtype,
                dest_of=lambda rows: owner_of(rows["u"]),
                order_fields=("u", "v"),
                memory_budget_bytes=memory_budget_bytes,
                spill_dir=work,
            )
            edge_file, label_file = work / f"edges-{rounds}.bin", work / f"labels-{rounds}.bin"
            with open(edge_file, "wb") as out, open(label_file, "wb") as labels:
                stars = _star_round(received, width, rounds % 2 == 1, out, labels)
            (work / f"edges-{rounds - 1}.bin").unlink(missing_ok=True)
            (work / f"labels-{rounds - 1}.bin").unlink(missing_ok=True)
            if not comm.allreduce(0 if stars else 1, op=MPI.SUM):
                found = np.fromfile(label_file, dtype=dtype)
                return Components(_with_alone(comm, found, alone, dtype, memory_budget_bytes, work), rounds)
            current = _read_rows(edge_file, dtype)
        raise RuntimeError(f"connected components did not converge in {MAX_ROUNDS} rounds")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def local_components(edges: Iterable[np.ndarray], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Contract edges to one (node, smallest node) edge per non-smallest node of each component they
    form; also the nodes seen only in self-loops among them (sorted, distinct)."""
    dtype = pair_dtype(width)
    rows = np.concatenate([np.asarray(e).view(dtype) for e in edges] or [np.empty(0, dtype)])
    if not len(rows):
        return rows, np.empty(0, dtype=f"V{width}")
    nodes, inverse = np.unique(np.concatenate([rows["u"], rows["v"]]), return_inverse=True)
    inverse = inverse.reshape(-1)
    a, b = inverse[: len(rows)], inverse[len(rows) :]
    linked = a != b
    roots = min_roots(len(nodes), a[linked], b[linked])
    joined = np.zeros(len(nodes), dtype=bool)
    joined[a[linked]] = joined[b[linked]] = True
    moved = np.flatnonzero(roots != np.arange(len(nodes)))
    stars = np.empty(len(moved), dtype=dtype)
    stars["u"], stars["v"] = nodes[moved], nodes[roots[moved]]
    return stars, nodes[~joined]


def _both_directions(batches: Iterable[np.ndarray], dtype: np.dtype) -> Iterator[np.ndarray]:
    for rows in batches:
        flipped = np.empty(len(rows), dtype=dtype)
        flipped["u"], flipped["v"] = rows["v"], rows["u"]
        yield rows
        yield flipped


def _read_rows(path: Path, dtype: np.dtype) -> Iterator[np.ndarray]:
    with open(path, "rb") as f:
        while True:
            rows = np.fromfile(f, dtype=dtype, count=READ_ROWS)
            if not len(rows):
                return
            yield rows


def _less(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise bytewise a < b of two (n, w) uint8 arrays."""
    differ = a != b
    first = np.argmax(differ, axis=1)
    at = np.arange(len(a))
    return differ.any(axis=1) & (a[at, first] < b[at, first])


def _pairs(u: np.ndarray, v: np.ndarray) -> bytes:
    """Rows (u, v) of two (n, w) uint8 arrays, as the bytes of :func:`pair_dtype` rows."""
    return np.ascontiguousarray(np.concatenate([u, v], axis=1)).tobytes()


def _star_round(
    batches: Iterable[np.ndarray], width: int, large: bool, out: BinaryIO, labels: BinaryIO
) -> bool:
    """One round at the owner of the nodes: ``batches`` are its edges (u, v) sorted by (u, v), duplicates
    included. Writes the rewritten edges to ``out`` and (u, m) for every u to ``labels``; returns
    whether the edges were already stars. A node's neighbourhood may span batches: only its m, its
    last row and how many distinct neighbours it had so far are carried."""
    w = width
    stars = True
    last_row: bytes | None = None  # the previous batch's last row, u and m of its (open) group
    open_u = open_m = b""
    open_count = 0
    for batch in batches:
        raw = np.ascontiguousarray(batch).view(np.uint8).reshape(len(batch), 2 * w)
        fresh = np.ones(len(raw), dtype=bool)
        fresh[1:] = np.any(raw[1:] != raw[:-1], axis=1)
        if last_row is not None and len(raw) and raw[0].tobytes() == last_row:
            fresh[0] = False
        raw = raw[fresh]
        if not len(raw):
            continue
        edges = raw.view(pair_dtype(w)).reshape(-1)
        u, v = (np.ascontiguousarray(edges[node]).view(np.uint8).reshape(-1, w) for node in ("u", "v"))
        starts = np.ones(len(raw), dtype=bool)
        starts[1:] = np.any(u[1:] != u[:-1], axis=1)
        continuing = last_row is not None and u[0].tobytes() == open_u
        starts[0] = not continuing
        group = np.cumsum(starts) - (0 if continuing else 1)  # group 0: the open one when continuing
        heads = np.flatnonzero(starts)
        head_m = np.where(_less(v[heads], u[heads])[:, None], v[heads], u[heads])
        firsts = heads
        m_of_group = head_m
        if continuing:
            firsts = np.append(0, heads)
            m_of_group = np.concatenate([np.frombuffer(open_m, np.uint8).reshape(1, w), head_m])
        m = m_of_group[group]
        counts = np.bincount(group)
        if continuing:
            counts[0] += open_count
        smaller = np.any(m_of_group != u[firsts], axis=1)
        if np.any(smaller & (counts > 1)):
            stars = False
        labels.write(_pairs(u[heads], head_m))
        if large:
            sel = _less(u, v)
            out.write(_pairs(v[sel], m[sel]))
        else:
            sel = _less(v, u) & np.any(v != m, axis=1)
            out.write(_pairs(v[sel], m[sel]))
            linked = _less(head_m, u[heads])  # u itself joins m once, at its group's first row
            out.write(_pairs(u[heads][linked], head_m[linked]))
        last_row, open_u, open_m = raw[-1].tobytes(), u[-1].tobytes(), m[-1].tobytes()
        open_count = int(counts[-1])
    return stars


def _with_alone(
    comm: Any, labels: np.ndarray, alone: np.ndarray, dtype: np.dtype, budget: int, spill_dir: Path
) -> np.ndarray:
    """Nodes seen only in self-loops on some rank: their own component unless an edge elsewhere joined
    them to one (shuffled to the same owner as ``labels``)."""
    if not comm.allreduce(len(alone)):
        return labels
    loops = np.empty(len(alone), dtype=dtype)
    loops["u"] = loops["v"] = alone
    received = shuffle_array(
        comm,
        [loops],
        dtype=dtype,
        dest_of=lambda rows: owner_of(rows["u"]),
        order_fields=("u", "v"),
        memory_budget_bytes=budget,
        spill_dir=spill_dir,
    )
    both = np.concatenate([labels, *received])
    _, first = np.unique(both["u"], return_index=True)  # a labelled node keeps its label: labels first
    return both[first]
