"""Components too large for one part, verified across every rank: O(N / ranks) of a component per rank.

The rule is :func:`corpus.dedup.verify.verified_roots`'s, unchanged, so the verdicts are those of one
part: members at the owners of their nodes (1), band rows sorted across ranks and walked bucket by
bucket along the rank chain (2-4, ``hpc_jobs.minhash_dedup.giant_walk``), clusters as components of
the joins (5), representatives by a two-level reduce, then verdicts (6-7). Collective, recomputed while
any part of the step it feeds is missing. docs/dedup.md "Giant clusters" (each step, what a rank holds).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from corpus.dedup.records import (
    CLUSTER_PIECE,
    CLUSTER_TOTAL,
    DUP,
    GIANT,
    GIANT_VERDICT,
    KEPT,
    MEMBER,
    MEMBER_AT,
    NODE,
    REP_KEY,
    SPLIT,
)
from hpc_jobs.minhash_dedup.giant_walk import W, scan_buckets, splitters
from mpi_kernels.shuffle_array import shuffle_array
from mpi_kernels.union_find import connected_components, owner_of, pair_dtype


@dataclass(frozen=True)
class Settings:
    bands: int
    rows: int
    num_perm: int
    threshold: float
    verify_above: int
    memory_budget_bytes: int
    spill_dir: Path


@dataclass(frozen=True)
class ShardMembers:
    """One shard's members of distributed components: nodes (NODE bytes), their components' labels, their
    representative keys, and where their signatures are (``sigs[ordinals]``, memory-mapped)."""

    nodes: np.ndarray
    labels: np.ndarray
    rep: np.ndarray
    ordinals: np.ndarray
    sigs: Any


@dataclass
class Stats:
    """What this rank held of one component, counted: its owned members (steps 1, 5, 6) and its rows of
    one (component, band) block (steps 3, 4), the largest of each over the components."""

    components: int = 0
    largest_component: int = 0
    most_members_here: int = 0
    most_band_rows_here: int = 0
    band_rows_here: int = 0
    joins_here: int = 0

    def reduced(self, comm: Any) -> dict[str, int]:
        from mpi4py import MPI

        return {
            "components": self.components,
            "largest_component": self.largest_component,
            "most_members_of_one_component_on_a_rank": comm.allreduce(self.most_members_here, op=MPI.MAX),
            "most_band_rows_of_one_component_and_band_on_a_rank": comm.allreduce(
                self.most_band_rows_here, op=MPI.MAX
            ),
            "most_band_rows_on_a_rank": comm.allreduce(self.band_rows_here, op=MPI.MAX),
            "joins": comm.allreduce(self.joins_here, op=MPI.SUM),
        }


def verify_distributed(
    comm: Any,
    giants: np.ndarray,
    members: Callable[[], Iterable[ShardMembers]],
    read_sigs: Callable[[np.ndarray], np.ndarray],
    part_of: Callable[[np.ndarray], np.ndarray],
    cfg: Settings,
) -> tuple[np.ndarray, Stats]:
    """Collective: verdicts on every member of the components ``giants`` (GIANT rows, sorted by label, the
    same on every rank) that this rank owns, as GIANT_VERDICT rows (``part_of(nodes)``: their shard's
    part), and what this rank held. ``members()`` yields this rank's shards' members (called more than
    once); ``read_sigs(nodes)`` reads signatures by location."""
    stats = Stats(components=len(giants), largest_component=int(giants["size"].max()) if len(giants) else 0)
    cfg.spill_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="giant-", dir=cfg.spill_dir))
    try:
        verified = giants[giants["size"].astype(np.int64) > cfg.verify_above]
        # 1. every member at the owner of its node
        table = members_at_owners(comm, members, cfg, work)
        if len(table):
            _, per = np.unique(table["label"], return_counts=True)
            stats.most_members_here = int(per.max())
        # 2-4. joins of every verified component's buckets, the rank chain included
        joins = work / "joins.bin"
        with open(joins, "wb") as out:
            if len(verified):
                cuts = splitters(comm, verified, members, cfg)
                scan_buckets(comm, verified, members, read_sigs, cuts, cfg, out, stats, work)
        # 5. clusters: components of the joins (every member a node; an unverified component one cluster)
        clusters = cluster_nodes(comm, table, joins, verified, cfg, work)
        # 6-7. representatives and verdicts
        return member_verdicts(comm, table, clusters, part_of, cfg, work), stats
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- 1. members at their owners -----------------------------------------------------------------------
def members_at_owners(
    comm: Any, members: Callable[[], Iterable[ShardMembers]], cfg: Settings, work: Path
) -> np.ndarray:
    def batches() -> Iterator[np.ndarray]:
        for m in members():
            rows = np.empty(len(m.nodes), dtype=MEMBER_AT)
            rows["node"], rows["label"], rows["rep"] = m.nodes, m.labels, m.rep
            yield rows

    out = shuffle_array(
        comm,
        batches(),
        dtype=MEMBER_AT,
        dest_of=lambda rows: owner_of(rows["node"]),
        order_fields=("node",),
        memory_budget_bytes=cfg.memory_budget_bytes,
        spill_dir=work,
    )
    return _gathered(out, MEMBER_AT)


def _gathered(out: Any, dtype: np.dtype) -> np.ndarray:
    got = [np.asarray(b).astype(dtype, copy=False) for b in out]
    out.close()
    return np.concatenate(got) if got else np.empty(0, dtype=dtype)


# -- 5. clusters ----------------------------------------------------------------------------------------
def cluster_nodes(
    comm: Any, table: np.ndarray, joins: Path, verified: np.ndarray, cfg: Settings, work: Path
) -> np.ndarray:
    """Each owned member's cluster (the smallest node of its joins' component), aligned with ``table``."""
    dtype = pair_dtype(W)
    labels = verified["label"]

    def edges() -> Iterator[np.ndarray]:
        rows = np.empty(len(table), dtype=dtype)
        rows["u"] = table["node"]
        rows["v"] = table["node"]  # a self-loop: a member that joined nobody is a cluster of its own
        if len(labels):
            at = np.minimum(np.searchsorted(labels, table["label"]), len(labels) - 1)
            unverified = labels[at] != table["label"]
        else:
            unverified = np.ones(len(table), dtype=bool)
        rows["v"][unverified] = table["label"][unverified]  # an unverified component is one cluster
        yield rows
        with open(joins, "rb") as f:
            while True:
                got = np.fromfile(f, dtype=dtype, count=1 << 16)
                if not len(got):
                    return
                yield got

    found = connected_components(
        comm, edges(), width=W, memory_budget_bytes=cfg.memory_budget_bytes, spill_dir=work
    ).labels
    if len(found) != len(table) or not np.array_equal(found["u"], table["node"]):
        raise RuntimeError("distributed verification: the clusters' nodes are not the members held here")
    return np.ascontiguousarray(found["v"])


# -- 6-7. representatives and verdicts ------------------------------------------------------------------
def _member_records(table: np.ndarray) -> np.ndarray:
    """MEMBER bytes (representative key, ordinal, shard tag) of each row of ``table``."""
    nodes = np.ascontiguousarray(table["node"]).view(NODE)
    records = np.empty(len(table), dtype=MEMBER)
    records["rep"], records["ordinal"], records["shard_tag"] = (
        table["rep"],
        nodes["ordinal"],
        nodes["shard_tag"],
    )
    return records.view(f"V{MEMBER.itemsize}").reshape(-1)


def _group_starts(keys: np.ndarray) -> np.ndarray:
    if not len(keys):
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(np.append(True, keys[1:] != keys[:-1]))


def member_verdicts(
    comm: Any,
    table: np.ndarray,
    clusters: np.ndarray,
    part_of: Callable[[np.ndarray], np.ndarray],
    cfg: Settings,
    work: Path,
) -> np.ndarray:
    rank = comm.Get_rank()
    budget = cfg.memory_budget_bytes
    records = _member_records(table)
    # 6a. this rank's piece of each cluster: count and smallest member record
    keyed = np.empty((len(table), W + MEMBER.itemsize), dtype=np.uint8)
    keyed[:, :W] = np.ascontiguousarray(clusters).view(np.uint8).reshape(-1, W)
    keyed[:, W:] = np.ascontiguousarray(records).view(np.uint8).reshape(-1, MEMBER.itemsize)
    order = np.argsort(keyed.view(f"V{keyed.shape[1]}").reshape(-1), kind="stable")
    c_sorted = clusters[order]
    heads = _group_starts(c_sorted)
    pieces = np.empty(len(heads), dtype=CLUSTER_PIECE)
    pieces["cluster"] = c_sorted[heads]
    pieces["label"] = table["label"][order][heads]
    pieces["count"] = np.diff(np.append(heads, len(order)))
    pieces["best"] = records[order][heads]
    pieces["rank"] = rank
    got = _gathered(
        shuffle_array(
            comm,
            [pieces],
            dtype=CLUSTER_PIECE,
            dest_of=lambda r: owner_of(r["cluster"]),
            order_fields=("cluster", "best"),
            memory_budget_bytes=budget,
            spill_dir=work,
        ),
        CLUSTER_PIECE,
    )
    # 6b. at the cluster's owner: its size and smallest record, back to every rank holding a piece
    heads = _group_starts(np.ascontiguousarray(got["cluster"]))
    sizes = np.add.reduceat(got["count"].astype(np.int64), heads) if len(heads) else np.empty(0, np.int64)
    per_piece = np.repeat(np.arange(len(heads)), np.diff(np.append(heads, len(got))))
    totals = np.empty(len(got), dtype=CLUSTER_TOTAL)
    totals["rank"] = got["rank"]
    totals["cluster"] = got["cluster"]
    totals["size"] = sizes[per_piece] if len(got) else 0
    totals["best"] = got["best"][heads][per_piece] if len(got) else got["best"]
    # a component's clusters are counted at the owner of its label: cut into several = verified apart
    cut = np.empty(len(heads), dtype=[("node", f"V{W}"), ("clusters", ">u8")])
    cut["node"], cut["clusters"] = got["label"][heads], 1
    back = _gathered(
        shuffle_array(
            comm,
            [totals],
            dtype=CLUSTER_TOTAL,
            dest_of=lambda r: r["rank"].astype(np.int64),
            order_fields=("cluster",),
            memory_budget_bytes=budget,
            spill_dir=work,
        ),
        CLUSTER_TOTAL,
    )
    per_label = _gathered(
        shuffle_array(
            comm,
            [cut],
            dtype=cut.dtype,
            dest_of=lambda r: owner_of(r["node"]),
            order_fields=("node",),
            memory_budget_bytes=budget,
            spill_dir=work,
        ),
        cut.dtype,
    )
    # 7. a verdict per member of a cluster of two or more; a fact per component cut apart
    back = back[np.unique(np.ascontiguousarray(back["cluster"]), return_index=True)[1]]
    at = np.searchsorted(np.ascontiguousarray(back["cluster"]), clusters)
    size = back["size"].astype(np.int64)[at] if len(back) else np.empty(0, np.int64)
    best = back["best"][at] if len(back) else back["best"]
    out = np.flatnonzero(size > 1)
    verdicts = np.empty(len(out), dtype=GIANT_VERDICT)
    nodes = np.ascontiguousarray(table["node"][out])
    verdicts["part"] = part_of(nodes) if len(out) else 0
    verdicts["ordinal"] = nodes.view(NODE)["ordinal"]
    verdicts["kind"] = np.where(records[out] == best[out], KEPT, DUP)
    verdicts["cluster"] = np.ascontiguousarray(clusters[out]).view(NODE)["doc_id"]
    verdicts["size"] = size[out]
    best_members = np.ascontiguousarray(best[out]).view(MEMBER)
    verdicts["rep"] = np.ascontiguousarray(best_members["rep"]).view(REP_KEY)["doc_id"]
    heads = _group_starts(np.ascontiguousarray(per_label["node"]))
    counts = (
        np.add.reduceat(per_label["clusters"].astype(np.int64), heads)
        if len(heads)
        else np.empty(0, np.int64)
    )
    split_nodes = np.ascontiguousarray(per_label["node"][heads][counts > 1])
    facts = np.zeros(len(split_nodes), dtype=GIANT_VERDICT)
    facts["part"] = part_of(split_nodes) if len(split_nodes) else 0
    facts["ordinal"] = split_nodes.view(NODE)["ordinal"]
    facts["kind"] = SPLIT
    return np.concatenate([verdicts, facts]).astype(GIANT_VERDICT)  # concatenate may go native-endian


def giant_labels(parts: Iterable[np.ndarray]) -> np.ndarray:
    """GIANT rows of every part, sorted by label (each label is in one part)."""
    got = [p for p in parts if len(p)]
    rows = np.concatenate(got) if got else np.empty(0, dtype=GIANT)
    return rows[np.argsort(np.ascontiguousarray(rows["label"]), kind="stable")]
