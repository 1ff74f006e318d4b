"""Steps 2-4 over one clustering graph (text or repository): buckets of band rows linked as stars,
connected components as labels, then each component verified at its part and a verdict per member.

A cluster's representative is its smallest member record (representative key, ordinal, shard tag:
``corpus.dedup.order``), its id the smallest doc_id; components above ``verify_components_above``
are cut by estimated Jaccard (``corpus.dedup.verify``). Text components too large for one part are
verified across ranks (``hpc_jobs.minhash_dedup.components``). docs/dedup.md "MinHash".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from corpus.dedup.candidates import bucket_star_edges, concat, part_of_hash
from corpus.dedup.records import (
    DOC_ID_BYTES,
    EDGE,
    GIANT,
    LABEL,
    LABEL_ROUTE,
    LINKED,
    MEMBER,
    MEMBER_ROUTE,
    NODE,
    REP_KEY,
    shard_numbers,
    shard_tag,
    unrouted,
)
from corpus.dedup.verify import verified_roots
from corpus.model import Annotation
from corpus.model.annotations import DUP_CLUSTER_SIZE
from hpc_jobs.minhash_dedup.base_links import (
    BASE_KEYS,
    BASE_NODE_TAG,
    LINKED_ROWS,
    base_edges,
    send_base_links,
    tagged,
)
from hpc_jobs.minhash_dedup.components import read_giants
from hpc_jobs.minhash_dedup.holdout import HITS, holdout_hits
from hpc_jobs.minhash_dedup.phase import (
    BASE_LINKS,
    COMPONENTS,
    EDGES,
    GIANT_CLUSTERS,
    HELD_SIGNATURES,
    LABEL_ROWS,
    ClusterVerdict,
    Graph,
    Run,
    SignatureParts,
    among,
    band_run,
    group_units,
    load_signatures,
    row_bytes,
)
from hpc_jobs.minhash_dedup.signature_store import verified_base_edges
from hpc_jobs.minhash_dedup.spill import SpilledRows
from mpi_kernels.union_find import RoundCheckpoint, connected_components, pair_dtype
from runtime.global_phase import SPILL_DIR, PartWriter, route_verdicts, write_verdicts
from runtime.preemption import after_part
from runtime.runner import assign

Verdicts = Iterator[tuple[str, str, dict[str, Any]]]


# -- 2. buckets ----------------------------------------------------------------------------------------
def buckets(run: Run, graph: Graph) -> None:
    """Step 2: each bucket part reads its band rows from every signature part -> candidate edges (and,
    for text, the candidates matching a held-out page)."""
    run.phase.map(graph.buckets, group_units(graph.groups), lambda g, w: write_buckets(run, graph, g, w))


def write_buckets(run: Run, graph: Graph, unit: Any, writer: PartWriter) -> dict[str, Any]:
    """One bucket part: its band rows from every signature part (a contiguous run of each, found by
    the part's offsets), sorted by (band key, node), grouped into buckets, linked as stars."""
    g = int(unit.name[1:])
    rows = band_run(run.phase, graph.signatures, graph.names, g)
    edges, facts = bucket_star_edges(rows, run.config.bucket_cap)
    facts = {graph.facts + k: v for k, v in facts.items()}
    if graph.text and run.probed:  # edges to the base clusters the keys name
        edges_to_base, found = base_edges(run.index.base, g, rows)
        edges_to_base, joins = verified_base_edges(run, graph, edges_to_base)
        edges = concat([edges, edges_to_base], EDGE)
        facts |= joins
        writer.open(BASE_KEYS).write(found.tobytes())
        facts["base_keys"] = len(found)
    writer.open(EDGES).write(edges.tobytes())
    if graph.text and run.held:
        held = band_run(run.phase, HELD_SIGNATURES, run.held_names, g)
        hits, pairs = holdout_hits(run, rows, held)
        writer.open(HITS).write(hits.tobytes())
        facts = {**facts, "holdout_pairs": pairs}
    return facts


# -- 3. components -> labels ---------------------------------------------------------------------------
def labels(run: Run, graph: Graph) -> None:
    """Connected components of every candidate edge, then each document's label to its shard's
    part. Components are computed only while some label part is missing; their rounds are
    checkpointed (``<step>.rounds/`` in the phase directory, until the labels are written), so a rerun
    resumes from the last round every rank finished, on any rank count, and finds the same labels.
    The rounds a run resumed and computed are in ``progress.json`` as step ``<step>.rounds``."""
    phase, groups = run.phase, graph.groups
    ctx, comm, shards = phase.ctx, phase.comm, graph.names
    linking = graph.text and run.probed
    # 1. whether any label part (or, against a base, any link part) is missing
    todo = None
    if ctx.rank == 0:
        todo = any(phase.part(graph.labels, s) is None for s in shards)
        todo = todo or (linking and any(phase.part(BASE_LINKS, g) is None for g in groups))
    found = np.empty(0, dtype=pair_dtype(NODE.itemsize))
    rounds_step = f"{graph.labels}.rounds"
    rounds = RoundCheckpoint(
        phase.root / rounds_step, lambda r: after_part(f"{phase.stage}/{rounds_step}", r, ctx.rank)
    )
    # 2. connected components of every bucket part's edges
    if comm.bcast(todo, root=0):
        edge_parts = phase.parts(graph.buckets, groups) if ctx.rank == 0 else None
        edge_parts = comm.bcast(edge_parts, root=0)
        edges = (
            np.fromfile(part.path(EDGES), dtype=EDGE).view(found.dtype)
            for part in assign(edge_parts, ctx.rank, ctx.size)
        )
        components = connected_components(
            comm,
            edges,
            width=NODE.itemsize,
            memory_budget_bytes=ctx.memory_budget_bytes,
            spill_dir=Path(ctx.work_dir) / SPILL_DIR,
            checkpoint=rounds,
        )
        # the round count depends on the rank count, so it is logged, not digested
        resumed = components.resumed_after
        ctx.say(
            f"{len(components.labels)} clustered documents here; components in {components.rounds} rounds"
            + (f", resumed after round {resumed}" if resumed >= 0 else "")
        )
        phase.progress[rounds_step] = {
            "rounds_done_before": resumed + 1,  # the contraction is round 0
            "rounds_done_now": components.rounds - resumed,
        }
        found = components.labels
    # 3. the base clusters' nodes go to the links, every other node to its shard's part
    nodes = np.ascontiguousarray(found["u"]).view(NODE)
    based = tagged(nodes, BASE_NODE_TAG)
    links, found, nodes = found[based], found[~based], nodes[~based]
    rows = np.empty(len(found), dtype=LABEL_ROUTE)
    rows["part"] = shard_numbers(nodes["shard_tag"], shards)
    rows["ordinal"] = nodes["ordinal"]
    rows["label"] = found["v"]

    def send(_: None) -> Iterator[np.ndarray]:
        yield rows

    def reduce(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
        out = writer.open(LABEL_ROWS)
        n = 0
        for batch in batches:  # sorted by ordinal: the part's LABEL rows in order
            out.write(unrouted(batch, LABEL_ROUTE, LABEL).tobytes())
            n += len(batch)
        return {graph.facts + "clustered_docs": n}

    # 4. each rank sends the labels it holds (and, against a base, the links)
    phase.exchange_rows(
        graph.labels, shards, None, send, reduce, dtype=LABEL_ROUTE, order_fields=("ordinal",)
    )
    if linking:
        send_base_links(phase, groups, links)
    rounds.clear(comm)


# -- 4. clusters ---------------------------------------------------------------------------------------
def clusters(run: Run, graph: Graph, units: list[Any]) -> None:
    """Step 4: the members of every component (but, for text, those verified across ranks: step
    ``giant_clusters``) to their component's part -> verified clusters, representatives, verdicts."""
    giants = read_giants(run, graph.groups) if graph.text else np.empty(0, dtype=GIANT)
    run.phase.exchange_rows(
        graph.clusters,
        graph.groups,
        units,
        lambda u: member_rows(run, graph, u, giants["label"]),
        lambda g, batches, writer: reduce_clusters(run, graph, batches, writer, graph.groups[g]),
        dtype=MEMBER_ROUTE,
        order_fields=("label",),
    )


def decisions(run: Run, graph: Graph) -> None:
    """Step 5: verdicts (of both cluster steps, for text) to their shard's decision table."""
    also = [(GIANT_CLUSTERS, graph.names)] if graph.text else []
    route_verdicts(run.phase, graph.decisions, graph.clusters, graph.groups, graph.names, also=also)


def member_rows(run: Run, graph: Graph, shard: Any, giants: np.ndarray) -> Iterator[np.ndarray]:
    """The shard's labelled documents as rows routed to the part of their component (a hash of its
    label, whose doc_id is itself a hash), but those of the components ``giants`` (labels, sorted),
    which are verified across ranks. Their signatures stay in this shard's signature part,
    where the component's owner reads them (a member row is 79 bytes, its signature 8 K)."""
    phase = run.phase
    found = np.fromfile(phase.part(graph.labels, shard.name).path(LABEL_ROWS), dtype=LABEL)
    found = found[~among(np.ascontiguousarray(found["label"]).view(f"V{NODE.itemsize}"), giants)]
    if not found.size:
        return
    _, rep, _ = load_signatures(phase, shard.name, graph.signatures)
    label_nodes = np.ascontiguousarray(found["label"])
    rows = np.empty(len(found), dtype=MEMBER_ROUTE)
    rows["part"] = part_of_hash(label_nodes.view(np.uint8).reshape(len(found), -1), len(graph.groups))
    rows["label"] = label_nodes.view(MEMBER_ROUTE["label"])
    rows["rep"] = np.ascontiguousarray(rep[found["ordinal"].astype(np.int64)]).view(MEMBER["rep"]).reshape(-1)
    rows["ordinal"] = found["ordinal"]
    rows["shard_tag"] = np.void(shard_tag(shard.name))
    yield rows


def reduce_clusters(
    run: Run, graph: Graph, batches: Iterator[np.ndarray], writer: PartWriter, group: str
) -> dict[str, Any]:
    """One bucket part's components, their rows sorted by (label, member record): complete components
    are gathered up to a quarter of the budget and verified together; one that outgrows it alone
    is spilled to ``work/spill`` and verified memory-mapped. A verdict is written per member.
    Signatures are read from the signature parts (memory-mapped) as verification needs them. A
    component joined to a base cluster (``components`` wrote it) is not verified: each member's
    verdict names the base cluster (keep-first: a base document stays its representative)."""
    ctx = run.phase.ctx
    dtype, routed = MEMBER, MEMBER_ROUTE
    sizes: Counter = Counter()
    facts = {"verified_components": 0}
    joined = np.empty(0, LINKED)
    if graph.text and run.probed:
        joined = np.fromfile(run.phase.part(COMPONENTS, group).path(LINKED_ROWS), dtype=LINKED)
        facts["base_linked_docs"] = 0
    spill = Path(ctx.work_dir) / SPILL_DIR
    limit = max(ctx.memory_budget_bytes // 4, dtype.itemsize)
    gathered = Gathered(limit)  # whole components waiting to be verified together

    def flush() -> Verdicts:
        if gathered.parts:
            yield from component_verdicts(run, graph, *gathered.take(), facts, sizes)

    def gather(rows: np.ndarray, starts: list[int]) -> Verdicts:
        if gathered.parts and gathered.bytes + rows.nbytes > limit:
            yield from flush()
        gathered.add(rows, starts)

    def tail_done(tail: SpilledRows) -> Verdicts:
        with tail:
            members = tail.rows()
            if not tail.spilled:
                yield from gather(members, [0])
                return
            ctx.say(f"a component of {len(members)} members spilled to disk")
            yield from flush()
            yield from component_verdicts(run, graph, members, np.zeros(1, dtype=np.int64), facts, sizes)

    def verdicts() -> Verdicts:
        label, tail = None, None  # the last component seen, which the next batch may continue
        for batch in batches:
            if len(joined):  # a joined component's rows are all joined: the others stay contiguous
                based = among(np.ascontiguousarray(batch["label"]).view(LINKED["label"]), joined["label"])
                if based.any():
                    facts["base_linked_docs"] += int(based.sum())
                    yield from joined_verdicts(graph, batch[based], joined)
                    batch = batch[~based]
                    if not len(batch):
                        continue
            raw = np.ascontiguousarray(batch["label"]).view(np.uint8).reshape(len(batch), -1)
            cuts = [0, *(np.flatnonzero(np.any(raw[1:] != raw[:-1], axis=1)) + 1).tolist(), len(batch)]
            members = unrouted(batch, routed, dtype)
            first = 0
            if tail is not None and raw[0].tobytes() == label:
                tail.append(members[: cuts[1]])
                first = 1
            if first < len(cuts) - 1:  # the batch starts other components: the tail is complete
                if tail is not None:
                    yield from tail_done(tail)
                if first < len(cuts) - 2:  # components wholly inside the batch
                    yield from gather(
                        members[cuts[first] : cuts[-2]], [c - cuts[first] for c in cuts[first:-2]]
                    )
                label, tail = raw[cuts[-2]].tobytes(), SpilledRows(dtype, limit, spill)
                tail.append(members[cuts[-2] :])
        if tail is not None:
            yield from tail_done(tail)
        yield from flush()

    write_verdicts(writer, verdicts())
    p = graph.facts
    by_size = {str(k): sizes[k] for k in sorted(sizes)}
    return {p + k: v for k, v in facts.items()} | {p + "cluster_sizes": by_size}


def component_verdicts(
    run: Run, graph: Graph, members: np.ndarray, starts: np.ndarray, facts: dict[str, int], sizes: Counter
) -> Verdicts:
    """Verdicts of whole components (``members`` of each in member-record order, component c from
    ``starts[c]``), in component order, then cluster order (by smallest node), members ascending.
    A cluster's representative is its smallest member record (representative key, ordinal, shard
    tag: unique per document), its id the smallest doc_id."""
    n = len(members)
    comp = np.repeat(np.arange(len(starts), dtype=np.uint64), np.diff(np.append(starts, n)))
    keys = np.empty(n, dtype=[("rep", REP_KEY), ("ordinal", ">u4"), ("tag", "V8")])
    keys["rep"] = np.ascontiguousarray(members["rep"]).view(REP_KEY)
    keys["ordinal"], keys["tag"] = members["ordinal"], members["shard_tag"]
    raw = keys.view(np.uint8).reshape(n, -1)
    doc_ids = np.ascontiguousarray(keys["rep"]["doc_id"]).view(np.uint8).reshape(n, DOC_ID_BYTES)
    roots = cluster_roots(run, graph, members, comp, doc_ids, raw[:, REP_KEY.itemsize :])
    split = np.zeros(len(starts), dtype=bool)  # components cut into more than one cluster
    split[comp[roots != roots[starts[comp.astype(np.int64)]]].astype(np.int64)] = True
    facts["verified_components"] += int(split.sum())
    # clusters of two or more, in root order (component, then smallest node), members ascending
    root_ids, size_of = np.unique(roots, return_counts=True)
    size = size_of[np.searchsorted(root_ids, roots)]
    cluster_sizes, counts = np.unique(size_of[size_of > 1], return_counts=True)
    sizes.update(dict(zip(cluster_sizes.tolist(), counts.tolist(), strict=True)))
    out = np.flatnonzero(size > 1)
    out = out[np.argsort(roots[out], kind="stable")]
    if not len(out):
        return
    cut = np.flatnonzero(np.diff(roots[out])) + 1
    heads = np.append(0, cut)
    # per cluster: the first member by (root, member record) and by (root, doc_id)
    best = out[first_of_runs(roots[out], raw[out], heads)]
    smallest = out[first_of_runs(roots[out], doc_ids[out], heads)]
    names = [graph.tags[t] for t in row_bytes(keys["tag"][out])]
    ordinals = keys["ordinal"][out].tolist()
    for c, (lo, hi) in enumerate(zip(heads.tolist(), [*cut.tolist(), len(out)], strict=True)):
        rep_id = doc_ids[best[c]].tobytes().hex()
        cluster = doc_ids[smallest[c]].tobytes().hex()
        for i in range(lo, hi):
            dup_of = "" if out[i] == best[c] else rep_id
            # members of a cluster come in member-record order: i - lo is the rank
            verdict = ClusterVerdict(cluster, hi - lo, dup_of, i - lo if graph.ranked else None)
            yield names[i], str(ordinals[i]), verdict.to_json()


def cluster_roots(
    run: Run, graph: Graph, members: np.ndarray, comp: np.ndarray, doc_ids: np.ndarray, where: np.ndarray
) -> np.ndarray:
    """Each member's cluster, as the index of its smallest node: components of more than
    ``verify_components_above`` members are split by verification (``corpus.dedup.verify``),
    smaller ones are one cluster."""
    cfg = run.config
    n = len(members)
    node_keys = np.empty((n, 8 + NODE.itemsize), dtype=np.uint8)  # (component, node) bytewise
    node_keys[:, :8] = comp.astype(">u8").view(np.uint8).reshape(n, 8)
    node_keys[:, 8 : 8 + DOC_ID_BYTES] = doc_ids
    node_keys[:, 8 + DOC_ID_BYTES :] = where
    order = np.argsort(node_keys.view(f"V{node_keys.shape[1]}").reshape(-1), kind="stable")
    in_order = comp[order]
    roots = np.searchsorted(in_order, in_order)  # unverified: each component's first position
    count = np.bincount(in_order.astype(np.int64))[in_order.astype(np.int64)]
    check = np.flatnonzero(count > cfg.verify_components_above)
    if len(check):
        sigs = MemberSignatures(graph.parts, members[order[check]], run.phase.ctx.memory_budget_bytes // 4)
        sub = verified_roots(sigs, cfg.bands, cfg.rows, cfg.verify_threshold, groups=in_order[check])
        roots[check] = check[sub]
    by_member = np.empty(n, dtype=np.int64)
    by_member[order] = roots
    return by_member


def joined_verdicts(graph: Graph, rows: np.ndarray, joined: np.ndarray) -> Verdicts:
    """The verdicts of members (MEMBER_ROUTE ``rows``) of components joined to a base cluster
    (``joined``: LINKED rows sorted by label): each is ``dup_of`` the base cluster, whose id it takes;
    its size is the component's member count in this build."""
    at = np.searchsorted(joined["label"], np.ascontiguousarray(rows["label"]).view(LINKED["label"]))
    cluster = [c.hex() for c in row_bytes(joined["base"][at])]
    size = joined["size"][at].tolist()
    names = [graph.tags[t] for t in row_bytes(rows["shard_tag"])]
    for i, ordinal in enumerate(rows["ordinal"].tolist()):
        yield names[i], str(ordinal), ClusterVerdict(cluster[i], size[i], cluster[i]).to_json()


def first_of_runs(runs: np.ndarray, raw: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """For rows grouped in runs of equal ``runs`` (ascending; run r starts at ``heads[r]``), the index
    of each run's bytewise smallest row of ``raw`` (n, w) uint8."""
    keyed = np.empty((len(raw), 8 + raw.shape[1]), dtype=np.uint8)
    keyed[:, :8] = runs.astype(">u8").view(np.uint8).reshape(-1, 8)
    keyed[:, 8:] = raw
    return np.argsort(keyed.view(f"V{keyed.shape[1]}").reshape(-1), kind="stable")[heads]


class Gathered:
    """Member records of whole components, gathered to be verified in one pass (``parts`` in order,
    component c beginning at row ``starts[c]`` of their concatenation)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[np.ndarray] = []
        self.starts: list[int] = []
        self.rows = self.bytes = 0

    def add(self, rows: np.ndarray, starts: list[int]) -> None:
        self.starts.extend(self.rows + s for s in starts)
        self.parts.append(rows)
        self.rows += len(rows)
        self.bytes += rows.nbytes

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        members = self.parts[0] if len(self.parts) == 1 else concat(self.parts, self.parts[0].dtype)
        starts = np.array(self.starts, dtype=np.int64)
        self.parts, self.starts, self.rows, self.bytes = [], [], 0, 0
        return members, starts


class MemberSignatures:
    """The signatures of ``members`` (MEMBER rows, in this order): read from the signature parts, shard
    by shard, by ordinal. Up to ``limit`` bytes of them are read at once and held; beyond that (a giant
    component) what ``verified_roots`` indexes (a band's columns of every row, or a few rows) is read
    when asked for, so they are never copied whole."""

    def __init__(self, parts: SignatureParts, members: np.ndarray, limit: int) -> None:
        self.parts = parts
        self.shard = shard_numbers(members["shard_tag"], parts.shards)
        self.ordinal = members["ordinal"].astype(np.int64)
        self.shape = (len(members), parts.of(int(self.shard[0])).shape[1] if len(members) else 0)
        self.held = None
        if self.shape[0] * self.shape[1] * 8 <= limit:
            self.held = self._take(np.arange(self.shape[0]), slice(None))

    def __getitem__(self, index: Any) -> np.ndarray:
        if self.held is not None:
            return self.held[index]
        if isinstance(index, tuple):  # (all rows, some columns): one band
            rows, cols = index
            return self._take(np.arange(self.shape[0])[rows], cols)
        return self._take(np.asarray(index, dtype=np.int64), slice(None))

    def _take(self, idx: np.ndarray, cols: slice) -> np.ndarray:
        out = np.empty((len(idx), len(range(self.shape[1])[cols])), dtype=np.uint64)
        shard = self.shard[idx]
        by_shard = np.argsort(shard, kind="stable")
        for group in np.split(by_shard, np.flatnonzero(np.diff(shard[by_shard])) + 1):
            if len(group):
                out[group] = self.parts.of(int(shard[group[0]]))[self.ordinal[idx[group]], cols]
        return out


def cluster_member(verdict: ClusterVerdict) -> tuple[Annotation, dict[str, Any]]:
    """What a member of a text cluster gets from its verdict: an annotation of its cluster's size
    (failed by every member but the representative) and its cluster's document fields."""
    annotation = DUP_CLUSTER_SIZE.note(verdict.size, "fail" if verdict.dup_of else "pass")
    fields = {"dup_cluster_id": verdict.cluster, "dup_cluster_size": verdict.size, "dup_of": verdict.dup_of}
    return annotation, fields
