"""decontaminate: flag documents that contain eval-set items; keep the per-document 8-gram index.

Every rank builds the eval index from the registry (its digest is the prepare digest). The rule
(:mod:`corpus.decont.rule`) is applied per document; a flagged document stays a candidate, annotated,
and is written to ``flagged/NAME.jsonl.zst``; excluding it is a version's decision. Per shard the stage
writes each document's distinct 8-grams (``doc_grams/NAME.rows``); :meth:`Decontaminate.conclude`
(one global phase, step ``doc_grams``) writes them range-partitioned by hash prefix and sorted as
``doc_gram_index/`` (:mod:`corpus.decont.doc_grams`), parts fixed by the data, never by the rank count.
The registry is recorded by directory name and content digest only. docs/snapshot.md, "decontaminate".
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from corpus.decont.doc_grams import (
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
    sampled_grams,
)
from corpus.decont.eval_table import EvalTable, build_eval_table
from corpus.decont.matcher import EvalIndex, best_per_benchmark, fuzzy_dir
from corpus.decont.ngrams import SCHEME, Grams, normalize_words, word_hashes
from corpus.decont.registry import RegistryError, registry_digest
from corpus.decont.report import FLAGGED, encode_items
from corpus.decont.rule import (
    DEFAULT_FUZZY_MIN_WORDS,
    DEFAULT_FUZZY_SHARE,
    DEFAULT_MIN_ITEM_WORDS,
    DEFAULT_MIN_RUN,
    FUZZY_N,
    FUZZY_RULE,
    RULE,
    RULE_N,
    doc_gram_set,
)
from corpus.formats.docshard import SUFFIX, iter_docs, read_sidecar
from corpus.formats.partitions import part_of_hashes, prefix_bits
from corpus.model import Kept, Outcome
from corpus.model.annotations import (
    CONTAMINATED_FUZZY,
    CONTAMINATED_FUZZY_ITEM,
    CONTAMINATED_ITEM,
    CONTAMINATED_ITEMS,
    CONTAMINATED_RUN,
)
from corpus.model.digest import json_digest
from corpus.model.facts import DecontaminationFacts, FileRef, PartitionedIndex
from corpus.model.layout import STAGES_DIR, WORK, base_build_of, build_dir_of_stage, link_file
from corpus.text.tokenizer import resolve_asset
from mpi_kernels.barrier import sleeping_barrier, sleeping_bcast
from runtime.global_phase import GlobalPhase, PartWriter, global_phase_key
from runtime.input_shard import InputShard
from runtime.runner import Stage, StageContext, StageError, remove_stale_artifacts
from runtime.side_output import SideOutput

DOC_GRAMS_STEP = "doc_grams"
#: the tier the fuzzy tier does not judge (docs/snapshot.md, "The fuzzy tier")
CODE_TIER = "code"
#: what version 5 kept besides, the corpus-wide 13-gram index: removed from a stage directory it reruns in
_VERSION_5_LEFTOVERS = ("ngrams", "ngram_index", "work/grams-spill")
#: an (8-gram, document) record on its way to the part of its prefix
_DOC_GRAM_ROW = np.dtype([("part", "<u4"), ("gram", "<u8"), ("doc", "<u8")])
_SEND_BATCH = 1 << 16
#: the eval table's directory in the stage's work directory (corpus.decont.eval_table)
EVAL_TABLE_DIR = "eval_table"


def _base_work(ctx: StageContext) -> Path | None:
    """The stage's work directory in the build this one was made against (a new crawl's build against
    the last): its eval tables, with the same registry, are linked, not written again."""
    build = build_dir_of_stage(ctx.out_dir)
    base = base_build_of(build) if build is not None else None
    return base[0] / STAGES_DIR / Decontaminate.name / WORK if base is not None else None


#: a directory where eval tables are kept by key, so a registry's table is written once per filesystem,
#: not once per build (a table never changes any output: unset, each build writes its own)
TABLE_CACHE_ENV = "CORPUS_EVAL_TABLE_CACHE"


def _table_cache() -> Path | None:
    value = os.environ.get(TABLE_CACHE_ENV, "")
    return Path(value) if value else None


def _table_rows(ctx: StageContext) -> int:
    """Rows the table's writer sorts at a time: an eighth of the budget at 16 bytes a row (the sort's
    temporaries take a few times that)."""
    return max(1 << 16, ctx.memory_budget_bytes // 8 // 16)


@dataclass(frozen=True, kw_only=True)
class DecontaminateConfig:
    #: the eval registry, a directory of benchmark files: an absolute path, or relative to the working
    #: directory, else to the repository. Read once, then recorded by its directory name only (its content
    #: by ``eval_registry_hash``), so the same files from any directory, relative spelling or link give the
    #: same config, manifest and snapshot id; where it was found is :attr:`registry`, which no digest covers
    eval_dir: str = "assets/evals"
    #: consecutive 8-grams of a passage that make a document contaminated (all of them when it has fewer)
    min_run: int = DEFAULT_MIN_RUN
    min_item_words: int = DEFAULT_MIN_ITEM_WORDS  # passages shorter than this are too generic to check
    #: the fuzzy tier (paraphrases): a document whose 5-grams cover this share of a passage's words,
    #: anywhere and in any order, is flagged apart from the exact hits (0: no fuzzy tier, no 5-gram table)
    fuzzy_share: float = DEFAULT_FUZZY_SHARE
    fuzzy_min_words: int = DEFAULT_FUZZY_MIN_WORDS  # and at least this many words (all of a shorter passage)
    #: about how many (8-gram, document) records one part of the per-document index holds (16 bytes
    #: each); the number of parts follows from the data and this, never from the rank count
    doc_gram_part_rows: int = 1 << 22
    #: the per-document index keeps one 8-gram in this many (a power of two; by hash, the same 8-grams in
    #: every document, corpus.decont.doc_grams.sampled_grams): 1 keeps every one, so a check after the
    #: build applies the build's own rule; 64 costs about 0.2 bytes per token, checked by the sampled rule
    doc_gram_sample: int = 1
    #: computed, not set: the registry's content digest is part of the config (and its hash), so an
    #: eval file changed in place re-runs the stage like any other config change
    eval_registry_hash: str = field(init=False, default="")

    def __post_init__(self) -> None:
        n = self.doc_gram_sample
        if not 1 <= n <= 4096 or n & (n - 1):
            raise ValueError(f"doc_gram_sample must be a power of two from 1 to 4096, got {n}")
        path = resolve_asset(self.eval_dir)
        object.__setattr__(self, "eval_registry_hash", registry_digest(path))
        object.__setattr__(self, "eval_dir", Path(os.path.abspath(path)).name)
        object.__setattr__(self, "_registry", path)  # not a field: never in the config's dict or hash

    @property
    def registry(self) -> Path:
        """The eval registry directory as it was found (its location, which enters no digest)."""
        return self._registry


class Decontaminate(Stage):
    name = "decontaminate"
    version = "9"  # what each version changed: docs/snapshot.md, "Stage versions"
    Config = DecontaminateConfig
    artifact_kinds = (FLAGGED, DOC_GRAMS)
    side_outputs = (SideOutput(FLAGGED), SideOutput(DOC_GRAMS, DOC_GRAMS_SUFFIX, RowsFile))

    def __init__(self, config: DecontaminateConfig) -> None:
        super().__init__(config)
        self.index: EvalIndex | None = None
        self._phase: GlobalPhase | None = None
        if config.doc_gram_part_rows < 1:
            raise StageError(
                f"[decontaminate] doc_gram_part_rows must be positive, got {config.doc_gram_part_rows}"
            )

    def _load(self, ctx: StageContext) -> EvalIndex:
        """The registry's tables (the rule's 8-grams; the fuzzy tier's 5-grams unless it is off), the
        k-th written by rank k mod P (side by side on two ranks or more; once per registry: a rerun finds
        them) and mapped by all."""
        if self.index is None:
            tables = {RULE_N: ctx.work_dir / EVAL_TABLE_DIR}
            if self.config.fuzzy_share:
                tables[FUZZY_N] = fuzzy_dir(tables[RULE_N])
            error = None
            mine = [(n, d) for k, (n, d) in enumerate(tables.items()) if k % ctx.size == ctx.rank]
            if mine:
                base = _base_work(ctx)
                try:
                    for n, table_dir in mine:
                        key = build_eval_table(
                            self.config.registry,
                            self.config.min_item_words,
                            table_dir,
                            _table_rows(ctx),
                            reuse=None if base is None else base / table_dir.name,
                            cache=_table_cache(),
                            n=n,
                        )["key"]
                        if key["eval_registry"] != self.config.eval_registry_hash:
                            error = f"eval registry {self.config.registry} changed while the stage started"
                except (RegistryError, ValueError) as e:
                    error = str(e)
            sleeping_barrier(ctx.comm)
            error = next((e for e in ctx.comm.allgather(error) if e is not None), None)
            if error is not None:
                raise StageError(error)
            try:
                self.index = EvalIndex(
                    EvalTable.open(tables[RULE_N]),
                    self.config.min_run,
                    EvalTable.open(tables[FUZZY_N]) if FUZZY_N in tables else None,
                    self.config.fuzzy_share,
                    self.config.fuzzy_min_words,
                )
            except ValueError as e:
                raise StageError(f"[decontaminate] {e}") from None
        return self.index

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        index = self._load(ctx)
        if ctx.rank == 0:
            for leftover in _VERSION_5_LEFTOVERS:
                shutil.rmtree(ctx.out_dir / leftover, ignore_errors=True)
        remove_stale_artifacts(ctx, inputs, FLAGGED, (SUFFIX, SUFFIX + ".json"))
        remove_stale_artifacts(ctx, inputs, DOC_GRAMS, (DOC_GRAMS_SUFFIX, DOC_GRAMS_SUFFIX + ".json"))
        return json_digest(
            {"eval_registry": index.registry_digest, "scheme": SCHEME, "rule": RULE, "fuzzy_rule": FUZZY_RULE}
        )

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        index = self._load(ctx)
        flagged, rows = ctx.side(FLAGGED), ctx.side(DOC_GRAMS)
        for doc in iter_docs(shard.path):
            nbytes = len(doc.text.encode("utf-8"))
            # what the rule reads of the document, and all the index keeps
            grams = Grams(word_hashes(normalize_words(doc.text)))
            doc_set = doc_gram_set(grams)
            rows.write(doc_rows(sampled_grams(doc_set, self.config.doc_gram_sample), doc_key(doc.doc_id)))
            if doc.source_tier == CODE_TIER:  # code shares stock phrases (imports, signatures) with HumanEval
                matches, fuzzy = index.match_set(doc_set), []
            else:
                matches, fuzzy = index.match_both(grams, doc_set)
            if matches or fuzzy:
                notes = []
                for best in best_per_benchmark(matches):
                    items = [m.item_id for m in matches if m.benchmark == best.benchmark]
                    notes.append(CONTAMINATED_RUN.note(best.benchmark, best.run, "fail"))
                    notes.append(CONTAMINATED_ITEM.note(best.benchmark, best.item_id))
                    notes.append(CONTAMINATED_ITEMS.note(best.benchmark, encode_items(items)))
                for near in best_per_benchmark(fuzzy, "share"):
                    notes.append(CONTAMINATED_FUZZY.note(near.benchmark, near.share, "fail"))
                    notes.append(CONTAMINATED_FUZZY_ITEM.note(near.benchmark, near.item_id))
                doc = doc.annotate(*notes)
                flagged.write_doc(doc)
            yield Kept(doc), nbytes

    # -- the per-document index: a global phase over the shards' records -------------------------------
    def conclude(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """One exchange step: each record to the part of its prefix; each part written sorted, unique."""
        phase = self._phase = GlobalPhase(ctx, global_phase_key(self, inputs, scheme=SCHEME, rule=RULE))
        bits, names = self._parts(ctx, inputs)
        if phase.complete:
            digest = phase.reused()
        else:

            def send(shard: InputShard) -> Iterator[np.ndarray]:
                path = ctx.artifact_path(DOC_GRAMS, f"{shard.name}{DOC_GRAMS_SUFFIX}")
                for batch in read_rows(path, _SEND_BATCH):
                    rows = np.empty(batch.shape[0], dtype=_DOC_GRAM_ROW)
                    rows["part"] = part_of_hashes(batch["gram"], bits)
                    rows["gram"], rows["doc"] = batch["gram"], batch["doc"]
                    yield rows

            def reduce(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
                out = SortedRowWriter(writer.open(DOC_GRAM_INDEX_SUFFIX))
                for rows in batches:  # sorted by (gram, doc) within the part
                    out.add_sorted(rows["gram"], rows["doc"])
                return {"rows": out.count}

            phase.exchange_rows(
                DOC_GRAMS_STEP, names, inputs, send, reduce, dtype=_DOC_GRAM_ROW, order_fields=("gram", "doc")
            )
            total = None
            if ctx.rank == 0:
                total = sum(p.facts["rows"] for p in phase.parts(DOC_GRAMS_STEP, names))
            total = sleeping_bcast(ctx.comm, total)
            digest = phase.finish({DOC_GRAMS_STEP: names}, {"rows": total, "prefix_bits": bits})
        self._publish(ctx, names)
        return digest

    def _parts(self, ctx: StageContext, inputs: list[InputShard]) -> tuple[int, list[str]]:
        """The index's prefix bits and part names, from the shards' record counts (sidecars)."""
        bits = None
        if ctx.rank == 0:
            total = 0
            for s in inputs:
                sidecar = read_sidecar(ctx.artifact_path(DOC_GRAMS, f"{s.name}{DOC_GRAMS_SUFFIX}"))
                if sidecar is None:
                    raise StageError(f"[decontaminate] {DOC_GRAMS}/{s.name}{DOC_GRAMS_SUFFIX} is missing")
                total += int(sidecar["records"])
            bits = prefix_bits(total, self.config.doc_gram_part_rows)
        bits = sleeping_bcast(ctx.comm, bits)
        return bits, [f"g{p:05d}" for p in range(1 << bits)]

    def _publish(self, ctx: StageContext, names: list[str]) -> None:
        """Each rank links the parts it owns into ``doc_gram_index/`` (the checkpointed files themselves)."""
        assert self._phase is not None
        d = ctx.out_dir / DOC_GRAM_INDEX_DIR
        d.mkdir(parents=True, exist_ok=True)
        for n in names[ctx.rank :: ctx.size]:
            name = f"{n}{DOC_GRAM_INDEX_SUFFIX}"
            link_file(self._phase.step_dir(DOC_GRAMS_STEP) / name, d / name)
        ctx.comm.Barrier()
        if ctx.rank == 0:  # parts of an earlier, larger index would be listed by nobody: drop them
            keep = {f"{n}{DOC_GRAM_INDEX_SUFFIX}" for n in names}
            for p in sorted(d.iterdir()):
                if p.name not in keep:
                    p.unlink()

    def index_listing(self) -> PartitionedIndex:
        """The per-document index as the manifest lists it (``rows``): parts with the digests computed
        while writing."""
        assert self._phase is not None
        facts = self._phase.facts
        names = [f"g{p:05d}" for p in range(1 << facts["prefix_bits"])]
        parts = []
        for part in self._phase.parts(DOC_GRAMS_STEP, names):
            file = f"{part.name}{DOC_GRAM_INDEX_SUFFIX}"
            ref = FileRef(f"{DOC_GRAM_INDEX_DIR}/{file}", part.files[file].removeprefix("sha256:"))
            parts.append((ref, part.facts["rows"]))
        record = ", ".join(f"{n} {DOC_GRAM_RECORD.fields[n][0].str}" for n in DOC_GRAM_RECORD.names)
        return PartitionedIndex("rows", facts["prefix_bits"], facts["rows"], tuple(parts), SCHEME, record)

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        index = self._load(ctx)
        # matching: the rule and its settings (rule, ngram, min_run, min_item_words), what a check applies
        return DecontaminationFacts(
            index.registry_digest,
            index.describe_registry(),
            index.describe() | {"scheme": SCHEME, "doc_gram_sample": self.config.doc_gram_sample},
            self.index_listing(),
        ).to_extra()


STAGE = Decontaminate
