"""decontaminate: flag documents that contain eval-set items; keep what a later check needs of the corpus.

Every rank builds the eval index from the registry (cheap next to the corpus; the registry digest is
the prepare digest, so a changed eval set redoes every shard). The rule (:mod:`corpus.decont.rule`) is
applied per document: an item is contaminated in a document when one of its passages (its content,
templates stripped, or its verbatim text) has a run of ``min(min_run, m)`` consecutive 8-grams the
document holds. A flagged document stays a candidate, annotated per benchmark with its longest run,
the item of that run and every contaminated item, and is also written to ``flagged/NAME.jsonl.zst`` for
the contamination report; excluding it is a version's decision (the default version does,
``include_contaminated = false``).

Two indexes of the corpus are kept, over every candidate (a later check asks what the stored corpus
holds), each built in :meth:`Decontaminate.conclude`, one global phase with one exchange step each:

* ``doc_gram_index/`` (step ``doc_grams``): what the rule reads of each document, its distinct 8-gram
  hashes, as (8-gram, document key) records (:mod:`corpus.decont.doc_grams`). Per shard the stage writes
  them as it scans (``doc_grams/NAME.rows``, document order, one document in memory); the exchange
  sends each record to the part of its hash prefix, whose owner writes it sorted by (8-gram, document),
  once. ``corpus contamination --benchmark`` applies the build's rule to it, document by document.
* ``ngram_index/`` (step ``grams``): the corpus-wide set of distinct 13-gram hashes. Per output shard
  the unique hashes go to ``ngrams/NAME.npy`` through a :class:`GramSpool` (an eighth of the memory
  budget, sorted runs spilled to ``work/grams-spill/`` beyond it); the part owners write them sorted
  and unique (:class:`SortedUniqueWriter`). The snapshot links it (``decont/13grams``).

Both are range-partitioned by hash prefix (``2**prefix_bits`` parts of about ``index_part_grams``
hashes / ``doc_gram_part_rows`` records, fixed by the data, never by the rank count); each part is
checkpointed as it completes; the parts are linked into the stage directory and listed, with the
digests computed while writing, in the manifest (``extra["ngram_index"]``, ``extra["doc_gram_index"]``).
The shuffle spills beyond the memory budget, so no rank holds more than its budget and one batch.
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
    load_index,
    npy_length,
    part_of_hashes,
    prefix_bits,
)
from corpus.decont.doc_grams import (
    DOC_GRAM_INDEX,
    DOC_GRAM_INDEX_DIR,
    DOC_GRAM_INDEX_SUFFIX,
    DOC_GRAM_RECORD,
    DOC_GRAMS,
    DOC_GRAMS_SUFFIX,
    RowsFile,
    SortedRowWriter,
    doc_key,
    doc_rows,
    read_rows,
)
from corpus.decont.matcher import EvalIndex, best_per_benchmark
from corpus.decont.ngrams import NGRAM, SCHEME, Grams, normalize_words, word_hashes
from corpus.decont.registry import EvalRegistry, RegistryError, registry_digest
from corpus.decont.report import FLAGGED, ITEM_PREFIX, ITEMS_PREFIX, RUN_PREFIX, encode_items
from corpus.decont.rule import DEFAULT_MIN_ITEM_WORDS, DEFAULT_MIN_RUN, RULE, RULE_N, doc_gram_set
from corpus.digest import json_digest
from corpus.docshard import SUFFIX, ShardWriter, iter_docs, read_sidecar
from corpus.layout import NGRAM_INDEX_DIR, NGRAM_INDEX_SUFFIX, NGRAMS, link_file
from corpus.model import Annotation, Kept, Outcome
from corpus.stage_facts import DecontaminationFacts, FileRef, PartitionedIndex
from corpus.tokenizer import resolve_asset
from runtime.global_phase import GlobalPhase, PartWriter, global_phase_key
from runtime.runner import InputShard, Stage, StageContext, StageError, main, remove_stale_artifacts

GRAMS = "grams"
DOC_GRAMS_STEP = "doc_grams"
#: under the stage's work directory: the runs a shard's 13-grams spill to past the spool's memory
GRAMS_SPILL_DIR = "grams-spill"
#: a 13-gram on its way to the part of its prefix (the exchange's fixed-width row)
_GRAM_ROW = np.dtype([("part", "<u4"), ("gram", "<u8")])
#: an (8-gram, document) record on its way to the part of its prefix
_DOC_GRAM_ROW = np.dtype([("part", "<u4"), ("gram", "<u8"), ("doc", "<u8")])
_SEND_BATCH = 1 << 16


@dataclass(frozen=True)
class DecontaminateConfig:
    eval_dir: str = "assets/evals"  # relative paths resolve against the repository
    #: consecutive 8-grams of a passage that make a document contaminated (all of them when it has fewer)
    min_run: int = DEFAULT_MIN_RUN
    min_item_words: int = DEFAULT_MIN_ITEM_WORDS  # passages shorter than this are too generic to check
    #: about how many distinct 13-grams one part of the retained index holds (8 bytes each); the number
    #: of parts follows from the data and this, never from the rank count
    index_part_grams: int = 1 << 22
    #: about how many (8-gram, document) records one part of the per-document index holds (16 bytes each)
    doc_gram_part_rows: int = 1 << 22
    #: computed, not set: the registry's content digest is part of the config (and its hash), so an
    #: eval file changed in place re-runs the stage like any other config change
    eval_registry_hash: str = field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "eval_registry_hash", registry_digest(resolve_asset(self.eval_dir)))


class Decontaminate(Stage):
    name = "decontaminate"
    # 4: flagged documents stay candidates (annotated, copied to flagged/ for the report)
    # 5: one rule in the build and after it (8-gram runs per passage, content without templates, every
    #    contaminated item annotated); the per-document 8-gram index (doc_grams/, doc_gram_index/)
    version = "5"
    Config = DecontaminateConfig
    artifact_kinds = (NGRAMS, FLAGGED, DOC_GRAMS)

    def __init__(self, config: DecontaminateConfig) -> None:
        super().__init__(config)
        self.index: EvalIndex | None = None
        self._grams: dict[str, GramSpool] = {}
        self._doc_grams: dict[str, RowsFile] = {}
        self._flagged: dict[str, ShardWriter] = {}
        self._phase: GlobalPhase | None = None
        for knob in ("index_part_grams", "doc_gram_part_rows"):
            if getattr(config, knob) < 1:
                raise StageError(f"[decontaminate] {knob} must be positive, got {getattr(config, knob)}")

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
        remove_stale_artifacts(ctx, inputs, DOC_GRAMS, (DOC_GRAMS_SUFFIX, DOC_GRAMS_SUFFIX + ".json"))
        return json_digest({"eval_registry": index.registry.digest, "scheme": SCHEME, "rule": RULE})

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        index = self._load()
        grams = self._grams[shard.name] = GramSpool(
            ctx.work_dir / GRAMS_SPILL_DIR / shard.name, ctx.memory_budget_bytes // 8
        )
        flagged = self._flagged[shard.name] = ShardWriter(ctx.artifact_path(FLAGGED, f"{shard.name}{SUFFIX}"))
        rows = self._doc_grams[shard.name] = RowsFile(
            ctx.artifact_path(DOC_GRAMS, f"{shard.name}{DOC_GRAMS_SUFFIX}")
        )
        for doc in iter_docs(shard.path):
            nbytes = len(doc.text.encode("utf-8"))
            g = Grams(word_hashes(normalize_words(doc.text)))
            grams.add(np.unique(g.of(NGRAM)))
            doc_set = doc_gram_set(g)  # what the rule reads of the document, and all the index keeps
            rows.write(doc_rows(doc_set, doc_key(doc.doc_id)))
            matches = index.match_set(doc_set)
            if matches:
                notes = []
                for best in best_per_benchmark(matches):
                    items = [m.item_id for m in matches if m.benchmark == best.benchmark]
                    notes.append(Annotation(self.name, RUN_PREFIX + best.benchmark, best.run, "fail"))
                    notes.append(Annotation(self.name, ITEM_PREFIX + best.benchmark, best.item_id, "info"))
                    notes.append(
                        Annotation(self.name, ITEMS_PREFIX + best.benchmark, encode_items(items), "info")
                    )
                doc = doc.annotate(*notes)
                flagged.write_doc(doc)
            yield Kept(doc), nbytes

    def finish_shard(self, shard: InputShard, ctx: StageContext) -> None:
        self._grams.pop(shard.name).save(ctx.artifact_path(NGRAMS, f"{shard.name}.npy"))
        self._doc_grams.pop(shard.name).close()
        self._flagged.pop(shard.name).close()

    # -- the retained indexes: a global phase over the shards' artifacts -----------------------------
    def conclude(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """Two exchange steps: each record to the part of its prefix; each part written sorted, unique."""
        phase = self._phase = GlobalPhase(ctx, global_phase_key(self, inputs, scheme=SCHEME, rule=RULE))
        bits, names = self._parts(ctx, inputs)
        dg_bits, dg_names = self._doc_gram_parts(ctx, inputs)
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

            def send_doc_grams(shard: InputShard) -> Iterator[np.ndarray]:
                path = ctx.artifact_path(DOC_GRAMS, f"{shard.name}{DOC_GRAMS_SUFFIX}")
                for batch in read_rows(path, _SEND_BATCH):
                    rows = np.empty(batch.shape[0], dtype=_DOC_GRAM_ROW)
                    rows["part"] = part_of_hashes(batch["gram"], dg_bits)
                    rows["gram"], rows["doc"] = batch["gram"], batch["doc"]
                    yield rows

            def reduce_doc_grams(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
                out = SortedRowWriter(writer.open(DOC_GRAM_INDEX_SUFFIX))
                for rows in batches:  # sorted by (gram, doc) within the part
                    out.add_sorted(rows["gram"], rows["doc"])
                return {"rows": out.count}

            phase.exchange_rows(GRAMS, names, inputs, send, reduce, dtype=_GRAM_ROW, order_fields=("gram",))
            phase.exchange_rows(
                DOC_GRAMS_STEP,
                dg_names,
                inputs,
                send_doc_grams,
                reduce_doc_grams,
                dtype=_DOC_GRAM_ROW,
                order_fields=("gram", "doc"),
            )
            totals = None
            if ctx.rank == 0:
                totals = (
                    sum(p.facts["grams"] for p in phase.parts(GRAMS, names)),
                    sum(p.facts["rows"] for p in phase.parts(DOC_GRAMS_STEP, dg_names)),
                )
            grams_total, rows_total = ctx.comm.bcast(totals, root=0)
            digest = phase.finish(
                {GRAMS: names, DOC_GRAMS_STEP: dg_names},
                {
                    "grams": grams_total,
                    "prefix_bits": bits,
                    "doc_gram_rows": rows_total,
                    "doc_gram_prefix_bits": dg_bits,
                },
            )
        self._publish(ctx, GRAMS, names, NGRAM_INDEX_DIR, NGRAM_INDEX_SUFFIX)
        self._publish(ctx, DOC_GRAMS_STEP, dg_names, DOC_GRAM_INDEX_DIR, DOC_GRAM_INDEX_SUFFIX)
        return digest

    def _parts(self, ctx: StageContext, inputs: list[InputShard]) -> tuple[int, list[str]]:
        """The 13-gram index's prefix bits and part names, from the number of hashes the shards hold
        (headers)."""
        bits = None
        if ctx.rank == 0:
            total = sum(npy_length(ctx.artifact_path(NGRAMS, f"{s.name}.npy")) for s in inputs)
            bits = prefix_bits(total, self.config.index_part_grams)
        bits = ctx.comm.bcast(bits, root=0)
        return bits, [f"g{p:05d}" for p in range(1 << bits)]

    def _doc_gram_parts(self, ctx: StageContext, inputs: list[InputShard]) -> tuple[int, list[str]]:
        """The per-document index's prefix bits and part names, from the shards' record counts (sidecars)."""
        bits = None
        if ctx.rank == 0:
            total = 0
            for s in inputs:
                sidecar = read_sidecar(ctx.artifact_path(DOC_GRAMS, f"{s.name}{DOC_GRAMS_SUFFIX}"))
                if sidecar is None:
                    raise StageError(f"[decontaminate] {DOC_GRAMS}/{s.name}{DOC_GRAMS_SUFFIX} is missing")
                total += int(sidecar["records"])
            bits = prefix_bits(total, self.config.doc_gram_part_rows)
        bits = ctx.comm.bcast(bits, root=0)
        return bits, [f"g{p:05d}" for p in range(1 << bits)]

    def _publish(self, ctx: StageContext, step: str, names: list[str], directory: str, suffix: str) -> None:
        """Each rank links the parts it owns into ``directory`` (the checkpointed files themselves)."""
        assert self._phase is not None
        d = ctx.out_dir / directory
        d.mkdir(parents=True, exist_ok=True)
        for n in names[ctx.rank :: ctx.size]:
            link_file(self._phase.step_dir(step) / f"{n}{suffix}", d / f"{n}{suffix}")
        ctx.comm.Barrier()
        if ctx.rank == 0:  # parts of an earlier, larger index would be listed by nobody: drop them
            keep = {f"{n}{suffix}" for n in names}
            for p in sorted(d.iterdir()):
                if p.name not in keep:
                    p.unlink()

    def index_listing(self) -> PartitionedIndex:
        """The retained 13-gram index as the manifest lists it: parts with the digests computed while writing."""
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

    def doc_gram_listing(self) -> dict[str, Any]:
        """The per-document index as the manifest lists it (``PartitionedIndex`` of ``rows``), with the
        rule's settings a check after the build must apply."""
        assert self._phase is not None
        facts = self._phase.facts
        names = [f"g{p:05d}" for p in range(1 << facts["doc_gram_prefix_bits"])]
        parts = []
        for part in self._phase.parts(DOC_GRAMS_STEP, names):
            file = f"{part.name}{DOC_GRAM_INDEX_SUFFIX}"
            ref = FileRef(f"{DOC_GRAM_INDEX_DIR}/{file}", part.files[file].removeprefix("sha256:"))
            parts.append((ref, part.facts["rows"]))
        record = ", ".join(f"{n} {DOC_GRAM_RECORD.fields[n][0].str}" for n in DOC_GRAM_RECORD.names)
        listing = PartitionedIndex(
            "rows", facts["doc_gram_prefix_bits"], facts["doc_gram_rows"], tuple(parts), SCHEME, record
        ).to_dict()
        return listing | {
            "rule": RULE,
            "n": RULE_N,
            "min_run": self.config.min_run,
            "min_item_words": self.config.min_item_words,
            "doc": "the first 64 bits of the doc_id",
        }

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        index = self._load()
        described = index.registry.describe()
        for name, n in index.unchecked.items():
            described[name]["unchecked_items"] = n
        extra = DecontaminationFacts(
            index.registry.digest, described, index.describe() | {"scheme": SCHEME}, self.index_listing()
        ).to_extra()
        return extra | {DOC_GRAM_INDEX: self.doc_gram_listing()}


STAGE = Decontaminate

if __name__ == "__main__":
    sys.exit(main(STAGE))
