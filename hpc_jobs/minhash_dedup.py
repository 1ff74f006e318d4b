"""Near-duplicate dedup: MinHash-LSH over all documents, clusters by distributed connected components.

The global phase (``prepare``, all ranks) is a :class:`runtime.global_phase.GlobalPhase` of five steps,
each writing parts checkpointed as they complete (``work/phase/<step>/``), so a rank killed or
pre-empted in the middle of it costs only the part it was on:

1. ``signatures`` (map, a part per input shard): doc_ids, representative keys and MinHash signatures
   (``mpi_kernels.minhash``) as ``.npy`` files. A part whose files no longer match the digests its
   marker recorded (a torn or corrupted file) is redone, not trusted and not fatal.
2. ``buckets`` (exchange, parts fixed by the input count): every band key of every document goes to the
   part owning the key; each bucket links its members as a star, hot buckets split by a secondary hash
   (``corpus.dedup.candidates``); the part writes its candidate edges (``corpus.dedup.records.EDGE``).
3. ``labels`` (exchange, a part per input shard): connected components of all candidate edges
   (``mpi_kernels.union_find``), then every labelled document goes to its shard's part, which writes
   (ordinal, smallest node of the component) rows (``LABEL``).
4. ``clusters`` (exchange, parts fixed by the input count): every labelled document, with its signature,
   goes to the part owning its component; the part verifies components larger than
   ``verify_components_above`` by estimated Jaccard (``corpus.dedup.verify``), picks each cluster's
   representative (most trusted tier, best quality, earliest crawl, smallest doc_id:
   ``corpus.dedup.order``) and writes a verdict per member. A component larger than a quarter of the
   memory budget spills its members' signatures to ``work/spill`` and is verified memory-mapped.
5. ``decisions``: verdicts to their shard's decision table (``runtime.global_phase.route_verdicts``).

Per shard: every clustered document gets ``dup_cluster_id`` (smallest doc_id of its cluster) and
``dup_cluster_size``; the representative is kept, the others go to ``filtered/`` as ``near_duplicate``
with ``dup_of`` = the representative. The manifest's ``extra`` has the cluster-size distribution and an
``alarms`` list (a cluster above ``alarm_cluster_size``, or more than ``alarm_clustered_fraction`` of the
documents in clusters, usually means boilerplate is chaining unrelated pages).

    python -m hpc_jobs.minhash_dedup --in build/stages/line_dedup --out build/stages/minhash_dedup
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from corpus.dedup.candidates import bucket_star_edges, concat, part_names, part_of_hash
from corpus.dedup.normalize import NORMALIZATION_VERSION
from corpus.dedup.order import doc_id_bytes, encode_representative_key
from corpus.dedup.records import (
    BAND_ROW,
    DOC_ID_BYTES,
    EDGE,
    LABEL,
    NODE,
    REP_KEY_BYTES,
    graph_nodes,
    member_doc_id,
    member_dtype,
    shard_tag,
    shard_tags,
)
from corpus.dedup.verify import verified_clusters
from corpus.docshard import iter_docs
from corpus.model import Annotation, Filtered, Kept, Outcome
from mpi_kernels.minhash import MinHasher, MinHashParams, is_empty
from mpi_kernels.union_find import connected_components
from runtime.global_phase import (
    SPILL_DIR,
    GlobalPhase,
    PartWriter,
    decided_docs,
    global_phase_key,
    route_verdicts,
    write_verdicts,
)
from runtime.runner import InputShard, Stage, StageContext, assign, main

SIGNATURES, BUCKETS, LABELS, CLUSTERS, DECISIONS = "signatures", "buckets", "labels", "clusters", "decisions"
SIG_FILES = (".ids.npy", ".rep.npy", ".sigs.npy")
BANDS = ".bands"
BAND_OFFSETS = ".band_offsets.npy"
EDGES = ".edges"
LABEL_ROWS = ".labels"
#: the counts every run reports (zero included), so the manifest has the same keys on any data
COUNTS = (
    "docs",
    "docs_without_shingles",
    "shared_buckets",
    "hot_buckets",
    "largest_bucket",
    "candidate_edges",
    "clustered_docs",
    "verified_components",
)


@dataclass(frozen=True)
class MinhashDedupConfig:
    num_perm: int = 112
    bands: int = 14
    rows: int = 8
    ngram: int = 5
    #: seeds the permutation coefficients; changing it changes every signature
    seed: int = 0
    #: buckets with more members are split by a secondary hash into sub-buckets of about this size
    bucket_cap: int = 10_000
    #: components with more members are clustered again from pairs verified by estimated Jaccard;
    #: the default 1 verifies every cluster (docs/dedup.md: better precision than LSH alone, same recall)
    verify_components_above: int = 1
    #: a verified pair needs estimated Jaccard >= this; it sits about one standard error of the K=112
    #: estimate (~0.045) below the 0.7 the default bands aim at, so estimation noise costs little recall
    verify_threshold: float = 0.65
    alarm_cluster_size: int = 10_000
    alarm_clustered_fraction: float = 0.5
    batch_docs: int = 1024

    def __post_init__(self) -> None:
        MinHashParams(self.num_perm, self.bands, self.rows, self.ngram, self.seed)
        if not 0.0 < self.verify_threshold <= 1.0:
            raise ValueError("verify_threshold must be in (0, 1]")
        if self.bucket_cap < 2:
            raise ValueError("bucket_cap must be at least 2")


@dataclass(frozen=True)
class GroupUnit:
    """A bucket part as the unit of a map step (it names the part and is its own digest)."""

    name: str
    sha256: str


def group_units(groups: list[str]) -> list[GroupUnit]:
    """The bucket parts as units of a map step (each reads its rows from every signature part)."""
    return [GroupUnit(g, g) for g in groups]


def band_rows(
    hasher: MinHasher, ids: np.ndarray, sigs: np.ndarray, shard_name: str, groups: int
) -> np.ndarray:
    """Every band key of every document with shingles, as BAND_ROW rows sorted by (part, key, node): a
    bucket part reads one contiguous run of them."""
    live = np.flatnonzero(~is_empty(sigs))
    keys = hasher.band_keys(sigs[live])  # (n, bands, 18): band index (2 bytes), then a hash
    bands = keys.shape[1]
    flat = keys.reshape(-1, keys.shape[2])
    rows = np.empty(len(flat), dtype=BAND_ROW)
    rows["part"] = part_of_hash(flat[:, 2:], groups)
    rows["key"] = np.ascontiguousarray(flat).view(f"V{flat.shape[1]}").reshape(-1)
    rows["node"] = np.repeat(graph_nodes(ids[live], live, shard_name), bands)
    return rows[np.argsort(rows.view(f"V{BAND_ROW.itemsize}").reshape(-1), kind="stable")]


class MinhashDedupStage(Stage):
    name = "minhash_dedup"
    version = "2"  # the global phase checkpointed in parts (runtime.global_phase)
    Config = MinhashDedupConfig

    @property
    def params(self) -> MinHashParams:
        c = self.config
        return MinHashParams(c.num_perm, c.bands, c.rows, c.ngram, c.seed)

    def _key(self, inputs: list[InputShard]) -> dict[str, Any]:
        return global_phase_key(self, inputs, normalization=NORMALIZATION_VERSION)

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        phase = self._phase = GlobalPhase(ctx, self._key(inputs))
        if phase.complete:
            return phase.reused()
        inputs = sorted(inputs, key=lambda s: s.name)
        shards = [s.name for s in inputs]
        self._tags = shard_tags(shards)
        self._hasher = MinHasher(self.params)
        # the number of parts of the hashed steps is fixed by the data, never by the rank count
        groups = part_names("g", len(inputs))

        # 1. signatures, a part per input shard (a part whose files are damaged is redone)
        self._drop_damaged_signatures(phase, inputs)
        phase.map(SIGNATURES, inputs, lambda s, w: self._write_signatures(s, w, len(groups)))
        # 2. each bucket part reads its band rows from every signature part -> candidate edges
        phase.map(BUCKETS, group_units(groups), lambda g, w: self._write_buckets(phase, shards, g, w))
        # 3. connected components -> a label table per shard
        self._labels(phase, groups, shards)
        # 4. members to their component's part -> verified clusters, representatives, verdicts
        phase.exchange(
            CLUSTERS,
            groups,
            inputs,
            lambda s: self._member_records(phase, s, len(groups)),
            self._reduce_clusters,
        )
        # 5. verdicts to their shard's decision table
        route_verdicts(phase, DECISIONS, CLUSTERS, groups, shards)
        facts = None
        if ctx.rank == 0:
            facts = merge_facts(
                [
                    p.facts
                    for step, names in (
                        (SIGNATURES, shards),
                        (BUCKETS, groups),
                        (LABELS, shards),
                        (CLUSTERS, groups),
                    )
                    for p in phase.parts(step, names)
                ]
            )
        steps = {SIGNATURES: shards, BUCKETS: groups, LABELS: shards, CLUSTERS: groups, DECISIONS: shards}
        return phase.finish(steps, ctx.comm.bcast(facts, root=0))

    # -- 1. signatures -------------------------------------------------------------------------------
    def _write_signatures(self, shard: InputShard, writer: PartWriter, groups: int) -> dict[str, Any]:
        ids, rep, sigs, batch = [], [], [], []
        for doc in iter_docs(shard.path):
            ids.append(doc_id_bytes(doc.doc_id))
            rep.append(encode_representative_key(doc))
            batch.append(doc.text)
            if len(batch) >= self.config.batch_docs:
                sigs.append(self._hasher.signatures(batch))
                batch = []
        if batch or not sigs:
            sigs.append(self._hasher.signatures(batch))
        arrays = (
            np.frombuffer(b"".join(ids), np.uint8).reshape(-1, DOC_ID_BYTES),
            np.frombuffer(b"".join(rep), np.uint8).reshape(-1, REP_KEY_BYTES),
            np.concatenate(sigs),
        )
        for suffix, array in zip(SIG_FILES, arrays, strict=True):
            np.save(writer.open(suffix), array, allow_pickle=False)
        rows = band_rows(self._hasher, arrays[0], arrays[2], shard.name, groups)
        writer.open(BANDS).write(rows.tobytes())
        offsets = np.searchsorted(rows["part"], np.arange(groups + 1)).astype(np.int64)
        np.save(writer.open(BAND_OFFSETS), offsets, allow_pickle=False)
        return {"docs": len(ids), "docs_without_shingles": int(is_empty(arrays[2]).sum())}

    def _drop_damaged_signatures(self, phase: GlobalPhase, inputs: list[InputShard]) -> None:
        """Each rank checks its completed signature parts against the digests their markers recorded;
        a damaged part is forgotten, so the map step below computes it again."""
        for shard in assign(inputs, phase.ctx.rank, phase.ctx.size):
            phase.verified_part(SIGNATURES, shard.name)

    def _load_signatures(self, phase: GlobalPhase, shard_name: str) -> tuple[np.ndarray, ...]:
        part = phase.part(SIGNATURES, shard_name)
        if part is None:
            raise FileNotFoundError(f"signatures of {shard_name} are not complete")
        return tuple(np.load(part.path(s), mmap_mode="r", allow_pickle=False) for s in SIG_FILES)

    # -- 2. buckets ----------------------------------------------------------------------------------
    def _write_buckets(
        self, phase: GlobalPhase, shards: list[str], unit: Any, writer: PartWriter
    ) -> dict[str, Any]:
        """One bucket part: its band rows from every signature part (a contiguous run of each, found by
        the part's offsets), sorted by (band key, node), grouped into buckets, linked as stars."""
        g = int(unit.name[1:])
        runs = []
        for name in shards:
            part = phase.part(SIGNATURES, name)
            lo, hi = np.load(part.path(BAND_OFFSETS), allow_pickle=False)[g : g + 2]
            runs.append(
                np.fromfile(
                    part.path(BANDS), dtype=BAND_ROW, offset=int(lo) * BAND_ROW.itemsize, count=int(hi - lo)
                )
            )
        rows = concat(runs, BAND_ROW)
        edges, facts = bucket_star_edges(rows, self.config.bucket_cap)
        writer.open(EDGES).write(edges.tobytes())
        return facts

    def _edges_of(self, part: Any) -> Iterator[tuple[bytes, bytes]]:
        rows = np.fromfile(part.path(EDGES), dtype=EDGE)
        for lo in range(0, len(rows), 65536):
            block = rows[lo : lo + 65536]
            yield from zip(_row_bytes(block["node"]), _row_bytes(block["hub"]), strict=True)

    # -- 3. components -> labels ---------------------------------------------------------------------
    def _labels(self, phase: GlobalPhase, groups: list[str], shards: list[str]) -> None:
        """Connected components of every candidate edge, then each document's label to its shard's
        part. Components are recomputed only while some label part is missing (they are rounds of
        shuffles, not parts; a rerun recomputes them, deterministically)."""
        ctx, comm = phase.ctx, phase.comm
        todo = None
        if ctx.rank == 0:
            todo = any(phase.part(LABELS, s) is None for s in shards)
        labels: list[tuple[bytes, bytes]] = []
        if comm.bcast(todo, root=0):
            edge_parts = phase.parts(BUCKETS, groups) if ctx.rank == 0 else None
            edge_parts = comm.bcast(edge_parts, root=0)

            def edges() -> Iterator[tuple[bytes, bytes]]:
                for part in assign(edge_parts, ctx.rank, ctx.size):
                    yield from self._edges_of(part)

            components = connected_components(
                comm,
                edges(),
                memory_budget_bytes=ctx.memory_budget_bytes,
                spill_dir=Path(ctx.work_dir) / SPILL_DIR,
            )
            # the round count depends on the rank count, so it is logged, not digested
            ctx.say(f"{len(components.labels)} clustered documents here; components in {components.rounds} rounds")
            labels = components.labels
        shard_no = {name: i for i, name in enumerate(shards)}
        tags = self._tags

        def send(_: None) -> Iterator[tuple[int, bytes, bytes]]:
            nodes = np.frombuffer(b"".join(node for node, _ in labels), dtype=NODE)
            ordinals = _row_bytes(nodes["ordinal"])
            for i, (tag, (_, label)) in enumerate(zip(_row_bytes(nodes["shard_tag"]), labels, strict=True)):
                yield shard_no[tags[tag]], ordinals[i], label

        def reduce(_: int, records: Iterator[tuple[bytes, bytes]], writer: PartWriter) -> dict[str, Any]:
            rows = [ordinal + label for ordinal, label in records]
            writer.write_bytes(LABEL_ROWS, b"".join(rows))
            return {"clustered_docs": len(rows)}

        phase.exchange(LABELS, shards, None, send, reduce)  # each rank sends the labels it holds

    # -- 4. clusters ---------------------------------------------------------------------------------
    def _member_records(
        self, phase: GlobalPhase, shard: InputShard, parts: int
    ) -> Iterator[tuple[int, bytes, bytes]]:
        labels = np.fromfile(phase.part(LABELS, shard.name).path(LABEL_ROWS), dtype=LABEL)
        if not labels.size:
            return
        _, rep, sigs = self._load_signatures(phase, shard.name)
        ordinals = labels["ordinal"].astype(np.int64)
        members = np.empty(len(labels), dtype=member_dtype(self.config.num_perm))
        members["rep"] = np.ascontiguousarray(rep[ordinals]).view(f"V{REP_KEY_BYTES}").reshape(-1)
        members["ordinal"] = labels["ordinal"]
        members["shard_tag"] = np.void(shard_tag(shard.name))
        members["sig"] = sigs[ordinals]
        label_nodes = np.ascontiguousarray(labels["label"])
        # the component's part: a hash of its label (whose doc_id is itself a hash)
        where = part_of_hash(label_nodes.view(np.uint8).reshape(len(labels), -1), parts).tolist()
        yield from zip(where, _row_bytes(label_nodes), _row_bytes(members), strict=True)

    def _reduce_clusters(
        self, _: int, records: Iterator[tuple[bytes, bytes]], writer: PartWriter
    ) -> dict[str, Any]:
        cfg = self.config
        dtype = member_dtype(cfg.num_perm)
        sizes: Counter = Counter()
        facts = {"verified_components": 0}
        spill = Path(self._phase.ctx.work_dir) / SPILL_DIR
        limit = max(self._phase.ctx.memory_budget_bytes // 4, dtype.itemsize)

        def verdicts() -> Iterator[tuple[str, str, dict[str, Any]]]:
            for label, group in groupby(records, key=itemgetter(0)):
                with ComponentMembers(dtype, limit, spill) as buf:
                    for _, payload in group:
                        buf.append(payload)
                    members = buf.rows()
                    if buf.spilled:
                        self._phase.ctx.say(f"a component of {len(members)} members spilled to disk")
                    clusters = (
                        self._clusters(label, members)
                        if len(members) > cfg.verify_components_above
                        else [np.arange(len(members))]
                    )
                    if len(clusters) > 1 or len(clusters[0]) != len(members):
                        facts["verified_components"] += 1
                    for cluster in clusters:
                        if len(cluster) < 2:
                            continue
                        sizes[len(cluster)] += 1
                        yield from self._cluster_verdicts(members, cluster)

        write_verdicts(writer, verdicts())
        return {**facts, "cluster_sizes": {str(k): sizes[k] for k in sorted(sizes)}}

    def _clusters(self, label: bytes, members: np.ndarray) -> list[np.ndarray]:
        """Split one component into clusters of pairs verified by estimated Jaccard; each cluster as the
        member indices (into ``members``, ascending), clusters in the order of their smallest node."""
        nodes = [
            member_doc_id(r["rep"].tobytes()) + r["ordinal"].tobytes() + r["shard_tag"].tobytes()
            for r in members[["rep", "ordinal", "shard_tag"]]
        ]
        order = sorted(range(len(nodes)), key=nodes.__getitem__)
        labels = verified_clusters(
            [nodes[i] for i in order],
            _SigView(members, order),
            self.config.bands,
            self.config.rows,
            self.config.verify_threshold,
        )
        by_label: dict[bytes, list[int]] = {}
        for i, lab in zip(order, labels, strict=True):
            by_label.setdefault(lab, []).append(i)
        return [np.array(sorted(by_label[k])) for k in sorted(by_label)]

    def _cluster_verdicts(
        self, members: np.ndarray, cluster: np.ndarray
    ) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """A verdict per member: the representative is the smallest member record (its representative
        key first; (rep, ordinal, shard tag) is unique per document, so the signature never decides),
        the cluster id the smallest doc_id. Only those fields are read: a spilled component's
        signatures stay on disk."""
        reps = _row_bytes(members["rep"][cluster])
        ordinals = members["ordinal"][cluster].tolist()
        tags = _row_bytes(members["shard_tag"][cluster])
        keys = [r + o.to_bytes(4, "big") + t for r, o, t in zip(reps, ordinals, tags, strict=True)]
        best = min(range(len(keys)), key=keys.__getitem__)
        rep_id = member_doc_id(reps[best]).hex()
        cluster_id = min(member_doc_id(r) for r in reps).hex()
        for i, (ordinal, tag) in enumerate(zip(ordinals, tags, strict=True)):
            verdict = {"cluster": cluster_id, "size": len(keys), "dup_of": "" if i == best else rep_id}
            yield self._tags[tag], str(ordinal), verdict

    # -- per shard -----------------------------------------------------------------------------------
    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        for doc, nbytes, v in decided_docs(self._phase.root, DECISIONS, shard):
            if v is None:
                yield Kept(doc), nbytes
                continue
            dup = v["dup_of"]
            doc = replace(doc, dup_cluster_id=v["cluster"], dup_cluster_size=v["size"], dup_of=dup)
            doc = doc.annotate(
                Annotation(self.name, "dup_cluster_size", v["size"], "fail" if dup else "pass")
            )
            yield (Filtered(doc, "near_duplicate") if dup else Kept(doc)), nbytes

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        facts = self._phase.facts
        cfg = self.config
        sizes = {int(k): v for k, v in facts["cluster_sizes"].items()}
        docs = facts["counts"].get("docs", 0)
        clustered = sum(k * v for k, v in sizes.items())
        largest = max(sizes, default=0)
        alarms = []
        if largest > cfg.alarm_cluster_size:
            alarms.append(
                f"largest cluster has {largest} documents (alarm_cluster_size {cfg.alarm_cluster_size})"
            )
        if docs and clustered / docs > cfg.alarm_clustered_fraction:
            alarms.append(
                f"{clustered / docs:.1%} of documents are in clusters "
                f"(alarm_clustered_fraction {cfg.alarm_clustered_fraction:.0%})"
            )
        return {
            "normalization_version": NORMALIZATION_VERSION,
            "minhash": {
                "num_perm": cfg.num_perm,
                "bands": cfg.bands,
                "rows": cfg.rows,
                "ngram": cfg.ngram,
                "seed": cfg.seed,
            },
            **facts["counts"],
            "clusters": sum(sizes.values()),
            "docs_in_clusters": clustered,
            "largest_cluster": largest,
            "cluster_size_histogram": size_histogram(sizes),
            "alarms": alarms,
        }


class ComponentMembers:
    """One component's member records at its owner: in memory up to ``limit`` bytes, beyond that
    appended to a file under ``spill_dir`` and read back memory-mapped, so a giant component (a
    template shared by millions of pages) costs its node ids in memory, not its signatures."""

    def __init__(self, dtype: np.dtype, limit: int, spill_dir: Path) -> None:
        self.dtype, self.limit, self.spill_dir = dtype, limit, spill_dir
        self._chunks: list[bytes] = []
        self._held = 0
        self._file: Any = None
        self._path: Path | None = None
        self._count = 0

    def append(self, payload: bytes) -> None:
        self._chunks.append(payload)
        self._held += len(payload)
        self._count += 1
        if self._held > self.limit:
            self._flush()

    def _flush(self) -> None:
        if self._file is None:
            self.spill_dir.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix="component-", dir=self.spill_dir)
            self._file, self._path = os.fdopen(fd, "wb"), Path(name)
        self._file.write(b"".join(self._chunks))
        self._chunks, self._held = [], 0

    @property
    def spilled(self) -> bool:
        return self._path is not None

    def rows(self) -> np.ndarray:
        if self._file is None:
            return np.frombuffer(b"".join(self._chunks), dtype=self.dtype)
        self._flush()
        self._file.close()
        return np.memmap(self._path, dtype=self.dtype, mode="r", shape=(self._count,))

    def __enter__(self) -> ComponentMembers:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._file is not None:
            self._file.close()
            self._path.unlink(missing_ok=True)


class _SigView:
    """The signatures of a component's members in node order, without copying them all: what
    ``verified_clusters`` indexes (a band's columns of every row, or a few rows) is read from
    ``members`` (in memory or memory-mapped) when asked for."""

    def __init__(self, members: np.ndarray, order: list[int]) -> None:
        self.sig = members["sig"]
        self.order = np.asarray(order, dtype=np.int64)
        self.shape = (len(order), self.sig.shape[1])

    def __getitem__(self, index: Any) -> np.ndarray:
        if isinstance(index, tuple):  # (all rows, some columns): one band
            rows, cols = index
            return np.asarray(self.sig[:, cols][self.order[rows]])
        return np.asarray(self.sig[self.order[index]])


def _row_bytes(rows: np.ndarray) -> list[bytes]:
    raw = np.ascontiguousarray(rows).tobytes()
    w = rows.dtype.itemsize
    return [raw[i : i + w] for i in range(0, len(raw), w)]


def size_histogram(sizes: dict[int, int]) -> dict[str, int]:
    """Clusters by size in powers of two: "2", "3-4", "5-8", ... (keys in increasing order)."""
    out: dict[str, int] = {}
    for size in sorted(sizes):
        hi = 2
        while hi < size:
            hi *= 2
        lo = hi // 2 + 1
        label = str(hi) if lo >= hi else f"{lo}-{hi}"
        out[label] = out.get(label, 0) + sizes[size]
    return out


def merge_facts(per_part: list[dict[str, Any]]) -> dict[str, Any]:
    """Every part's facts as the manifest reports them: counts summed (the largest bucket: maximum),
    cluster sizes summed per size."""
    counts = dict.fromkeys(COUNTS, 0)
    sizes: Counter = Counter()
    for f in per_part:
        for k, v in f.items():
            if k == "cluster_sizes":
                sizes.update({int(s): n for s, n in v.items()})
            elif k == "largest_bucket":
                counts[k] = max(counts[k], v)
            else:
                counts[k] += v
    return {"counts": counts, "cluster_sizes": {str(k): sizes[k] for k in sorted(sizes)}}


STAGE = MinhashDedupStage

if __name__ == "__main__":
    sys.exit(main(STAGE))
