"""Exact dedup: documents whose normalized text is the same are one document; the earliest copy stays.

Global phase (all ranks): every document sends (key of its normalized text, keeper key) to the rank
owning that text key; the shuffle hands each group over sorted by keeper key, so the first is the
keeper: earliest crawl date, then most trusted source tier, then doc_id (``corpus.dedup.order``).
Per shard: the keeper is kept and annotated with how many copies it stood for; every other copy is
written to ``filtered/`` as ``exact_duplicate`` with ``dup_of`` = the keeper's doc_id. Nothing is deleted.

    python -m hpc_jobs.exact_dedup --in build/stages/policy --out build/stages/exact_dedup [--config FILE]
"""

from __future__ import annotations

import struct
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import Any

from corpus.dedup.decisions import (
    checkpointed_global_phase,
    decided_docs,
    global_facts,
    global_phase_key,
    progress,
    route_decisions,
)
from corpus.dedup.normalize import NORMALIZATION_VERSION, text_key
from corpus.dedup.order import encode_exact_keeper_key
from corpus.docshard import iter_docs
from corpus.model import Annotation, Filtered, Kept, Outcome
from hpc_jobs.runner import InputShard, Stage, StageContext, main
from mpi_kernels.shuffle import shuffle_by_key

_ORDINAL = struct.Struct(">I")
KEEPER_KEY_BYTES = 27  # see encode_exact_keeper_key


@dataclass(frozen=True)
class ExactDedupConfig:
    #: memory each rank may use for the shuffle before spilling sorted runs to work/spill
    memory_budget_mb: int = 256


class ExactDedupStage(Stage):
    name = "exact_dedup"
    version = "1"
    Config = ExactDedupConfig

    def _key(self, inputs: list[InputShard]) -> dict[str, Any]:
        return global_phase_key(self, inputs, normalization=NORMALIZATION_VERSION)

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        return checkpointed_global_phase(
            ctx, self._key(inputs), inputs, lambda mine: self._global(ctx, mine), _merge_facts
        )

    def _global(self, ctx: StageContext, mine: list[InputShard]) -> dict[str, Any]:
        budget = self.config.memory_budget_mb << 20

        def records():
            for shard in mine:
                for i, doc in enumerate(iter_docs(shard.path)):
                    # payload = keeper key, then where the copy lives: the first payload of a group wins
                    yield (
                        text_key(doc.text),
                        encode_exact_keeper_key(doc) + _ORDINAL.pack(i) + shard.name.encode(),
                    )

        groups: Counter = Counter()
        verdicts = []
        for _, group in groupby(
            shuffle_by_key(ctx.comm, records(), memory_budget_bytes=budget, spill_dir=ctx.work_dir / "spill"),
            key=itemgetter(0),
        ):
            copies = [p for _, p in group]
            groups[str(len(copies)) if len(copies) < 10 else "10+"] += 1
            if len(copies) == 1:
                continue
            keeper_id = copies[0][11:27].hex()
            for n, payload in enumerate(copies):
                (ordinal,) = _ORDINAL.unpack_from(payload, KEEPER_KEY_BYTES)
                shard = payload[KEEPER_KEY_BYTES + _ORDINAL.size :].decode()
                verdict = {"copies": len(copies)} if n == 0 else {"dup_of": keeper_id}
                verdicts.append((shard, str(ordinal), verdict))
        dups = sum(1 for v in verdicts if "dup_of" in v[2])
        progress(ctx, self.name, f"{sum(groups.values())} distinct texts here, {dups} duplicate copies")
        route_decisions(ctx.comm, verdicts, [s.name for s in mine], ctx.work_dir, budget)
        return {"groups_by_size": dict(groups)}

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        for doc, nbytes, verdict in decided_docs(ctx.work_dir, shard):
            if verdict is None:
                yield Kept(doc), nbytes
            elif "dup_of" in verdict:
                dup = doc.annotate(
                    Annotation(self.name, "dup_of", verdict["dup_of"], "fail"), dup_of=verdict["dup_of"]
                )
                yield Filtered(dup, "exact_duplicate"), nbytes
            else:
                yield Kept(doc.annotate(Annotation(self.name, "copies", verdict["copies"], "pass"))), nbytes

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        facts = global_facts(ctx, self._key(inputs))
        return {"normalization_version": NORMALIZATION_VERSION, "groups_by_size": facts["groups_by_size"]}


def _merge_facts(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    total: Counter = Counter()
    for f in per_rank:
        total.update(f["groups_by_size"])
    return {"groups_by_size": dict(sorted(total.items(), key=lambda kv: (len(kv[0]), kv[0])))}


STAGE = ExactDedupStage

if __name__ == "__main__":
    sys.exit(main(STAGE))
