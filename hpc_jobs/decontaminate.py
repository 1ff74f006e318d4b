"""decontaminate: flag documents that contain eval-set items; keep the corpus's 13-grams for later checks.

Every rank builds the eval index from the registry (cheap next to the corpus; the registry digest is
the prepare digest, so a changed eval set redoes every shard). A flagged document stays a candidate,
annotated with each benchmark it matched (its longest run and the item), and is also written to
``flagged/NAME.jsonl.zst`` for the contamination report; excluding it is a version's decision (the
default version does, ``include_contaminated = false``). Per output shard, the unique 13-gram hashes of
its documents (every candidate: a later check asks what the stored corpus holds) are written to
``ngrams/NAME.npy``, through a :class:`GramSpool` that holds an eighth of the memory budget and spills
sorted runs to ``work/grams-spill/`` beyond it (a shard's 13-grams grow with its size, not with the
corpus, but a shard of 10,000 documents holds ~3 M of them).

The retained corpus index is built in :meth:`Decontaminate.conclude`, a global phase with one exchange
step (``grams``): every rank sends each hash of its shards' arrays to the part of its hash prefix
(``2**prefix_bits`` parts of about ``index_part_grams`` hashes, a number fixed by the data), and the
part's owner writes the sorted unique hashes as it receives them (:class:`SortedUniqueWriter`; the
shuffle spills beyond the memory budget, so no rank holds more than its budget and one batch). Each
part is checkpointed as it completes; the parts are linked into ``ngram_index/`` and listed, with the
digests computed while writing, in the manifest (``extra["ngram_index"]``); the snapshot links them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corpus.decont.corpus_index import (
    GRAM_RECORD,
    GramSpool,
    SortedUniqueWriter,
    doc_grams,
    load_index,
    npy_length,
    part_of_hashes,
    prefix_bits,
)
from corpus.decont.matcher import EvalIndex
from corpus.decont.ngrams import SCHEME
from corpus.decont.registry import EvalRegistry, RegistryError, registry_digest
from corpus.decont.report import FLAGGED, ITEM_PREFIX, RUN_PREFIX
from corpus.digest import json_digest
from corpus.docshard import SUFFIX, ShardWriter, iter_docs
from corpus.layout import NGRAM_INDEX_DIR, NGRAM_INDEX_SUFFIX, NGRAMS, link_file
from corpus.model import Annotation, Kept, Outcome
from corpus.stage_facts import DecontaminationFacts, FileRef, PartitionedIndex
from corpus.tokenizer import resolve_asset
from runtime.global_phase import GlobalPhase, PartWriter, global_phase_key
from runtime.runner import InputShard, Stage, StageContext, StageError, main, remove_stale_artifacts

GRAMS = "grams"
#: under the stage's work directory: the runs a shard's 13-grams spill to past the spool's memory
GRAMS_SPILL_DIR = "grams-spill"
#: a 13-gram on its way to the part of its prefix (the exchange's fixed-width row)
_GRAM_ROW = np.dtype([("part", "<u4"), ("gram", "<u8")])
_SEND_BATCH = 1 << 16


@dataclass(frozen=True)
class DecontaminateConfig:
    eval_dir: str = "assets/evals"  # relative paths resolve against the repository
    min_run: int = 10  # consecutive matching 13-grams that make a document contaminated
    min_item_words: int = 8  # eval items shorter than this are too generic to check
    #: about how many distinct 13-grams one part of the retained index holds (8 bytes each); the number
    #: of parts follows from the data and this, never from the rank count
    index_part_grams: int = 1 << 22
    #: computed, not set: the registry's content digest is part of the config (and its hash), so an
    #: eval file changed in place re-runs the stage like any other config change
    eval_registry_hash: str = field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "eval_registry_hash", registry_digest(resolve_asset(self.eval_dir)))


class Decontaminate(Stage):
    name = "decontaminate"
    version = "4"  # 4: flagged documents stay candidates (annotated, copied to flagged/ for the report)
    Config = DecontaminateConfig
    artifact_kinds = (NGRAMS, FLAGGED)

    def __init__(self, config: DecontaminateConfig) -> None:
        super().__init__(config)
        self.index: EvalIndex | None = None
        self._grams: dict[str, GramSpool] = {}
        self._flagged: dict[str, ShardWriter] = {}
        self._phase: GlobalPhase | None = None
        if config.index_part_grams < 1:
            raise StageError(
                f"[decontaminate] index_part_grams must be positive, got {config.index_part_grams}"
            )

    def _load(self) -> EvalIndex:
        if self.index is None:
            try:
                registry = EvalRegistry.load(resolve_asset(self.config.eval_dir))
                if registry.digest != self.config.eval_registry_hash:
                    raise RegistryError(
                        f"eval registry {self.config.eval_dir} changed while the stage started"
                    )
                self.index = EvalIndex(registry, self.config.min_run, self.config.min_item_words)
            except (RegistryError, ValueError) as e:
                raise StageError(str(e)) from e
        return self.index

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        index = self._load()
        remove_stale_artifacts(ctx, inputs, NGRAMS, (".npy",))
        remove_stale_artifacts(ctx, inputs, FLAGGED, (SUFFIX, SUFFIX + ".json"))
        return json_digest({"eval_registry": index.registry.digest, "scheme": SCHEME})

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        index = self._load()
        grams = self._grams[shard.name] = GramSpool(
            ctx.work_dir / GRAMS_SPILL_DIR / shard.name, ctx.memory_budget_bytes // 8
        )
        flagged = self._flagged[shard.name] = ShardWriter(
            ctx.artifact_path(FLAGGED, f"{shard.name}{SUFFIX}")
        )
        for doc in iter_docs(shard.path):
            nbytes = len(doc.text.encode("utf-8"))
            grams.add(doc_grams(doc.text))
            matches = index.scan(doc.text)
            if matches:
                notes = []
                for m in matches:
                    notes.append(Annotation(self.name, RUN_PREFIX + m.benchmark, m.run, "fail"))
                    notes.append(Annotation(self.name, ITEM_PREFIX + m.benchmark, m.item_id, "info"))
                doc = doc.annotate(*notes)
                flagged.write_doc(doc)
            yield Kept(doc), nbytes

    def finish_shard(self, shard: InputShard, ctx: StageContext) -> None:
        self._grams.pop(shard.name).save(ctx.artifact_path(NGRAMS, f"{shard.name}.npy"))
        self._flagged.pop(shard.name).close()

    # -- the retained index: a global phase over the shards' arrays ---------------------------------
    def conclude(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """One exchange step: each hash to the part of its prefix; each part written sorted and unique."""
        phase = self._phase = GlobalPhase(ctx, global_phase_key(self, inputs, scheme=SCHEME))
        bits, names = self._parts(ctx, inputs)
        if phase.complete:
            digest = phase.reused()
        else:

            def send(shard: InputShard) -> Iterator[np.ndarray]:
                hashes = load_index(ctx.artifact_path(NGRAMS, f"{shard.name}.npy"))
                for start in range(0, hashes.shape[0], _SEND_BATCH):
                    batch = np.asarray(hashes[start : start + _SEND_BATCH])
                    rows = np.empty(batch.shape[0], dtype=_GRAM_ROW)
                    rows["part"], rows["gram"] = part_of_hashes(batch, bits), batch
                    yield rows

            def reduce(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
                out = SortedUniqueWriter(writer.open(NGRAM_INDEX_SUFFIX))
                for rows in batches:  # sorted by gram within the part, repeats adjacent
                    out.add_sorted(rows["gram"])
                return {"grams": out.count}

            phase.exchange_rows(GRAMS, names, inputs, send, reduce, dtype=_GRAM_ROW, order_fields=("gram",))
            total = None
            if ctx.rank == 0:
                total = sum(p.facts["grams"] for p in phase.parts(GRAMS, names))
            total = ctx.comm.bcast(total, root=0)
            digest = phase.finish({GRAMS: names}, {"grams": total, "prefix_bits": bits})
        self._publish(ctx, names)
        return digest

    def _parts(self, ctx: StageContext, inputs: list[InputShard]) -> tuple[int, list[str]]:
        """The index's prefix bits and part names, from the number of hashes the shards hold (headers)."""
        bits = None
        if ctx.rank == 0:
            total = sum(npy_length(ctx.artifact_path(NGRAMS, f"{s.name}.npy")) for s in inputs)
            bits = prefix_bits(total, self.config.index_part_grams)
        bits = ctx.comm.bcast(bits, root=0)
        return bits, [f"g{p:05d}" for p in range(1 << bits)]

    def _publish(self, ctx: StageContext, names: list[str]) -> None:
        """Each rank links the parts it owns into ``ngram_index/`` (the checkpointed files themselves)."""
        assert self._phase is not None
        d = ctx.out_dir / NGRAM_INDEX_DIR
        d.mkdir(parents=True, exist_ok=True)
        for n in names[ctx.rank :: ctx.size]:
            link_file(
                self._phase.step_dir(GRAMS) / f"{n}{NGRAM_INDEX_SUFFIX}", d / f"{n}{NGRAM_INDEX_SUFFIX}"
            )
        ctx.comm.Barrier()
        if ctx.rank == 0:  # parts of an earlier, larger index would be listed by nobody: drop them
            keep = {f"{n}{NGRAM_INDEX_SUFFIX}" for n in names}
            for p in sorted(d.iterdir()):
                if p.name not in keep:
                    p.unlink()

    def index_listing(self) -> PartitionedIndex:
        """The retained index as the manifest lists it: parts with the digests computed while writing."""
        assert self._phase is not None
        facts = self._phase.facts
        names = [f"g{p:05d}" for p in range(1 << facts["prefix_bits"])]
        parts = []
        for part in self._phase.parts(GRAMS, names):
            file = f"{part.name}{NGRAM_INDEX_SUFFIX}"
            ref = FileRef(f"{NGRAM_INDEX_DIR}/{file}", part.files[file].removeprefix("sha256:"))
            parts.append((ref, part.facts["grams"]))
        return PartitionedIndex(
            "grams", facts["prefix_bits"], facts["grams"], tuple(parts), SCHEME, str(GRAM_RECORD)
        )

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        index = self._load()
        described = index.registry.describe()
        for name, n in index.unchecked.items():
            described[name]["unchecked_items"] = n
        return DecontaminationFacts(
            index.registry.digest, described, index.describe() | {"scheme": SCHEME}, self.index_listing()
        ).to_extra()


STAGE = Decontaminate

if __name__ == "__main__":
    sys.exit(main(STAGE))
