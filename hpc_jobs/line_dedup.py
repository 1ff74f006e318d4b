"""Line-level dedup: a line found in more than N documents is boilerplate and is removed from all of them.

Global phase (all ranks): each rank counts, for the documents of its shards, in how many documents each
normalized line occurs (a line counts once per document; blank lines never count); the counts are
shuffled to the owner of the line's key and summed, and the keys seen in more than
``max_docs_per_line`` documents are gathered into ``work/frequent_lines.bin`` (sorted 8-byte keys).
Per shard: those lines are removed; a document that lost lines gets new text (``Document.with_text``, so
a new doc_id with ``derived_from`` the old one) and the annotations ``lines_removed`` and
``bytes_removed``; a document left with nothing but whitespace is filtered as ``all_lines_frequent``.

    python -m hpc_jobs.line_dedup --in build/stages/exact_dedup --out build/stages/line_dedup
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

from corpus.dedup.normalize import NORMALIZATION_VERSION, line_key
from corpus.docshard import atomic_write_bytes, iter_docs
from corpus.model import Annotation, Document, Filtered, Kept, Outcome
from mpi_kernels.shuffle import shuffle_by_key
from runtime.phases import checkpointed_global_phase, global_facts, global_phase_key, progress
from runtime.runner import InputShard, Stage, StageContext, main

FREQUENT = "frequent_lines.bin"
KEY_BYTES = 8


@dataclass(frozen=True)
class LineDedupConfig:
    #: a line in more documents than this is removed from every document
    max_docs_per_line: int = 10

    def __post_init__(self) -> None:
        if self.max_docs_per_line < 1:
            raise ValueError("max_docs_per_line must be at least 1")


def doc_line_keys(text: str) -> set[bytes]:
    return {k for line in text.splitlines() if (k := line_key(line)) is not None}


def remove_lines(text: str, frequent: frozenset[bytes]) -> tuple[str, int]:
    """The text without its frequent lines (line ends kept as they were), and how many were removed."""
    kept, removed = [], 0
    for line in text.splitlines(keepends=True):
        if line_key(line) in frequent:
            removed += 1
        else:
            kept.append(line)
    return "".join(kept), removed


class LineDedupStage(Stage):
    name = "line_dedup"
    version = "1"
    Config = LineDedupConfig

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self._frequent: frozenset[bytes] | None = None

    def _key(self, inputs: list[InputShard]) -> dict[str, Any]:
        return global_phase_key(self, inputs, normalization=NORMALIZATION_VERSION)

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        return checkpointed_global_phase(
            ctx,
            self._key(inputs),
            inputs,
            lambda mine: self._global(ctx, mine),
            _merge_facts,
            decisions=False,
            artifacts=[ctx.work_dir / FREQUENT],
        )

    def _global(self, ctx: StageContext, mine: list[InputShard]) -> dict[str, Any]:
        counts: Counter = Counter()
        docs = 0
        for shard in mine:
            for doc in iter_docs(shard.path):
                counts.update(doc_line_keys(doc.text))
                docs += 1
        records = ((k, n.to_bytes(8, "big")) for k, n in sorted(counts.items()))
        del counts
        received = shuffle_by_key(
            ctx.comm,
            records,
            memory_budget_bytes=ctx.memory_budget_bytes,
            spill_dir=ctx.work_dir / "spill",
        )
        frequent, distinct = [], 0
        for key, group in groupby(received, key=itemgetter(0)):
            distinct += 1
            if sum(int.from_bytes(n, "big") for _, n in group) > self.config.max_docs_per_line:
                frequent.append(key)
        progress(
            ctx,
            self.name,
            f"{distinct} distinct lines here, {len(frequent)} in more than "
            f"{self.config.max_docs_per_line} documents",
        )
        everyone = ctx.comm.gather(frequent, root=0)
        if ctx.rank == 0:
            keys = sorted(k for part in everyone for k in part)
            atomic_write_bytes(ctx.work_dir / FREQUENT, b"".join(keys))
        return {"docs": docs, "distinct_lines": distinct, "frequent_lines": len(frequent)}

    def frequent(self, ctx: StageContext) -> frozenset[bytes]:
        if self._frequent is None:
            data = Path(ctx.work_dir / FREQUENT).read_bytes()
            self._frequent = frozenset(data[i : i + KEY_BYTES] for i in range(0, len(data), KEY_BYTES))
        return self._frequent

    def process_doc(self, doc: Document, ctx: StageContext) -> Outcome:
        text, removed = remove_lines(doc.text, self.frequent(ctx))
        if not removed:
            return Kept(doc)
        lost = len(doc.text.encode("utf-8")) - len(text.encode("utf-8"))
        notes = (
            Annotation(self.name, "lines_removed", removed),
            Annotation(self.name, "bytes_removed", lost),
        )
        if not text.strip():
            return Filtered(doc.annotate(*notes), "all_lines_frequent")
        return Kept(doc.with_text(text, annotations=doc.annotations + notes))

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        return {"normalization_version": NORMALIZATION_VERSION, **global_facts(ctx, self._key(inputs))}


def _merge_facts(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    total: Counter = Counter()
    for f in per_rank:
        total.update(f)
    return dict(sorted(total.items()))


STAGE = LineDedupStage

if __name__ == "__main__":
    sys.exit(main(STAGE))
