"""Exact dedup: documents whose normalized text is the same are one document; the earliest copy stays.

Global phase (all ranks): every document sends (key of its normalized text, keeper key) to the rank
owning that text key; the shuffle hands each group over sorted by keeper key, so the first is the
keeper: most trusted source tier, then earliest crawl date, then doc_id (``corpus.dedup.order``).

It runs right after extraction, before the classifiers: every exact copy it removes is one document
annotate (the most expensive stage per byte) does not score; docs/versions.md has the arithmetic.
Per shard: the keeper is kept and annotated with how many copies it stood for; every other copy is
written to ``filtered/`` as ``exact_duplicate`` with ``dup_of`` = the keeper's doc_id, and its
provenance (url, host, source, tier, date, licence: ``corpus.provenance``) to ``copies/NAME.jsonl.zst``,
which the candidates keep: a version that excludes the keeper's host, source, date or licence keeps the
stored text when another copy passes. Nothing is deleted.

The eval holdout: the held-out pages' keys (the ``exact_key`` extract stored with each page of its
``holdout/``, the key of its text before the PII scrub) go to the same parts as the candidates' keys,
in a step of their own (``holdout_keys``). A group whose key is a held-out page's has its keeper tagged
``scores["holdout_exact"] = 1.0`` (annotation ``holdout_exact``): a copy of a held-out page at
another URL, which the default selection excludes (``corpus.policy``). Held-out pages are never
candidates and never keepers.

    python -m hpc_jobs.exact_dedup --in build/stages/extract --out build/stages/exact_dedup [--config FILE]
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import Any

from corpus.dedup.exact_copy import ExactCopy
from corpus.dedup.normalize import KEY_VERSION, text_key
from corpus.digest import canonical_json
from corpus.docshard import SUFFIX, ShardWriter, iter_docs
from corpus.ingest.holdout import EXACT_KEY, EXACT_SCORE, HOLDOUT_STAGE, HoldoutFile, holdout_files
from corpus.model import Annotation, Document, Filtered, Kept, Outcome
from corpus.provenance import copy_record
from mpi_kernels.shuffle import stable_key_hash
from runtime.global_phase import (
    GlobalPhase,
    PartWriter,
    decided_docs,
    global_phase_key,
    route_verdicts,
    write_verdicts,
)
from runtime.runner import InputShard, Stage, StageContext, StageError, main, remove_stale_artifacts

HOLDOUT_KEYS = "holdout_keys"
HELD_KEYS_FILE = ".keys"
GROUPS = "groups"
DECISIONS = "decisions"
#: the per-shard provenance of the copies the stage did not store (corpus.provenance)
COPIES = "copies"


@dataclass(frozen=True)
class ExactDedupConfig:
    """Exact dedup has no settings of its own (its memory budget is the build's ``memory_budget_mb``)."""


class ExactDedupStage(Stage):
    name = "exact_dedup"
    # 2: the global phase checkpointed in parts (runtime.global_phase)
    # 3: the keeper is the most trusted tier first, then the earliest date (was date first)
    # 4: every dropped copy's provenance in copies/
    # 5: the key keeps punctuation, operators and digits (corpus.dedup.normalize.KEY_VERSION 2)
    # 6: copies of held-out pages tagged (holdout_exact)
    version = "6"
    Config = ExactDedupConfig
    artifact_kinds = (COPIES,)

    def __init__(self, config: ExactDedupConfig) -> None:
        super().__init__(config)
        self._copies: dict[str, ShardWriter] = {}
        self._held: list[HoldoutFile] = []

    def _key(self, inputs: list[InputShard]) -> dict[str, Any]:
        held = sorted([f.name, f.sha256] for f in self._held)
        return global_phase_key(self, inputs, normalization=KEY_VERSION, holdout=held)

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """Three steps: ``holdout_keys`` (each held-out page's key to the part that owns it),
        ``groups`` (each text key to the part that owns it; the part decides its groups' keepers, and
        whether a held-out page shares the key, and writes their verdicts) and ``decisions`` (each
        verdict to its shard's table)."""
        remove_stale_artifacts(ctx, inputs, COPIES, (SUFFIX, SUFFIX + ".json"))
        self._held = holdout_files(ctx.in_paths[0])
        phase = self._phase = GlobalPhase(ctx, self._key(inputs))
        if phase.complete:
            return phase.reused()
        groups = [f"g{i:05d}" for i in range(len(inputs))]  # one part per input shard: fixed by the data

        def send_held(f: HoldoutFile) -> Iterator[tuple[int, bytes, bytes]]:
            for doc in iter_docs(f.path):
                key = held_out_key(doc, f)
                yield stable_key_hash(key) % len(groups), key, b""

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
                yield stable_key_hash(key) % len(groups), key, ExactCopy.of(doc, i, shard.name).encode()

        def reduce(g: int, records: Iterator[tuple[bytes, bytes]], writer: PartWriter) -> dict[str, Any]:
            sizes: Counter = Counter()
            held = self._held_keys(phase, groups[g])
            tagged = 0

            def verdicts() -> Iterator[tuple[str, str, dict[str, Any]]]:
                nonlocal tagged
                for key, group in groupby(records, key=itemgetter(0)):
                    # streamed: a text with millions of copies costs one record of memory, not a list
                    copies = (ExactCopy.decode(p) for _, p in group)
                    keeper = next(copies)
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
            return {"groups_by_size": dict(sizes), "holdout_exact": tagged}

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
        return {
            "normalization_version": KEY_VERSION,
            "groups_by_size": facts["groups_by_size"],
            "holdout_docs": sum(f.records for f in self._held),
            "holdout_exact": facts["holdout_exact"],
        }


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


def _merge_facts(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    total: Counter = Counter()
    for f in per_rank:
        total.update(f["groups_by_size"])
    return {
        "groups_by_size": dict(sorted(total.items(), key=lambda kv: (len(kv[0]), kv[0]))),
        "holdout_exact": sum(f.get("holdout_exact", 0) for f in per_rank),
    }


STAGE = ExactDedupStage

if __name__ == "__main__":
    sys.exit(main(STAGE))
