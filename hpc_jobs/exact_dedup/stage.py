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

from corpus.decont.holdout import EXACT_SCORE, HoldoutFile
from corpus.dedup.exact_copy import ExactCopy
from corpus.dedup.order import doc_id_bytes
from corpus.formats.dedup_index import BaseGenerations
from corpus.formats.dedup_keys import doc_ids, exact_key_params
from corpus.formats.docshard import SUFFIX, iter_docs
from corpus.model import Document, Filtered, Kept, Outcome
from corpus.model.annotations import (
    EXACT_COPIES,
    EXACT_DUP_OF,
    EXACT_KEEPER_ID,
    HOLDOUT_EXACT,
    HOLDOUT_EXACT_KEY,
)
from corpus.model.digest import canonical_json
from corpus.model.layout import INDEX_RECORDS
from corpus.select.provenance import copy_record
from corpus.text.normalize import KEY_VERSION, text_key
from mpi_kernels.barrier import sleeping_bcast
from mpi_kernels.shuffle_bytes import stable_key_hash
from runtime.against_base import AgainstBase, IndexFacts, first_records, with_base_values
from runtime.global_phase import (
    PART_ROWS,
    GlobalPhase,
    PartWriter,
    decided_docs,
    global_phase_key,
    part_count,
    route_verdicts,
    write_verdicts,
)
from runtime.input_shard import InputShard
from runtime.runner import Stage, StageContext, StageError, eval_holdout, remove_stale_artifacts
from runtime.side_output import SideOutput

HOLDOUT_KEYS = "holdout_keys"
HELD_KEYS_FILE = ".keys"
GROUPS = "groups"
DECISIONS = "decisions"
#: the per-shard provenance of the copies the stage did not store (corpus.select.provenance)
COPIES = "copies"


def with_base_keepers(
    base: BaseGenerations, p: int, groups: Iterable[tuple[bytes, Iterator[tuple[bytes, bytes]]]]
) -> Iterator[tuple[bytes, Iterator[bytes], str | None]]:
    """Each (key, its payloads, the base keeper's doc_id or None) of part ``p``'s sorted groups, probed
    a batch at a time (:func:`runtime.against_base.with_base_values`); a group larger than a batch has
    the rest of its copies streamed after the probe."""
    decided = with_base_values(
        base, p, first_records(groups), key=itemgetter(0), size=lambda g: len(g[1]), decode=doc_ids
    )
    for (key, first, rest), keeper in decided:
        yield key, chain(first, rest), keeper


@dataclass(frozen=True)
class ExactVerdict:
    """What the groups step decided about one document, as its shard's decision table stores it: a
    copy of the keeper ``dup_of`` (a doc_id), or a keeper of ``copies`` copies (itself included) and of
    a held-out page's text or not (``holdout``). A document alone in its group gets none."""

    dup_of: str | None = None
    copies: int = 1
    holdout: bool = False

    def to_json(self) -> dict[str, Any]:
        if self.dup_of is not None:
            return {"dup_of": self.dup_of}
        return ({"copies": self.copies} if self.copies > 1 else {}) | (
            {"holdout": "exact"} if self.holdout else {}
        )

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ExactVerdict:
        return cls(d.get("dup_of"), d.get("copies", 1), d.get("holdout") == "exact")


@dataclass(frozen=True)
class GroupsFacts:
    """What a groups part reports, and the phase sums into the manifest: groups by their number of
    copies (``"1"`` .. ``"9"``, ``"10+"``), keepers of a held-out page's text, and with a probed base
    the index's facts."""

    groups_by_size: dict[str, int]
    holdout_exact: int
    index: IndexFacts | None = None

    def to_dict(self) -> dict[str, Any]:
        facts = {"groups_by_size": self.groups_by_size, "holdout_exact": self.holdout_exact}
        return facts | (self.index.to_dict() if self.index is not None else {})

    @classmethod
    def merged(cls, parts: list[dict[str, Any]]) -> GroupsFacts:
        """Every part's facts summed (sizes in the order 1, 2, .., 9, 10+)."""
        total: Counter = Counter()
        for f in parts:
            total.update(f["groups_by_size"])
        by_size = dict(sorted(total.items(), key=lambda kv: (len(kv[0]), kv[0])))
        index = IndexFacts.summed(parts) if parts and "index_records" in parts[0] else None
        return cls(by_size, sum(f.get("holdout_exact", 0) for f in parts), index)


@dataclass(frozen=True, kw_only=True)
class ExactDedupConfig:
    """Exact dedup's memory budget is the build's ``memory_budget_mb``."""

    #: documents a groups part is sized for: the parts are a function of the corpus's size, never of
    #: how many input shards it came in
    part_rows: int = PART_ROWS

    def __post_init__(self) -> None:
        if self.part_rows < 1:
            raise ValueError("part_rows must be at least 1")


class ExactDedupStage(Stage):
    name = "exact_dedup"
    # what each version changed: docs/dedup.md "Stage versions"
    version = "7"
    Config = ExactDedupConfig
    artifact_kinds = (COPIES, INDEX_RECORDS)
    side_outputs = (SideOutput(COPIES),)

    def __init__(self, config: ExactDedupConfig) -> None:
        super().__init__(config)
        self._held: list[HoldoutFile] = []
        self._index: AgainstBase | None = None

    def _key(self, inputs: list[InputShard]) -> dict[str, Any]:
        held = sorted([f.name, f.sha256] for f in self._held)
        index = self._index.phase_key()
        return global_phase_key(self, inputs, normalization=KEY_VERSION, holdout=held, **index)

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """Three steps: ``holdout_keys`` (each held-out page's key to the part that owns it),
        ``groups`` (each text key to the part that owns it; the part decides its groups' keepers, and
        whether a held-out page shares the key, and writes their verdicts) and ``decisions`` (each
        verdict to its shard's table)."""
        remove_stale_artifacts(ctx, inputs, COPIES, (SUFFIX, SUFFIX + ".json"))
        self._held = eval_holdout(ctx)
        against = self._index = AgainstBase.open(ctx, "exact", exact_key_params())
        groups = against.parts(part_count(sum(max(s.records, 0) for s in inputs), self.config.part_rows))
        against.remove_stale_records(ctx, groups)
        phase = self._phase = GlobalPhase(ctx, self._key(inputs))  # (a barrier: after the removal)
        if phase.complete:
            return phase.reused()
        probed = against.probed
        part_of = against.base.part_of if probed else (lambda key: stable_key_hash(key) % len(groups))

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
            own = against.records(writer)
            grouped = groupby(records, key=itemgetter(0))
            if probed:
                decided = with_base_keepers(against.base, g, grouped)
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
                            yield c.shard, str(c.ordinal), ExactVerdict(dup_of=base_keeper).to_json()
                        continue
                    keeper = next(copies)
                    if own is not None:
                        own.write(key + doc_id_bytes(keeper.doc_id))
                        index["index_records"] += 1
                    n = 1
                    for c in copies:
                        n += 1
                        yield c.shard, str(c.ordinal), ExactVerdict(dup_of=keeper.doc_id).to_json()
                    sizes[str(n) if n < 10 else "10+"] += 1
                    tagged += key in held
                    verdict = ExactVerdict(copies=n, holdout=key in held).to_json()
                    if verdict:
                        yield keeper.shard, str(keeper.ordinal), verdict

            write_verdicts(writer, verdicts())
            return GroupsFacts(dict(sizes), tagged, IndexFacts(**index) if probed else None).to_dict()

        phase.exchange(GROUPS, groups, inputs, send, reduce)
        shards = [s.name for s in inputs]
        route_verdicts(phase, DECISIONS, GROUPS, groups, shards)
        facts = None
        if ctx.rank == 0:
            facts = GroupsFacts.merged([p.facts for p in phase.parts(GROUPS, groups)]).to_dict()
        steps = {GROUPS: groups, DECISIONS: shards} | ({HOLDOUT_KEYS: groups} if self._held else {})
        return phase.finish(steps, sleeping_bcast(ctx.comm, facts))

    def _held_keys(self, phase: GlobalPhase, part: str) -> frozenset[bytes]:
        """The held-out pages' keys a part of ``groups`` owns (none without a holdout)."""
        if not self._held:
            return frozenset()
        data = phase.parts(HOLDOUT_KEYS, [part])[0].path(HELD_KEYS_FILE).read_bytes()
        return frozenset(data[i : i + 16] for i in range(0, len(data), 16))

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        copies = ctx.side(COPIES)
        for doc, nbytes, decided in decided_docs(self._phase.root, DECISIONS, shard):
            if decided is None:
                yield Kept(doc), nbytes
                continue
            verdict = ExactVerdict.from_json(decided)
            if verdict.dup_of is not None:
                dup = doc.annotate(EXACT_DUP_OF.note(verdict.dup_of, "fail"), dup_of=verdict.dup_of)
                copies.write_line(canonical_json(copy_record(doc, verdict.dup_of)))
                yield Filtered(dup, "exact_duplicate"), nbytes
            else:
                notes = []
                if verdict.copies > 1:
                    notes += [
                        EXACT_COPIES.note(verdict.copies, "pass"),
                        EXACT_KEEPER_ID.note(doc.doc_id),  # what copies/ points at
                    ]
                if verdict.holdout:
                    notes.append(HOLDOUT_EXACT.note(1.0, "fail"))
                    doc = doc.annotate(scores={**doc.scores, EXACT_SCORE: 1.0})
                yield Kept(doc.annotate(*notes)), nbytes

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        facts = self._phase.facts
        extra: dict[str, Any] = {
            "normalization_version": KEY_VERSION,
            "groups_by_size": facts["groups_by_size"],
            "holdout_docs": sum(f.records for f in self._held),
            "holdout_exact": facts["holdout_exact"],
        }
        return extra | self._index.manifest_index(IndexFacts.of(facts).to_dict())


def held_out_key(doc: Document, f: HoldoutFile) -> bytes:
    """The exact key extract stored with a held-out page (of the text before its PII scrub)."""
    note = HOLDOUT_EXACT_KEY.of(doc)
    version, _, key = str(note.value if note is not None else "").partition(":")
    if version != KEY_VERSION or len(key) != 32:
        raise StageError(
            f"held-out page {doc.doc_id} of {f.path} has no exact key of version {KEY_VERSION} "
            f"(found {note.value if note is not None else 'none'!r}): rerun the extract stage"
        )
    return bytes.fromhex(key)


STAGE = ExactDedupStage
