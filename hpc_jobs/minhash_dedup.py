"""Near-duplicate dedup: MinHash-LSH over all documents, clusters by distributed connected components.

Global phase (``prepare``, all ranks, checkpointed under ``work/``):

1. **Signatures** of each input shard (``mpi_kernels.minhash``), saved per shard in
   ``work/signatures/NAME.npz`` (reused on a rerun while the shard and the MinHash parameters match).
2. **Buckets.** Every band key of every document is shuffled to the band key's owner
   (``shuffle_by_key``); each bucket links its members as a star, hot buckets capped and split
   (``corpus.dedup.candidates``).
3. **Components** of the candidate edges (``mpi_kernels.union_find``): every clustered document learns
   the smallest doc_id of its component.
4. **Clusters.** Members are shuffled to their component's owner, which verifies components larger than
   ``verify_components_above`` by estimated Jaccard (``corpus.dedup.verify``), picks the representative
   (most trusted tier, best quality, earliest crawl, smallest doc_id: ``corpus.dedup.order``) and writes
   a verdict for every member to its shard's decision file.

Per shard: every clustered document gets ``dup_cluster_id`` (smallest doc_id of its cluster) and
``dup_cluster_size``; the representative is kept, the others go to ``filtered/`` as ``near_duplicate``
with ``dup_of`` = the representative. The manifest's ``extra`` has the cluster-size distribution and an
``alarms`` list (a cluster above ``alarm_cluster_size``, or more than ``alarm_clustered_fraction`` of the
documents in clusters, usually means boilerplate is chaining unrelated pages).

    python -m hpc_jobs.minhash_dedup --in build/stages/line_dedup --out build/stages/minhash_dedup
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from corpus.dedup.candidates import bucket_edges
from corpus.dedup.normalize import NORMALIZATION_VERSION
from corpus.dedup.order import doc_id_bytes, encode_representative_key
from corpus.dedup.verify import verified_clusters
from corpus.docshard import iter_docs
from corpus.model import Annotation, Filtered, Kept, Outcome
from mpi_kernels.minhash import MinHasher, MinHashParams, is_empty
from mpi_kernels.shuffle import shuffle_by_key
from mpi_kernels.union_find import connected_components
from runtime.phases import (
    checkpointed_global_phase,
    decided_docs,
    global_facts,
    global_phase_key,
    progress,
    route_decisions,
)
from runtime.runner import InputShard, Stage, StageContext, main

REP_KEY_BYTES = 35  # encode_representative_key: tier, quality, date, doc_id (last 16 bytes)
ID_BYTES = 16
_ORDINAL = struct.Struct(">I")
#: a cluster member travels as: representative key, position in its shard, signature, shard name
_SIG_AT = REP_KEY_BYTES + _ORDINAL.size


def graph_node(doc_id: bytes, ordinal: int, shard_name: str) -> bytes:
    """A document as a graph node: doc_id first (so the smallest node has the smallest doc_id), then
    where it is, so two copies with the same doc_id are two nodes and still cluster together."""
    where = hashlib.blake2b(shard_name.encode(), digest_size=8).digest()
    return doc_id + _ORDINAL.pack(ordinal) + where


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


class MinhashDedupStage(Stage):
    name = "minhash_dedup"
    version = "1"
    Config = MinhashDedupConfig

    @property
    def params(self) -> MinHashParams:
        c = self.config
        return MinHashParams(c.num_perm, c.bands, c.rows, c.ngram, c.seed)

    def _key(self, inputs: list[InputShard]) -> dict[str, Any]:
        return global_phase_key(self, inputs, normalization=NORMALIZATION_VERSION)

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        return checkpointed_global_phase(
            ctx, self._key(inputs), inputs, lambda mine: self._global(ctx, mine), _merge_facts
        )

    # -- 1. signatures -------------------------------------------------------------------------------
    def _signature_path(self, ctx: StageContext, shard_name: str) -> Path:
        return ctx.work_dir / "signatures" / f"{shard_name}.npz"

    def _signatures(self, ctx: StageContext, shard: InputShard, hasher: MinHasher) -> dict[str, np.ndarray]:
        path = self._signature_path(ctx, shard.name)
        key = f"{shard.sha256}|{self.params}|{NORMALIZATION_VERSION}"
        if path.exists():
            with np.load(path) as z:
                if str(z["key"]) == key:
                    return {k: z[k] for k in ("ids", "sigs", "rep")}
        ids, rep, sigs, batch = [], [], [], []
        for doc in iter_docs(shard.path):
            ids.append(doc_id_bytes(doc.doc_id))
            rep.append(encode_representative_key(doc))
            batch.append(doc.text)
            if len(batch) >= self.config.batch_docs:
                sigs.append(hasher.signatures(batch))
                batch = []
        if batch or not sigs:
            sigs.append(hasher.signatures(batch))
        arrays = {
            "ids": np.frombuffer(b"".join(ids), np.uint8).reshape(-1, ID_BYTES),
            "sigs": np.concatenate(sigs),
            "rep": np.frombuffer(b"".join(rep), np.uint8).reshape(-1, REP_KEY_BYTES),
        }
        buf = io.BytesIO()
        np.savez(buf, key=np.array(key), **arrays)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, path)
        return arrays

    # -- the global phase ----------------------------------------------------------------------------
    def _global(self, ctx: StageContext, mine: list[InputShard]) -> dict[str, Any]:
        cfg, comm = self.config, ctx.comm
        budget = ctx.memory_budget_bytes
        spill = ctx.work_dir / "spill"
        hasher = MinHasher(self.params)
        facts: Counter = Counter()
        t0 = time.monotonic()
        for shard in mine:
            arrays = self._signatures(ctx, shard, hasher)
            facts["docs"] += len(arrays["ids"])
            facts["docs_without_shingles"] += int(is_empty(arrays["sigs"]).sum())
        progress(
            ctx,
            self.name,
            f"signatures of {len(mine)} shards, {facts['docs']} documents, in {time.monotonic() - t0:.1f}s",
        )

        def band_records():
            for shard in mine:
                arrays = self._signatures(ctx, shard, hasher)
                keys = hasher.band_keys(arrays["sigs"])
                for d in np.flatnonzero(~is_empty(arrays["sigs"])):
                    node = graph_node(arrays["ids"][d].tobytes(), int(d), shard.name)
                    for band in keys[d]:
                        yield band.tobytes(), node

        # 2. buckets -> candidate edges
        edges: list[tuple[bytes, bytes]] = []
        for key, group in groupby(
            shuffle_by_key(comm, band_records(), memory_budget_bytes=budget, spill_dir=spill),
            key=itemgetter(0),
        ):
            members = sorted({node for _, node in group})
            if len(members) < 2:
                continue
            facts["shared_buckets"] += 1
            facts["largest_bucket"] = max(facts["largest_bucket"], len(members))
            if len(members) > cfg.bucket_cap:
                facts["hot_buckets"] += 1
            edges.extend(bucket_edges(key, members, cfg.bucket_cap))
        facts["candidate_edges"] += len(edges)
        progress(
            ctx,
            self.name,
            f"{facts['shared_buckets']} shared buckets here ({facts['hot_buckets']} hot), "
            f"{len(edges)} candidate edges",
        )

        # 3. components: (node, smallest node of its component), at the node's owner
        components = connected_components(comm, edges, memory_budget_bytes=budget, spill_dir=spill)
        del edges
        # the round count depends on the rank count, so it is logged, not digested
        progress(
            ctx,
            self.name,
            f"{len(components.labels)} clustered documents here; components converged "
            f"in {components.rounds} rounds",
        )

        # 4. join each labelled doc with its representative key and shard, then group by component
        def member_info():
            for shard in mine:
                arrays = self._signatures(ctx, shard, hasher)
                for d in np.flatnonzero(~is_empty(arrays["sigs"])):
                    yield (
                        graph_node(arrays["ids"][d].tobytes(), int(d), shard.name),
                        arrays["rep"][d].tobytes()
                        + _ORDINAL.pack(int(d))
                        + arrays["sigs"][d].astype("<u8").tobytes()
                        + shard.name.encode(),
                    )

        info = shuffle_by_key(comm, member_info(), memory_budget_bytes=budget, spill_dir=spill)
        labels = dict(components.labels)

        def by_component():
            for node, payload in info:
                label = labels.get(node)
                if label is not None:
                    yield label, payload

        verdicts = []
        sizes: Counter = Counter()
        for _, group in groupby(
            shuffle_by_key(comm, by_component(), memory_budget_bytes=budget, spill_dir=spill),
            key=itemgetter(0),
        ):
            members = [p for _, p in group]
            clusters = self._verify(members) if len(members) > cfg.verify_components_above else [members]
            if len(clusters) > 1 or len(clusters[0]) != len(members):
                facts["verified_components"] += 1
            for cluster in clusters:
                if len(cluster) < 2:
                    continue
                sizes[len(cluster)] += 1
                rep = min(cluster)
                rep_id = rep[REP_KEY_BYTES - ID_BYTES : REP_KEY_BYTES].hex()
                cluster_id = min(m[REP_KEY_BYTES - ID_BYTES : REP_KEY_BYTES] for m in cluster).hex()
                for m in cluster:
                    verdict = {
                        "cluster": cluster_id,
                        "size": len(cluster),
                        "dup_of": "" if m == rep else rep_id,
                    }
                    (ordinal,) = _ORDINAL.unpack_from(m, REP_KEY_BYTES)
                    verdicts.append((m[self._shard_at :].decode(), str(ordinal), verdict))
        progress(ctx, self.name, f"{sum(sizes.values())} clusters here, {len(verdicts)} verdicts")
        route_decisions(comm, verdicts, [s.name for s in mine], ctx.work_dir, budget)
        return {"counts": dict(facts), "cluster_sizes": dict(sizes)}

    @property
    def _shard_at(self) -> int:
        return _SIG_AT + 8 * self.config.num_perm

    def _verify(self, members: list[bytes]) -> list[list[bytes]]:
        """Split one oversized component into clusters of pairs verified by estimated Jaccard."""
        ids = [
            graph_node(
                m[REP_KEY_BYTES - ID_BYTES : REP_KEY_BYTES],
                _ORDINAL.unpack_from(m, REP_KEY_BYTES)[0],
                m[self._shard_at :].decode(),
            )
            for m in members
        ]
        sigs = [np.frombuffer(m[_SIG_AT : self._shard_at], dtype="<u8") for m in members]
        rows = members
        order = sorted(range(len(ids)), key=lambda i: (ids[i], rows[i]))
        labels = verified_clusters(
            [ids[i] for i in order],
            np.stack([sigs[i] for i in order]),
            self.config.bands,
            self.config.rows,
            self.config.verify_threshold,
        )
        clusters: dict[bytes, list[bytes]] = defaultdict(list)
        for i, label in zip(order, labels, strict=True):
            clusters[label].append(rows[i])
        return [clusters[k] for k in sorted(clusters)]

    # -- per shard -----------------------------------------------------------------------------------
    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        for doc, nbytes, v in decided_docs(ctx.work_dir, shard):
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
        facts = global_facts(ctx, self._key(inputs))
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


def _merge_facts(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    counts: Counter = Counter()
    largest = 0
    sizes: Counter = Counter()
    for f in per_rank:
        c = dict(f["counts"])
        largest = max(largest, c.pop("largest_bucket", 0))
        counts.update(c)
        sizes.update({int(k): v for k, v in f["cluster_sizes"].items()})
    return {
        "counts": {**dict(sorted(counts.items())), "largest_bucket": largest},
        "cluster_sizes": {str(k): sizes[k] for k in sorted(sizes)},
    }


STAGE = MinhashDedupStage

if __name__ == "__main__":
    sys.exit(main(STAGE))
