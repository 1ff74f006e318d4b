"""write_shards: the global shuffle and the snapshot's Megatron shards, validated before they count.

The hooks of the stage; its collective steps are modules of this package, run in :meth:`prepare` as
one :class:`runtime.global_phase.GlobalPhase`: ``census`` (map, :mod:`.census`) -> cuts
(:mod:`.cuts`) -> ``shards`` (exchange, :mod:`.shard_writer`) -> validation (:mod:`.validation`) ->
``doc_index`` (exchange, :mod:`.doc_index`) -> publish. Which document lands in which shard, in which
order, depends only on content, seed and target, never on ranks. The per-input-shard document outputs
of the runner pass the documents through unchanged. docs/snapshot.md, "write_shards".
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

from corpus.formats.docshard import iter_docs
from corpus.model import Kept, Outcome
from corpus.model.facts import (
    FileRef,
    MissingFacts,
    PartitionedIndex,
    TokenShardListing,
    WriteShardsFacts,
    tokenizer_facts,
)
from corpus.model.layout import DOC_INDEX_DIR, DOC_INDEX_SUFFIX, LINEAGE, MEGATRON, link_file
from corpus.model.manifest import read_stage_manifest
from corpus.text.tokenizer import TokenizerInfo
from hpc_jobs.write_shards.base_shards import BaseShards
from hpc_jobs.write_shards.census import BUCKET_NAME, CENSUS, write_census_part
from hpc_jobs.write_shards.config import WriteShardsConfig
from hpc_jobs.write_shards.cuts import plan_cuts
from hpc_jobs.write_shards.doc_index import DOC_INDEX, index_names, write_doc_index
from hpc_jobs.write_shards.shard_writer import SHARD_FILES, SHARDS, write_token_shards
from hpc_jobs.write_shards.validation import VALIDATION, validate
from runtime.global_phase import GlobalPhase, global_phase_key
from runtime.input_shard import InputShard
from runtime.runner import Stage, StageContext, StageError


class WriteShards(Stage):
    name = "write_shards"
    version = "11"  # what each version changed: docs/snapshot.md, "Stage versions"
    Config = WriteShardsConfig

    def __init__(self, config: WriteShardsConfig) -> None:
        super().__init__(config)
        self._phase: GlobalPhase | None = None
        self._base: BaseShards | None = None
        if config.shard_target_tokens < 1:
            raise StageError(
                f"[write_shards] shard_target_tokens must be positive, got {config.shard_target_tokens}"
            )
        if config.doc_index_part_docs < 1:
            raise StageError(
                f"[write_shards] doc_index_part_docs must be positive, got {config.doc_index_part_docs}"
            )
        for source, bucket in sorted(config.bucket_of_source.items()):
            if not BUCKET_NAME.match(bucket):
                raise StageError(
                    f"[write_shards] bucket {bucket!r} for source {source!r}: use letters, digits, _"
                )

    # -- the global phase --------------------------------------------------------------------------
    def _tokenizer_info(self, ctx: StageContext) -> TokenizerInfo:
        m = read_stage_manifest(ctx.in_paths[0])
        if m is None or m.stage != "tokenize":
            raise StageError(f"write_shards reads a completed tokenize stage; {ctx.in_paths[0]} is not one")
        try:
            return tokenizer_facts(m)
        except MissingFacts as e:
            raise StageError(str(e)) from e

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """census (map) -> cuts -> shards (exchange) -> validation -> doc_index (exchange) -> publish."""
        tok = self._tokenizer_info(ctx)
        base = self._base = BaseShards.of_build(ctx.out_dir)
        on_base = {"base": base.to_dict()} if base is not None else {}  # no key without a base
        phase = self._phase = GlobalPhase(
            ctx, global_phase_key(self, inputs, tokenizer=tok.to_dict(), **on_base)
        )
        if phase.complete:
            digest = phase.reused()
            self._publish(ctx)
            return digest
        if ctx.rank == 0:  # links of an earlier phase; the checkpointed parts live in the phase directory
            for d in (ctx.out_dir / MEGATRON, ctx.out_dir / LINEAGE):
                shutil.rmtree(d, ignore_errors=True)
            (ctx.out_dir / VALIDATION).unlink(missing_ok=True)
        ctx.comm.Barrier()
        # 1. census: per input shard, each document's bucket, shuffle key and tokens
        phase.map(
            CENSUS,
            inputs,
            lambda shard, w: write_census_part(
                shard,
                w,
                tokenize_dir=ctx.in_paths[0],
                memory_budget_bytes=ctx.memory_budget_bytes,
                tok=tok,
                config=self.config,
            ),
        )
        # 2. the cuts: which shard of its bucket each key falls in
        plan = plan_cuts(ctx, phase, inputs, self.config.shard_target_tokens, base)
        # 3. shards: every document's row to its shard's owner, which streams the shard's files
        shard_parts = write_token_shards(ctx, phase, inputs, plan, tok, self.config)
        # 4. validation, from the parts' facts
        validate(ctx, shard_parts, self.config)
        # 5. the doc_id index, range-partitioned by doc_id prefix
        bits = write_doc_index(phase, shard_parts, self.config.doc_index_part_docs, base)
        # 6. the phase's facts and digest, then every rank links the parts it owns
        buckets: dict[str, dict[str, int]] = {}
        for p in shard_parts:
            b = buckets.setdefault(p.facts["bucket"], {"shards": 0, "docs": 0, "tokens": 0})
            b["shards"] += 1
            b["docs"] += p.facts["docs"]
            b["tokens"] += p.facts["tokens"]
        total_docs = sum(p.facts["docs"] for p in shard_parts)
        facts = {"shards": plan.names, "buckets": buckets, "docs": total_docs, "doc_index_bits": bits}
        digest = phase.finish(
            {CENSUS: [s.name for s in inputs], SHARDS: plan.names, DOC_INDEX: index_names(bits)}, facts
        )
        self._publish(ctx)
        return digest

    def _publish(self, ctx: StageContext) -> None:
        """Collective: each rank links the parts it owns to their published names (cheap, idempotent)."""
        assert self._phase is not None
        facts = self._phase.facts
        out = ctx.out_dir
        shards_dir = self._phase.step_dir(SHARDS)
        for name in facts["shards"][ctx.rank :: ctx.size]:
            for suffix, kind in SHARD_FILES.items():
                link_file(shards_dir / f"{name}{suffix}", out / kind / f"{name}{suffix}")
        index_dir = self._phase.step_dir(DOC_INDEX)
        for name in index_names(facts["doc_index_bits"])[ctx.rank :: ctx.size]:
            link_file(
                index_dir / f"{name}{DOC_INDEX_SUFFIX}",
                out / LINEAGE / DOC_INDEX_DIR / f"{name}{DOC_INDEX_SUFFIX}",
            )
        ctx.comm.Barrier()

    # -- the map phase: documents pass through -------------------------------------------------------
    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        for doc in iter_docs(shard.path):
            yield Kept(doc), len(doc.text.encode("utf-8"))

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        """The shards and the doc index as the snapshot reads them, with the digests their writers
        computed (from the parts' markers: nothing is re-hashed)."""
        assert self._phase is not None
        facts = self._phase.facts
        token_shards = tuple(
            TokenShardListing(
                p.name,
                p.facts["bucket"],
                p.facts["docs"],
                p.facts["tokens"],
                {
                    suffix: FileRef(
                        f"{kind}/{p.name}{suffix}", p.files[f"{p.name}{suffix}"].removeprefix("sha256:")
                    )
                    for suffix, kind in SHARD_FILES.items()
                },
            )
            for p in self._phase.parts(SHARDS, facts["shards"])
        )
        bits = facts["doc_index_bits"]
        index_parts = []
        for p in self._phase.parts(DOC_INDEX, index_names(bits)):
            file = f"{p.name}{DOC_INDEX_SUFFIX}"
            ref = FileRef(f"{LINEAGE}/{DOC_INDEX_DIR}/{file}", p.files[file].removeprefix("sha256:"))
            index_parts.append((ref, p.facts["docs"]))
        handed_on = WriteShardsFacts(
            token_shards, PartitionedIndex("docs", bits, facts["docs"], tuple(index_parts)), self._base
        )
        return {
            **handed_on.to_extra(),
            "snapshot_shards": facts["shards"],
            "buckets": facts["buckets"],
            "seed": self.config.seed,
            "shuffle_key": "blake2b64('shuffle', doc_id, seed)",
        }


STAGE = WriteShards
