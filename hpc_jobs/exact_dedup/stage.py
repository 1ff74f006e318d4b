"""exact_dedup: documents whose normalized text is the same are one document; the keeper stays.

Every document's (text key, keeper key) goes to the part owning the text key, which gets each group
sorted by keeper key: the first is the keeper (most trusted tier, earliest crawl, doc_id:
``corpus.dedup.order``). Every other copy is filtered as ``exact_duplicate`` with ``dup_of`` and its
provenance in ``copies/NAME.jsonl.zst``; a keeper with a held-out page's key is tagged
``holdout_exact``. Inside a build each part also writes its groups' index records
(``index_records/PART.exact.rec``); against a base the parts are the index's partitions and a key the
base holds makes every copy a duplicate of the base's keeper (keep-first). docs/dedup.md,
docs/incremental.md.

    python -m hpc_jobs.exact_dedup --in build/stages/extract --out build/stages/exact_dedup [--config FILE]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain, groupby
from operator import itemgetter
from typing import Any

from corpus.decont.holdout import EXACT_KEY, EXACT_SCORE, HOLDOUT_STAGE, HoldoutFile, holdout_files
from corpus.dedup.exact_copy import ExactCopy
from corpus.dedup.order import doc_id_bytes
from corpus.formats.dedup_index import BaseGenerations
from corpus.formats.dedup_keys import doc_ids, exact_key_params
from corpus.formats.docshard import SUFFIX, RecordsFile, ShardWriter, iter_docs
from corpus.model import Annotation, Document, Filtered, Kept, Outcome
from corpus.model.digest import canonical_json
from corpus.model.layout import INDEX_RECORDS
from corpus.select.provenance import copy_record
from corpus.text.normalize import KEY_VERSION, text_key
from mpi_kernels.shuffle_bytes import stable_key_hash
from runtime.global_phase import (
    GlobalPhase,
    PartWriter,
    decided_docs,
    global_phase_key,
    route_verdicts,
    write_verdicts,
)
from runtime.runner import (
    InputShard,
    Stage,
    StageContext,
    StageError,
    base_generations,
    remove_stale_artifacts,
    remove_stale_index_records,
)

HOLDOUT_KEYS = "holdout_keys"
HELD_KEYS_FILE = ".keys"
GROUPS = "groups"
DECISIONS = "decisions"
#: the per-shard provenance of the copies the stage did not store (corpus.select.provenance)
COPIES = "copies"
#: a part's records inside a build (``index_records/PART.exact.rec``): the (key, keeper) records of the
#: groups it decided, for the build's own index generation (EXACT_RECORD rows in key order, a sidecar)
INDEX_RECORDS_SUFFIX = ".exact.rec"
#: keys of a part probed against the base at once (with their copies, at most this many records held)
PROBE_BATCH = 1 << 16


def with_base_keepers(
    base: BaseGenerations, p: int, groups: Iterable[tuple[bytes, Iterator[tuple[bytes, bytes]]]]
) -> Iterator[tuple[bytes, Iterator[bytes], str | None]]:
    """Each (key, its payloads, the base keeper's doc_id or None) of part ``p``'s sorted groups. Groups are
    read ahead until :data:`PROBE_BATCH` records are held, then their keys are probed at once; a group
    larger than that is probed as soon as the batch is full and the rest of its copies streamed, so a
    text with millions of copies still costs a batch, not its copies."""
    held: list[tuple[bytes, list[bytes], Iterator[tuple[bytes, bytes]] | None]] = []
    n = 0

    def flush() -> Iterator[tuple[bytes, Iterator[bytes], str | None]]:
        found = base.index.probe_partition(p, [key for key, _, _ in held])
        keepers = doc_ids(found.values)
        for i, (key, payloads, rest) in enumerate(held):
            tail = (pl for _, pl in rest) if rest is not None else ()
            yield key, chain(payloads, tail), keepers[i] if found.found[i] else None

    for key, group in groups:
        payloads: list[bytes] = []
        rest = None
        for _, payload in group:
            payloads.append(payload)
            n += 1
            if n >= PROBE_BATCH:
                rest = group  # streamed after the probe, before the next group is read
                break
        held.append((key, payloads, rest))
        if n >= PROBE_BATCH:
            yield from flush()
            held, n = [], 0
    if held:
        yield from flush()


@dataclass(frozen=True, kw_only=True)
class ExactDedupConfig:
    """Exact dedup has no settings of its own (its memory budget is the build's ``memory_budget_mb``)."""


class ExactDedupStage(Stage):
    name = "exact_dedup"
    # what each version changed: docs/dedup.md "Stage versions"
    version = "7"
    Config = ExactDedupConfig
    artifact_kinds = (COPIES, INDEX_RECORDS)

    def __init__(self, config: ExactDedupConfig) -> None:
        super().__init__(config)
        self._copies: dict[str, ShardWriter] = {}
        self._held: list[HoldoutFile] = []
        self._base: BaseGenerations | None = None

    def _key(self, inputs: list[InputShard]) -> dict[str, Any]:
        held = sorted([f.name, f.sha256] for f in self._held)
        base = self._base
        index = (
            {"index": {"partitions": base.partitions, "base": base.digest}} if base and base.probed else {}
        )
        return global_phase_key(self, inputs, normalization=KEY_VERSION, holdout=held, **index)

    def _groups(self, inputs: list[InputShard]) -> list[str]:
        """The parts of the exchange: one per input shard, or with a base one per index partition."""
        if self._base is None or not self._base.probed:
            return [f"g{i:05d}" for i in range(len(inputs))]  # fixed by the data
        return [f"p{p:05d}" for p in range(self._base.partitions)]  # fixed by the index

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """Three steps: ``holdout_keys`` (each held-out page's key to the part that owns it),
        ``groups`` (each text key to the part that owns it; the part decides its groups' keepers, and
        whether a held-out page shares the key, and writes their verdicts) and ``decisions`` (each
        verdict to its shard's table)."""
        remove_stale_artifacts(ctx, inputs, COPIES, (SUFFIX, SUFFIX + ".json"))
        self._held = holdout_files(ctx.in_paths[0])
        base = self._base = base_generations(ctx.out_dir, "exact", exact_key_params())
        groups = self._groups(inputs)
        remove_stale_index_records(ctx, groups)
        phase = self._phase = GlobalPhase(ctx, self._key(inputs))  # (a barrier: after the removal)
        if phase.complete:
            return phase.reused()
        probed = base is not None and base.probed
        part_of = base.part_of if probed else (lambda key: stable_key_hash(key) % len(groups))

        def send_held(f: HoldoutFile) -> Iterator[tuple[int, bytes, bytes]]:
            for doc in iter_docs(f.path):
                key = held_out_key(doc, f)
                yield part_of(key), key, b""

        def reduce_held(_: int, records: Iterator[tuple[bytes, bytes]], writer: PartWriter) -> dict[str, Any]:
            out = writer.open(HELD_KEYS_FILE)
            n = 0
            for key, _ in groupby(records, key=itemgetter(0)):  # sorted: each key once
                out.write(key)
                n += 1
            return {"holdout_keys": n}

        if self._held:
            phase.exchange(HOLDOUT_KEYS, groups, self._held, send_held, reduce_held)

        def send(shard: InputShard) -> Iterator[tuple[int, bytes, bytes]]:
            for i, doc in enumerate(iter_docs(shard.path)):
                key = text_key(doc.text)
                # the first copy of a group in byte order is its keeper
                yield part_of(key), key, ExactCopy.of(doc, i, shard.name).encode()

        def reduce(g: int, records: Iterator[tuple[bytes, bytes]], writer: PartWriter) -> dict[str, Any]:
            sizes: Counter = Counter()
            held = self._held_keys(phase, groups[g])
            tagged = 0
            index: Counter = Counter()
            own = (
                RecordsFile(ctx.out_dir / INDEX_RECORDS / f"{groups[g]}{INDEX_RECORDS_SUFFIX}")
                if base
                else None
            )
            grouped = groupby(records, key=itemgetter(0))
            if probed:
                decided = with_base_keepers(base, g, grouped)
            else:
                decided = ((key, (p for _, p in group), None) for key, group in grouped)

            def verdicts() -> Iterator[tuple[str, str, dict[str, Any]]]:
                nonlocal tagged
                for key, payloads, base_keeper in decided:
                    # streamed: a text with millions of copies costs one record of memory, not a list
                    copies = (ExactCopy.decode(p) for p in payloads)
                    if base_keeper is not None:  # keep-first: the base's keeper stays the keeper
                        index["base_keys"] += 1
                        for c in copies:
                            index["base_duplicates"] += 1
                            yield c.shard, str(c.ordinal), {"dup_of": base_keeper}
                        continue
                    keeper = next(copies)
                    if own is not None:
                        own.write(key + doc_id_bytes(keeper.doc_id))
                        index["index_records"] += 1
                    n = 1
                    for c in copies:
                        n += 1
                        yield c.shard, str(c.ordinal), {"dup_of": keeper.doc_id}
                    sizes[str(n) if n < 10 else "10+"] += 1
                    verdict: dict[str, Any] = {"copies": n} if n > 1 else {}
                    if key in held:
                        verdict["holdout"] = "exact"
                        tagged += 1
                    if verdict:
                        yield keeper.shard, str(keeper.ordinal), verdict

            write_verdicts(writer, verdicts())
            if own is not None:
                own.close()  # before the part's marker: a completed part always has its records
            facts: dict[str, Any] = {"groups_by_size": dict(sizes), "holdout_exact": tagged}
            if probed:
                facts |= {k: index[k] for k in INDEX_FACTS}
            return facts

        phase.exchange(GROUPS, groups, inputs, send, reduce)
        shards = [s.name for s in inputs]
        route_verdicts(phase, DECISIONS, GROUPS, groups, shards)
        facts = _merge_facts([p.facts for p in phase.parts(GROUPS, groups)]) if ctx.rank == 0 else None
        steps = {GROUPS: groups, DECISIONS: shards} | ({HOLDOUT_KEYS: groups} if self._held else {})
        return phase.finish(steps, ctx.comm.bcast(facts, root=0))

    def _held_keys(self, phase: GlobalPhase, part: str) -> frozenset[bytes]:
        """The held-out pages' keys a part of ``groups`` owns (none without a holdout)."""
        if not self._held:
            return frozenset()
        data = phase.parts(HOLDOUT_KEYS, [part])[0].path(HELD_KEYS_FILE).read_bytes()
        return frozenset(data[i : i + 16] for i in range(0, len(data), 16))

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        copies = self._copies[shard.name] = ShardWriter(ctx.artifact_path(COPIES, f"{shard.name}{SUFFIX}"))
        for doc, nbytes, verdict in decided_docs(self._phase.root, DECISIONS, shard):
            if verdict is None:
                yield Kept(doc), nbytes
            elif "dup_of" in verdict:
                dup = doc.annotate(
                    Annotation(self.name, "dup_of", verdict["dup_of"], "fail"), dup_of=verdict["dup_of"]
                )
                copies.write_line(canonical_json(copy_record(doc, verdict["dup_of"])))
                yield Filtered(dup, "exact_duplicate"), nbytes
            else:
                notes = []
                if "copies" in verdict:
                    notes += [
                        Annotation(self.name, "copies", verdict["copies"], "pass"),
                        Annotation(self.name, "keeper_id", doc.doc_id, "info"),  # what copies/ points at
                    ]
                if verdict.get("holdout") == "exact":
                    notes.append(Annotation(self.name, EXACT_SCORE, 1.0, "fail"))
                    doc = doc.annotate(scores={**doc.scores, EXACT_SCORE: 1.0})
                yield Kept(doc.annotate(*notes)), nbytes

    def finish_shard(self, shard: InputShard, ctx: StageContext) -> None:
        self._copies.pop(shard.name).close()

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        facts = self._phase.facts
        extra: dict[str, Any] = {
            "normalization_version": KEY_VERSION,
            "groups_by_size": facts["groups_by_size"],
            "holdout_docs": sum(f.records for f in self._held),
            "holdout_exact": facts["holdout_exact"],
        }
        if self._base is not None and self._base.probed:
            extra["index"] = self._base.describe() | {k: facts[k] for k in INDEX_FACTS}
        return extra


def held_out_key(doc: Document, f: HoldoutFile) -> bytes:
    """The exact key extract stored with a held-out page (of the text before its PII scrub)."""
    note = doc.annotation(HOLDOUT_STAGE, EXACT_KEY)
    version, _, key = str(note.value if note is not None else "").partition(":")
    if version != KEY_VERSION or len(key) != 32:
        raise StageError(
            f"held-out page {doc.doc_id} of {f.path} has no exact key of version {KEY_VERSION} "
            f"(found {note.value if note is not None else 'none'!r}): rerun the extract stage"
        )
    return bytes.fromhex(key)


#: what a part reports about the index inside a build: keys the base held, this build's copies of them
#: (each a duplicate of the base's keeper) and the records of this build's own generation
INDEX_FACTS = ("base_keys", "base_duplicates", "index_records")


def _merge_facts(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    total: Counter = Counter()
    for f in per_rank:
        total.update(f["groups_by_size"])
    merged = {
        "groups_by_size": dict(sorted(total.items(), key=lambda kv: (len(kv[0]), kv[0]))),
        "holdout_exact": sum(f.get("holdout_exact", 0) for f in per_rank),
    }
    if per_rank and "index_records" in per_rank[0]:
        merged |= {k: sum(f[k] for f in per_rank) for k in INDEX_FACTS}
    return merged


STAGE = ExactDedupStage
