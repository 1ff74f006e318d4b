"""The build's signature store (step ``signature_store``, inside a build that keeps indexes) and the
verification of a join to a base cluster against the stores of the builds before it.

A bucket part's edges to base clusters (``base_links.base_edges``) are kept only when the document's
signature agrees on at least ``verify_threshold`` of its values with a member of the base cluster, as
an in-build pair must (or ``cross_build_threshold``, where set); a cluster no base store holds (a base
built before builds kept one) keeps its edge unverified, counted. docs/incremental.md "Verified
against the base".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from corpus.dedup.records import DOC_ID_BYTES
from corpus.formats.signature_store import (
    SIGNATURE_STORE,
    STORE_SUFFIX,
    SignatureStore,
    store_part,
    truncated,
    write_part,
)
from corpus.model.layout import base_chain, build_dir_of_stage, stage_dir
from hpc_jobs.minhash_dedup.phase import (
    SIG_FILES,
    SIGNATURE_STORE_STEP,
    Graph,
    Run,
    cluster_ids,
    signature_rows,
)
from mpi_kernels.minhash import is_empty
from runtime.global_phase import PartWriter
from runtime.input_shard import InputShard

#: members of a base cluster compared with its edges at once (bounds the (edges, members, K) comparison)
CHUNK = 1024


def store_route(num_perm: int) -> np.dtype:
    """A document on its way to the store part of its cluster."""
    v = f"V{DOC_ID_BYTES}"
    return np.dtype([("part", ">u4"), ("cluster", v), ("doc", v), ("sig", "<u4", (num_perm,))])


def signature_store(run: Run) -> None:
    """Step ``signature_store``: every text document (a non-empty signature) with its cluster id, as
    the verdicts set it (its own doc_id outside a cluster), to the store part of that id, which
    writes the artifact ``signature_store/PART.h5`` (``corpus.formats.signature_store``)."""
    phase, groups, k = run.phase, run.text.groups, run.config.num_perm
    route = store_route(k)
    out = Path(phase.ctx.out_dir) / SIGNATURE_STORE

    def send(shard: InputShard) -> Iterator[np.ndarray]:
        part = phase.part(run.text.signatures, shard.name)
        ids = np.load(part.path(SIG_FILES[0]), allow_pickle=False)
        sigs = np.load(part.path(SIG_FILES[2]), mmap_mode="r", allow_pickle=False)
        text = np.flatnonzero(~is_empty(sigs)) if len(sigs) else np.empty(0, np.int64)
        if not len(text):  # a shard of code documents (or of texts without shingles) only
            return
        clusters = cluster_ids(phase, shard.name, ids)
        rows = np.empty(len(text), dtype=route)
        rows["cluster"] = np.ascontiguousarray(clusters[text]).view(route["cluster"]).reshape(-1)
        rows["doc"] = np.ascontiguousarray(ids[text]).view(route["doc"]).reshape(-1)
        rows["sig"] = truncated(sigs[text])
        rows["part"] = store_part(rows["cluster"], len(groups))
        yield rows

    def reduce(g: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
        out.mkdir(exist_ok=True)
        write_part(out / f"{writer.name}{STORE_SUFFIX}", g, len(groups), k, batches)
        return {}

    phase.exchange_rows(
        SIGNATURE_STORE_STEP, groups, run.inputs, send, reduce, dtype=route, order_fields=("cluster", "doc")
    )


def base_stores(stage_directory: Path) -> tuple[SignatureStore | None, ...]:
    """The signature stores of the builds before the build of ``stage_directory`` (its base, the base's
    base, ...), nearest first; None for a build that kept none."""
    build = build_dir_of_stage(stage_directory)
    stores = []
    for base in base_chain(build) if build is not None else []:
        directory = stage_dir(base, "minhash_dedup") / SIGNATURE_STORE
        stores.append(SignatureStore(directory) if directory.is_dir() else None)
    return tuple(stores)


def verified_base_edges(run: Run, graph: Graph, edges: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
    """The edges to base clusters whose document agrees with some member of the cluster on at least
    ``join_threshold`` of its signature (``cross_build_threshold``, else ``verify_threshold``); an edge
    to a cluster found in no store is kept, unverified. With the count of each verdict."""
    if not len(edges):
        return edges, {"base_joins_verified": 0, "base_joins_rejected": 0, "base_joins_unverified": 0}
    stores = base_stores(Path(run.phase.ctx.out_dir))
    hub = np.ascontiguousarray(edges["hub"]["doc_id"])
    clusters, of_edge = np.unique(hub, return_inverse=True)
    order = np.argsort(of_edge, kind="stable")
    starts = np.searchsorted(of_edge[order], np.arange(len(clusters) + 1))
    mine = truncated(signature_rows(graph.parts, edges["node"], graph.names))
    best = np.zeros(len(edges), dtype=np.int64)
    found = np.zeros(len(clusters), dtype=bool)
    for store in (s for s in stores if s is not None):
        for cluster, sigs in store.members(clusters):
            c = int(cluster[0])
            found[c] = True
            at = order[starts[c] : starts[c + 1]]
            for lo in range(0, len(sigs), CHUNK):
                agree = (mine[at][:, None, :] == sigs[None, lo : lo + CHUNK]).sum(axis=2).max(axis=1)
                best[at] = np.maximum(best[at], agree)
    unverified = ~found[of_edge]
    keep = unverified | (best >= run.config.join_threshold * run.config.num_perm)
    facts = {
        "base_joins_verified": int((keep & ~unverified).sum()),
        "base_joins_rejected": int((~keep).sum()),
        "base_joins_unverified": int(unverified.sum()),
    }
    return edges[keep], facts
