"""Distributed connected components: every node learns the minimum node of its component.

Nodes are fixed-width byte strings compared bytewise (a NODE of ``corpus.dedup.records``: doc_id first,
so the minimum node has the minimum doc_id). The result is a mathematical property of the edge set, so
it is the same whatever the rank count and however the edges were spread over the ranks. Edges are numpy
rows ``(u, v)`` (:func:`pair_dtype`) and every step works on whole arrays, never holding more than one
batch of one node's neighbours. Local contraction, then large-star / small-star rounds (Kiveris et al.,
SoCC 2014) over ``shuffle_array`` until the edges are stars centred on their minimum; the labels are held
by each node's owner rank (:func:`owner_of`). With a :class:`RoundCheckpoint` every completed round is
kept on disk, so a killed run resumes from the last round all ranks finished, on any rank count. The
algorithm step by step: docs/dedup.md (*Connected components*).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from corpus.dedup.verify import min_roots
from mpi_kernels.barrier import sleeping_barrier
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
    owns, sorted by node; ``rounds`` exchanges were needed, the first ``resumed_after`` of them (the
    contraction is round 0) by an earlier run whose checkpoint this one resumed (-1: none)."""

    def __init__(self, labels: np.ndarray, rounds: int, resumed_after: int = -1) -> None:
        self.labels = labels
        self.rounds = rounds
        self.resumed_after = resumed_after


class RoundCheckpoint:
    """Where :func:`connected_components` keeps its completed rounds: the union-find rounds are the long
    pole of a dedup phase (both seeds say so), and a kill during them must not throw them all away.

    Round R's state is the edges each rank wrote after it (``edges-R.K.bin``, K the rank) and the nodes
    each rank saw only in self-loops (``alone.K.bin``, written once, after the contraction: round 0).
    Rank 0 commits a round in ``round.json`` (the round and its files) once every rank's files are
    written and synced; a round not committed is redone. The edges are a set, whichever rank holds
    them (the next round's shuffle routes them to their owners), so a rerun on any number of ranks takes
    the committed files in shares. The caller owns the directory: it must hold one graph's rounds
    (start it empty for another graph) and :meth:`clear` it when the labels are safe.
    ``after_round(R)`` is called on every rank after round R is committed (fault injection)."""

    COMMIT = "round.json"

    def __init__(self, directory: Path, after_round: Callable[[int], None] | None = None) -> None:
        self.directory = Path(directory)
        self.after_round = after_round

    def committed(self, comm: Any) -> dict[str, Any] | None:
        """Collective: the last committed round (``{"round", "edges", "alone"}``), or None."""
        state = None
        if comm.rank == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            commit = self.directory / self.COMMIT
            state = json.loads(commit.read_text()) if commit.exists() else None
        return comm.bcast(state, root=0)

    def alone_file(self, rank: int) -> Path:
        return self.directory / f"alone.{rank}.bin"

    def commit(self, comm: Any, rnd: int) -> None:
        """Collective, after every rank synced its round ``rnd`` files: record the round, then remove
        the files no committed round names (the round before it, a larger earlier run's leftovers)."""
        if comm.rank == 0:
            state = {
                "round": rnd,
                "edges": [_edge_file(self.directory, rnd, k).name for k in range(comm.size)],
                "alone": [self.alone_file(k).name for k in range(comm.size)],
            }
            prior = self.directory / self.COMMIT
            alone = json.loads(prior.read_text())["alone"] if rnd and prior.exists() else state["alone"]
            state["alone"] = alone  # the contraction's files, whichever run wrote them
            tmp = self.directory / f".{self.COMMIT}.tmp"
            tmp.write_text(json.dumps(state))
            os.replace(tmp, prior)
            keep = set(state["edges"]) | set(alone) | {self.COMMIT}
            for f in self.directory.iterdir():
                if f.name not in keep:
                    f.unlink(missing_ok=True)
        comm.Barrier()
        if self.after_round is not None:
            self.after_round(rnd)

    def clear(self, comm: Any) -> None:
        """Collective: the rounds are no longer needed."""
        comm.Barrier()
        if comm.rank == 0:
            shutil.rmtree(self.directory, ignore_errors=True)


def _written(path: Path, batches: Iterable[bytes], sync: bool) -> None:
    with open(path, "wb") as out:
        for data in batches:
            out.write(data)
        if sync:
            _sync(out)


def _sync(out: BinaryIO) -> None:
    """A checkpointed round's file reaches the disk before its round is committed."""
    out.flush()
    os.fsync(out.fileno())


def connected_components(
    comm: Any,
    edges: Iterable[np.ndarray],
    *,
    width: int,
    memory_budget_bytes: int = 256 << 20,
    spill_dir: Path | None = None,
    checkpoint: RoundCheckpoint | None = None,
) -> Components:
    """Collective: label every node of every edge (on any rank) with the minimum node of its component.

    Each rank passes its share of the edges as batches of :func:`pair_dtype` rows (``width``-byte nodes);
    each rank gets back (node, label) rows for the nodes it owns (:func:`owner_of`), sorted by node.
    A self-loop adds its node. The rounds' edges are spilled under ``spill_dir``, removed at the end;
    with a ``checkpoint`` they are kept there instead, and a committed round is resumed (``edges`` is
    then not read)."""
    from mpi4py import MPI

    dtype = pair_dtype(width)
    base = Path(spill_dir) if spill_dir is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="components-", dir=base))
    rounds_dir = checkpoint.directory if checkpoint is not None else work
    try:
        state = checkpoint.committed(comm) if checkpoint is not None else None
        if state is None:
            # each batch is contracted on its own and its stars spilled: a rank holds one batch of edges
            alone_in: list[np.ndarray] = []

            def contracted() -> Iterator[bytes]:
                for batch in edges:
                    stars, loops = local_components([batch], width)
                    alone_in.append(loops)
                    yield stars.tobytes()

            edge_files = [_edge_file(rounds_dir, 0, comm.rank)]
            _written(edge_files[0], contracted(), sync=checkpoint is not None)
            alone = np.unique(np.concatenate([np.empty(0, dtype=f"V{width}"), *alone_in]))
            resumed_after = -1
            if checkpoint is not None:
                _written(checkpoint.alone_file(comm.rank), [alone.tobytes()], sync=True)
                checkpoint.commit(comm, 0)
        else:  # the committed round's files, in shares over this run's ranks
            resumed_after = state["round"]
            edge_files = [rounds_dir / f for f in state["edges"][comm.rank :: comm.size]]
            mine = [
                np.fromfile(rounds_dir / f, dtype=f"V{width}") for f in state["alone"][comm.rank :: comm.size]
            ]
            alone = np.unique(np.concatenate([np.empty(0, dtype=f"V{width}"), *mine]))
        current = chain.from_iterable(_read_rows(f, dtype) for f in edge_files)
        for rounds in range(max(resumed_after, 0) + 1, MAX_ROUNDS + 1):
            received = shuffle_array(
                comm,
                _both_directions(current, dtype),
                dtype=dtype,
                dest_of=lambda rows: owner_of(rows["u"]),
                order_fields=("u", "v"),
                memory_budget_bytes=memory_budget_bytes,
                spill_dir=work,
            )
            edge_file, label_file = _edge_file(rounds_dir, rounds, comm.rank), work / f"labels-{rounds}.bin"
            with open(edge_file, "wb") as out, open(label_file, "wb") as labels:
                stars = _star_round(received, width, rounds % 2 == 1, out, labels)
                if checkpoint is not None:
                    _sync(out)
            (work / f"labels-{rounds - 1}.bin").unlink(missing_ok=True)
            sleeping_barrier(comm)  # the owners' rounds are uneven: an early rank sleeps
            converged = not comm.allreduce(0 if stars else 1, op=MPI.SUM)
            if checkpoint is not None:
                checkpoint.commit(comm, rounds)
            else:
                for f in edge_files:
                    f.unlink(missing_ok=True)
            if converged:
                found = np.fromfile(label_file, dtype=dtype)
                labelled = _with_alone(comm, found, alone, dtype, memory_budget_bytes, work)
                return Components(labelled, rounds, resumed_after)
            edge_files = [edge_file]
            current = _read_rows(edge_file, dtype)
        raise RuntimeError(f"connected components did not converge in {MAX_ROUNDS} rounds")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _edge_file(directory: Path, rnd: int, rank: int) -> Path:
    return directory / f"edges-{rnd}.{rank}.bin"


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
