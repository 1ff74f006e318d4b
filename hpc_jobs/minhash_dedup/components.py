"""Steps ``components`` and ``giant_clusters`` of the text graph: the components of more than
``distribute_components_above`` members are found from each shard's count per label, then verified by
every rank together (``hpc_jobs.minhash_dedup.giant``) with the one-part rule and the same verdicts;
each verdict goes to its shard's part. Against a base, ``components`` also writes the components
joined to a base cluster with their sizes (never verified, never distributed). docs/dedup.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from corpus.dedup.candidates import part_of_hash
from corpus.dedup.records import (
    GIANT,
    GIANT_ROUTE,
    GIANT_VERDICT,
    KEPT,
    LABEL,
    LINKED,
    NODE,
    REP_KEY,
    SPLIT,
    graph_nodes,
    shard_numbers,
    unrouted,
)
from hpc_jobs.minhash_dedup.base_links import LINKED_ROWS, component_links
from hpc_jobs.minhash_dedup.giant import Settings, ShardMembers, giant_labels, verify_distributed
from hpc_jobs.minhash_dedup.phase import (
    COMPONENTS,
    GIANT_CLUSTERS,
    LABEL_ROWS,
    ClusterVerdict,
    Graph,
    Run,
    among,
    group_units,
    load_signatures,
    row_bytes,
    signature_rows,
)
from runtime.global_phase import SPILL_DIR, PartWriter, write_verdicts
from runtime.runner import assign

GIANTS = ".giants"


def giant_components(run: Run, graph: Graph, units: list[Any]) -> None:
    """Step ``components``: each shard's count of each of its labels goes to the label's part (the
    part its members would go to), which sums them and keeps the components of more than
    ``distribute_components_above`` members (GIANT rows, by label). Every rank gets them all: one
    row per component that large."""
    phase, groups = run.phase, graph.groups
    above = run.config.distribute_components_above
    node = f"V{NODE.itemsize}"
    linking = run.probed

    def send(shard: Any) -> Iterator[np.ndarray]:
        labels = np.fromfile(phase.part(graph.labels, shard.name).path(LABEL_ROWS), dtype=LABEL)
        if not len(labels):
            return
        found, counts = np.unique(np.ascontiguousarray(labels["label"]).view(node), return_counts=True)
        rows = np.empty(len(found), dtype=GIANT_ROUTE)
        rows["part"] = part_of_hash(found.view(np.uint8).reshape(len(found), -1), len(groups))
        rows["label"], rows["size"] = found, counts
        yield rows

    def reduce(g: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
        out = writer.open(GIANTS)
        links = component_links(phase, groups[g], run.probed)
        joined = writer.open(LINKED_ROWS) if linking else None
        kept = 0

        def done_with(summed: np.ndarray) -> None:
            """Components whose count is complete: joined to the base (written with their size:
            never verified, so never distributed) or, above the threshold, distributed."""
            nonlocal kept
            based = among(summed["label"], links["label"])
            if joined is not None and based.any():
                rows = np.empty(int(based.sum()), dtype=LINKED)
                rows["label"], rows["size"] = summed["label"][based], summed["size"][based]
                rows["base"] = links["base"][np.searchsorted(links["label"], rows["label"])]
                joined.write(rows.tobytes())
            big = summed[~based & (summed["size"].astype(np.int64) > above)]
            out.write(big.tobytes())
            kept += len(big)

        carry: np.ndarray | None = None  # the last label of the batches so far, its count open
        for batch in batches:  # sorted by label
            rows = unrouted(batch, GIANT_ROUTE, GIANT)
            if carry is not None:  # (concatenate may hand back native-endian integers)
                rows = np.concatenate([carry, rows]).astype(GIANT)
            heads = np.flatnonzero(np.append(True, rows["label"][1:] != rows["label"][:-1]))
            summed = rows[heads].copy()
            summed["size"] = np.add.reduceat(rows["size"].astype(np.int64), heads)
            done_with(summed[:-1])
            carry = summed[-1:]
        if carry is not None:
            done_with(carry)
        return {"distributed_components": kept}

    phase.exchange_rows(COMPONENTS, groups, units, send, reduce, dtype=GIANT_ROUTE, order_fields=("label",))


def read_giants(run: Run, groups: list[str]) -> np.ndarray:
    """Collective: the GIANT rows of every ``components`` part, sorted by label, on every rank."""
    giants = None
    if run.phase.ctx.rank == 0:
        parts = run.phase.parts(COMPONENTS, groups)
        giants = giant_labels(np.fromfile(p.path(GIANTS), dtype=GIANT) for p in parts)
    return run.phase.comm.bcast(giants, root=0)


def giant_members(run: Run, graph: Graph, giants: np.ndarray) -> Iterator[ShardMembers]:
    """The members of ``giants`` in this rank's shards (label and signature parts)."""
    phase = run.phase
    node = f"V{NODE.itemsize}"
    for unit in assign(group_units(graph.names), phase.ctx.rank, phase.ctx.size):
        labels = np.fromfile(phase.part(graph.labels, unit.name).path(LABEL_ROWS), dtype=LABEL)
        label = np.ascontiguousarray(labels["label"]).view(node)
        mine = among(label, giants["label"])
        if not mine.any():
            continue
        ordinals = labels["ordinal"][mine].astype(np.int64)
        ids, rep, sigs = load_signatures(phase, unit.name, graph.signatures)
        nodes = graph_nodes(np.asarray(ids[ordinals]), ordinals, unit.name)
        yield ShardMembers(
            nodes=np.ascontiguousarray(nodes).view(node),
            labels=label[mine],
            rep=np.ascontiguousarray(rep[ordinals]).view(f"V{REP_KEY.itemsize}").reshape(-1),
            ordinals=ordinals,
            sigs=sigs,
        )


def giant_clusters(run: Run, graph: Graph) -> dict[str, Any]:
    """Step ``giant_clusters``: the components ``giants`` verified by every rank together
    (``hpc_jobs.minhash_dedup.giant``: recomputed while any part of the step is missing, as connected
    components are), each verdict sent to its shard's part, which writes verdict lines as
    ``clusters`` does, and counts its clusters (at their representative) and the components
    verification cut apart (at their smallest node). Returns what each rank held (run_info)."""
    phase = run.phase
    ctx, comm, shards = phase.ctx, phase.comm, graph.names
    giants = read_giants(run, graph.groups)
    held: dict[str, Any] = {}
    # 1. whether any part of the step is missing
    todo = None
    if ctx.rank == 0:
        todo = any(phase.part(GIANT_CLUSTERS, s) is None for s in shards)
    rows = np.empty(0, dtype=GIANT_VERDICT)
    # 2. the verdicts, computed by every rank together
    if comm.bcast(todo, root=0) and len(giants):
        cfg = run.config
        settings = Settings(
            cfg.bands, cfg.rows, cfg.num_perm, cfg.verify_threshold, cfg.verify_components_above,
            ctx.memory_budget_bytes, Path(ctx.work_dir) / SPILL_DIR,
        )  # fmt: skip
        rows, stats = verify_distributed(
            comm,
            giants,
            lambda: giant_members(run, graph, giants),
            lambda nodes: signature_rows(graph.parts, np.ascontiguousarray(nodes).view(NODE), shards),
            lambda nodes: shard_numbers(np.ascontiguousarray(nodes).view(NODE)["shard_tag"], shards),
            settings,
        )
        held = {"distributed_verification": stats.reduced(comm)}
        ctx.say(f"{len(giants)} components verified across ranks: {held['distributed_verification']}")

    def send(_: None) -> Iterator[np.ndarray]:
        yield rows

    def reduce(p: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
        sizes: Counter = Counter()
        split = 0

        def verdicts() -> Iterator[tuple[str, str, dict[str, Any]]]:
            nonlocal split
            for batch in batches:  # sorted by ordinal
                got = batch.astype(GIANT_VERDICT, copy=False)
                kinds, size = got["kind"].tolist(), got["size"].tolist()
                clusters, reps = row_bytes(got["cluster"]), row_bytes(got["rep"])
                for i, ordinal in enumerate(got["ordinal"].tolist()):
                    if kinds[i] == SPLIT:
                        split += 1
                        continue
                    sizes[size[i]] += kinds[i] == KEPT
                    dup = "" if kinds[i] == KEPT else reps[i].hex()
                    yield (
                        shards[p],
                        str(ordinal),
                        ClusterVerdict(clusters[i].hex(), size[i], dup).to_json(),
                    )

        write_verdicts(writer, verdicts())
        by_size = {str(k): sizes[k] for k in sorted(sizes) if sizes[k]}
        return {"verified_components": split, "cluster_sizes": by_size}

    # 3. each verdict to its shard's part
    phase.exchange_rows(
        GIANT_CLUSTERS, shards, None, send, reduce, dtype=GIANT_VERDICT, order_fields=("ordinal", "kind")
    )
    return held
