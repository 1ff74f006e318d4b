"""write_shards: the global shuffle and the snapshot's Megatron shards, validated before they count.

The global phase (``prepare``, :class:`runtime.global_phase.GlobalPhase`) has three steps, each of
whose parts is checkpointed as it completes, so a rank killed or pre-empted loses only its current part:

1. ``census`` (a map step, one part per input shard): each document's mixture bucket (its
   ``source_tier`` unless ``bucket_of_source`` maps its source), shuffle key ``shuffle_key(doc_id,
   seed)`` and token count, as fixed-width records (:data:`CENSUS_RECORD`); the part's facts hold its
   buckets' token totals. A document whose shuffle record cannot fit in the budget stops the stage here
   with a one-line error naming ``memory_budget_mb`` and the size it needs, before anything is sent.
2. The cuts (collective, not a part: recomputed from the census parts in one pass): from the totals,
   each bucket's key histogram resolution (``histogram_bits``); an all-reduced token histogram over the
   bucket's key range is cut every ``shard_target_tokens`` (``shard_of_bins``), so every shard is a
   uniform random sample of its bucket, holds the target give or take one bin, and which documents land
   in which shard, in which order (by key), depends only on content, seed and target, never on ranks.
3. ``shards`` (an exchange step, one part per output token shard): every document (lineage record and
   tokens, :func:`encode_doc_record`) goes to the owner of its shard's part, sorted by (shuffle key,
   doc_id); the owner *streams* the part: ``.bin`` (tokens, hashed whole and per block while written),
   ``.idx``, ``.jsonl`` + ``.offsets.npy`` (lineage), ``.doc_ids`` and ``.meta.json``, with the
   validation numbers computed incrementally (:class:`ShardStatsAccumulator`). It holds one record,
   the shard's per-document lengths and offsets (12 bytes a document) and one 4 MiB block at a time.
4. Validation: every shard's numbers go to ``validation.json``; any failure stops the stage naming the
   shard and the number (the parts stay checkpointed: a rerun fails the same way without redoing them).
5. ``doc_index`` (an exchange step): each shard's doc_ids, with (shard number, document number), go to
   the part of their doc_id prefix (``2**bits`` parts of about ``doc_index_part_docs`` records, fixed by
   the data); each part is written sorted (:mod:`corpus.doc_index`).

Then every rank links the parts it owns into ``megatron/``, ``lineage/`` and ``lineage/doc_index/``, and
the manifest lists them with the digests their writers computed (``extra["token_shards"]``,
``extra["doc_index"]``): nothing is re-hashed. The per-input-shard document outputs of the runner pass
the documents through unchanged.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
import struct
import sys
import time
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corpus.decont.corpus_index import map_records, npy_bytes, prefix_bits
from corpus.digest import canonical_json, sha256_hex, stable_hash64
from corpus.doc_index import DOC_ID_CHARS, encode_doc_index, part_of_doc_id
from corpus.docshard import atomic_write_json, iter_docs
from corpus.layout import DOC_INDEX_DIR, DOC_INDEX_SUFFIX, LINEAGE, MEGATRON, link_file
from corpus.manifests import read_stage_manifest
from corpus.megatron import BLOCK_SIZE, BlockHasher, IndexedShard, index_bytes
from corpus.model import Document, Kept, Outcome
from corpus.stage_facts import (
    FileRef,
    MissingFacts,
    PartitionedIndex,
    TokenShardListing,
    WriteShardsFacts,
    tokenizer_facts,
)
from corpus.tokenizer import TokenizerInfo
from hpc_jobs.tokenize import token_prefix
from mpi_kernels.shuffle import round_bytes, too_large_error
from runtime.global_phase import GlobalPhase, Part, PartWriter, global_phase_key
from runtime.runner import (
    InputShard,
    Stage,
    StageContext,
    StageError,
    assign,
    main,
)

VALIDATION = "validation.json"
_BUCKET_NAME = re.compile(r"^[A-Za-z0-9_]+$")
CENSUS, SHARDS, DOC_INDEX = "census", "shards", "doc_index"

# -- the records of the phase, one codec each --------------------------------------------------------
#: a census record: one document of an input shard (bucket = index into the part's sorted bucket list)
CENSUS_RECORD = np.dtype([("key", "<u8"), ("tokens", "<i8"), ("bucket", "<u2")])
#: the shuffle key of a document's record: shuffle key (big-endian, so bytes sort as numbers), doc_id
_DOC_KEY = struct.Struct(">Q32s")
#: a document's payload: lineage record length, then the record, then the tokens
_DOC_PAYLOAD = struct.Struct("<I")
#: a doc index record on its way: (shard number, document number), big-endian (bytes sort as numbers)
_DOC_LOCATION = struct.Struct(">II")
#: a part's doc_ids, in order: 32 ASCII hex characters each
DOC_IDS_RECORD = np.dtype(f"S{DOC_ID_CHARS}")
#: the files of one token shard part, and where each is published (directory under the stage)
SHARD_FILES = {
    ".bin": MEGATRON,
    ".idx": MEGATRON,
    ".meta.json": MEGATRON,
    ".jsonl": LINEAGE,
    ".offsets.npy": LINEAGE,
}
_SHUFFLE_OVERHEAD = 8 + 4  # the shuffle's framing and the exchange's part number
_STATS_BATCH = 1 << 16  # tokens counted at once by the validation statistics (~40 bytes each, transient)


def encode_doc_key(key: int, doc_id: str) -> bytes:
    return _DOC_KEY.pack(key, doc_id.encode())


def decode_doc_key(data: bytes) -> tuple[int, str]:
    key, doc_id = _DOC_KEY.unpack(data)
    return key, doc_id.decode()


def encode_doc_record(lineage: bytes, tokens: np.ndarray) -> bytes:
    return _DOC_PAYLOAD.pack(len(lineage)) + lineage + np.ascontiguousarray(tokens).tobytes()


def decode_doc_record(data: bytes, dtype: str) -> tuple[bytes, np.ndarray]:
    (n,) = _DOC_PAYLOAD.unpack_from(data)
    start = _DOC_PAYLOAD.size
    return data[start : start + n], np.frombuffer(data, dtype=dtype, offset=start + n)


def encode_doc_location(shard: int, doc: int) -> bytes:
    return _DOC_LOCATION.pack(shard, doc)


def decode_doc_location(data: bytes) -> tuple[int, int]:
    return _DOC_LOCATION.unpack(data)


@dataclass(frozen=True)
class WriteShardsConfig:
    seed: int = 0  # the build's seed unless set here
    shard_target_tokens: int = 1 << 24
    bucket_of_source: dict[str, str] = field(default_factory=dict)  # source -> bucket; default source_tier
    max_repeat_run: int = 1024  # longest run of one token id a shard may hold
    min_entropy_bits: float = 5.0  # unigram entropy of the shard's non-EOS tokens
    max_top_token_share: float = 0.25  # share of the most frequent non-EOS token
    #: about how many documents one part of the doc_id index holds (40 bytes each); the number of parts
    #: follows from the data and this, never from the rank count
    doc_index_part_docs: int = 1 << 20


def shuffle_key(doc_id: str, seed: int) -> int:
    """H(doc_id, seed): a document's place in the shuffled order, the same on every machine."""
    return stable_hash64("shuffle", doc_id, seed)


def histogram_bits(bucket_tokens: int, target: int) -> int:
    """Resolution of a bucket's key histogram: about 64 bins per shard, 2**16 to 2**24 bins."""
    shards = max(1, math.ceil(bucket_tokens / target))
    return min(24, max(16, math.ceil(math.log2(64 * shards))))


def shard_of_bins(hist: np.ndarray, target: int) -> np.ndarray:
    """Shard number of every key bin: bins are taken in key order and a new shard starts every
    ``target`` tokens, so shards hold ``target`` tokens give or take one bin (the last one the rest)."""
    before = np.cumsum(hist) - hist
    n_shards = max(1, math.ceil(int(hist.sum()) / target))
    return np.minimum(before // target, n_shards - 1)


def shard_name(bucket: str, number: int) -> str:
    return f"{bucket}-{number:05d}"


def lineage_record(doc: Document) -> dict[str, Any]:
    """What ``corpus trace`` tells about a document: everything but its text."""
    d = doc.to_dict()
    d["text_bytes"] = len(d.pop("text").encode("utf-8"))
    return d


def shard_stats(tokens: np.ndarray, eos_id: int) -> dict[str, Any]:
    """The numbers a shard is validated on (pure; tokens is the shard's flat token array)."""
    n = int(tokens.shape[0])
    if n:
        change = np.flatnonzero(np.diff(tokens.astype(np.int64))) if n > 1 else np.empty(0, np.int64)
        bounds = np.concatenate(([-1], change, [n - 1]))
        runs = np.diff(bounds)
        longest = int(np.argmax(runs))
        max_run, run_token = int(runs[longest]), int(tokens[bounds[longest + 1]])
    else:
        max_run, run_token = 0, -1
    content = tokens[tokens != eos_id].astype(np.int64)
    if content.shape[0]:
        full = np.bincount(content)
        counts = full[full > 0]
        p = counts / content.shape[0]
        entropy = float(-(p * np.log2(p)).sum())
        top = int(np.argmax(full))
        top_share = float(counts.max() / content.shape[0])
    else:
        entropy, top, top_share = 0.0, -1, 0.0
    return {
        "tokens": n,
        "max_repeat_run": max_run,
        "max_repeat_token": run_token,
        "entropy_bits": round(entropy, 6),
        "top_token": top,
        "top_token_share": round(top_share, 6),
    }


class ShardStatsAccumulator:
    """:func:`shard_stats` over a shard's documents as they stream past, one at a time (the same numbers:
    the longest run continues across documents, ties go to the first; the counts are a bincount)."""

    def __init__(self, eos_id: int) -> None:
        self.eos_id = eos_id
        self.n = 0
        self.counts = np.zeros(0, dtype=np.int64)
        self.run_token, self.run_len = -1, 0  # the run still open at the end of what was added
        self.max_run, self.max_token = 0, -1

    def add(self, tokens: np.ndarray) -> None:
        t = np.asarray(tokens).astype(np.int64)
        if t.shape[0] == 0:
            return
        change = np.flatnonzero(np.diff(t)) if t.shape[0] > 1 else np.empty(0, np.int64)
        bounds = np.concatenate(([-1], change, [t.shape[0] - 1]))
        runs = np.diff(bounds)
        starts = bounds[:-1] + 1
        if int(t[0]) == self.run_token:  # the first run continues the one still open
            first = int(runs[0]) + self.run_len
        else:  # the open run ends here: it counts before any of these (the first of equals wins)
            if self.run_len > self.max_run:
                self.max_run, self.max_token = self.run_len, self.run_token
            first = int(runs[0])
        # every run but the last is closed now (in order: the first, then the inner ones); the last
        # stays open for what comes next
        if runs.shape[0] == 1:
            self.run_len, self.run_token = first, int(t[0])
        else:
            if first > self.max_run:
                self.max_run, self.max_token = first, int(t[0])
            if runs.shape[0] > 2:
                k = int(np.argmax(runs[1:-1]))  # the first of the longest
                if int(runs[1 + k]) > self.max_run:
                    self.max_run, self.max_token = int(runs[1 + k]), int(t[starts[1 + k]])
            self.run_len, self.run_token = int(runs[-1]), int(t[starts[-1]])
        content = t[t != self.eos_id]
        if content.shape[0]:
            bc = np.bincount(content)
            if bc.shape[0] > self.counts.shape[0]:
                self.counts = np.concatenate(
                    [self.counts, np.zeros(bc.shape[0] - self.counts.shape[0], np.int64)]
                )
            self.counts[: bc.shape[0]] += bc
        self.n += t.shape[0]

    def result(self) -> dict[str, Any]:
        max_run, run_token = self.max_run, self.max_token
        if self.run_len > max_run:
            max_run, run_token = self.run_len, self.run_token
        content = int(self.counts.sum())
        if content:
            counts = self.counts[self.counts > 0]
            p = counts / content
            entropy = float(-(p * np.log2(p)).sum())
            top = int(np.argmax(self.counts))
            top_share = float(counts.max() / content)
        else:
            entropy, top, top_share = 0.0, -1, 0.0
        return {
            "tokens": self.n,
            "max_repeat_run": max_run if self.n else 0,
            "max_repeat_token": run_token if self.n else -1,
            "entropy_bits": round(entropy, 6),
            "top_token": top,
            "top_token_share": round(top_share, 6),
        }


class _BlockHashed:
    """A part's .bin: the part writer hashes the whole file; this adds the per-block digests."""

    def __init__(self, out: Any, blocks: BlockHasher) -> None:
        self.out = out
        self.blocks = blocks

    def write(self, data: bytes) -> None:
        self.blocks.update(data)
        self.out.write(data)


def validation_failures(stats: dict[str, Any], index_tokens: int, cfg: WriteShardsConfig) -> list[str]:
    failures = []
    if stats["tokens"] != index_tokens:
        failures.append(f"token count {stats['tokens']} != {index_tokens} in the index")
    if stats["max_repeat_run"] > cfg.max_repeat_run:
        failures.append(
            f"token {stats['max_repeat_token']} repeats {stats['max_repeat_run']} times in a row "
            f"(max_repeat_run {cfg.max_repeat_run})"
        )
    if stats["entropy_bits"] < cfg.min_entropy_bits:
        failures.append(
            f"token entropy {stats['entropy_bits']:.2f} bits < min_entropy_bits {cfg.min_entropy_bits}"
        )
    if stats["top_token_share"] > cfg.max_top_token_share:
        failures.append(
            f"top token {stats['top_token']} is {100 * stats['top_token_share']:.1f}% of tokens "
            f"(max_top_token_share {100 * cfg.max_top_token_share:.1f}%)"
        )
    return failures


class WriteShards(Stage):
    name = "write_shards"
    version = "4"  # 4: the global phase in checkpointed parts; the doc_id index range-partitioned
    Config = WriteShardsConfig

    def __init__(self, config: WriteShardsConfig) -> None:
        super().__init__(config)
        self._phase: GlobalPhase | None = None
        if config.shard_target_tokens < 1:
            raise StageError(
                f"[write_shards] shard_target_tokens must be positive, got {config.shard_target_tokens}"
            )
        if config.doc_index_part_docs < 1:
            raise StageError(
                f"[write_shards] doc_index_part_docs must be positive, got {config.doc_index_part_docs}"
            )
        for source, bucket in sorted(config.bucket_of_source.items()):
            if not _BUCKET_NAME.match(bucket):
                raise StageError(
                    f"[write_shards] bucket {bucket!r} for source {source!r}: use letters, digits, _"
                )

    def bucket_of(self, doc: Document) -> str:
        bucket = self.config.bucket_of_source.get(doc.source) or doc.source_tier or "default"
        if not _BUCKET_NAME.match(bucket):
            raise StageError(
                f"document {doc.doc_id}: bucket {bucket!r} is not a valid name; map source "
                f"{doc.source!r} in [write_shards] bucket_of_source"
            )
        return bucket

    # -- the global phase --------------------------------------------------------------------------
    def _tokenizer_info(self, ctx: StageContext) -> TokenizerInfo:
        m = read_stage_manifest(ctx.in_paths[0])
        if m is None or m.stage != "tokenize":
            raise StageError(f"write_shards reads a completed tokenize stage; {ctx.in_paths[0]} is not one")
        try:
            return tokenizer_facts(m)
        except MissingFacts as e:
            raise StageError(str(e)) from e

    def _documents(self, ctx: StageContext, shard: InputShard) -> Iterator[tuple[Document, np.ndarray]]:
        """An input shard's documents with their tokens (the tokenize stage's sequences, in order)."""
        tokens = IndexedShard(token_prefix(ctx.in_paths[0], shard.name))
        n = 0
        for doc in iter_docs(shard.path):
            if n >= len(tokens):
                n += 1
                break
            yield doc, tokens.document(n)
            n += 1
        if n != len(tokens) or (shard.records >= 0 and n != shard.records):
            raise StageError(
                f"{shard.name}: {shard.records} documents but {len(tokens)} token sequences in "
                f"the tokenize stage; rerun tokenize"
            )

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """census (map) -> cuts -> shards (exchange) -> validation -> doc_index (exchange) -> publish."""
        tok = self._tokenizer_info(ctx)
        phase = self._phase = GlobalPhase(ctx, global_phase_key(self, inputs, tokenizer=tok.to_dict()))
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
        phase.map(CENSUS, inputs, lambda shard, w: self._census(ctx, shard, w, tok))
        # 2. the cuts: which shard of its bucket each key falls in
        plan = self._plan(ctx, phase, inputs)
        # 3. shards: every document to its shard's owner, which streams the shard's files
        t0 = time.monotonic()
        received = phase.exchange(
            SHARDS,
            plan.names,
            inputs,
            lambda shard: self._send_docs(ctx, shard, plan),
            lambda p, records, w: self._write_shard(p, plan, records, w, tok),
        )
        docs, nbytes = (received.records, received.bytes_received) if received else (0, 0)
        ctx.say(
            f"read and shuffled: received {docs} docs, {nbytes / 1e6:.2f} MB in {time.monotonic() - t0:.2f}s "
            "(the shards step: sending, exchange and streaming this rank's shards)"
        )
        # 4. validation, from the parts' facts
        shard_parts = self._validate(ctx, phase, plan)
        # 5. the doc_id index, range-partitioned by doc_id prefix
        total_docs = sum(p.facts["docs"] for p in shard_parts)
        bits = prefix_bits(total_docs, self.config.doc_index_part_docs)
        index_names = [f"d{p:05d}" for p in range(1 << bits)]
        shard_no = {n: i for i, n in enumerate(plan.names)}
        phase.exchange(
            DOC_INDEX,
            index_names,
            shard_parts,
            lambda part: _send_doc_ids(part, shard_no[part.name], bits),
            _write_doc_index,
        )
        buckets: dict[str, dict[str, int]] = {}
        for p in shard_parts:
            b = buckets.setdefault(p.facts["bucket"], {"shards": 0, "docs": 0, "tokens": 0})
            b["shards"] += 1
            b["docs"] += p.facts["docs"]
            b["tokens"] += p.facts["tokens"]
        facts = {"shards": plan.names, "buckets": buckets, "docs": total_docs, "doc_index_bits": bits}
        digest = phase.finish(
            {CENSUS: [s.name for s in inputs], SHARDS: plan.names, DOC_INDEX: index_names}, facts
        )
        self._publish(ctx)
        return digest

    def _census(self, ctx: StageContext, shard: InputShard, writer: PartWriter, tok: dict) -> dict[str, Any]:
        """One input shard's census part; refuses a document whose tokens alone exceed a shuffle round."""
        limit = round_bytes(ctx.memory_budget_bytes)
        itemsize = np.dtype(tok.token_dtype).itemsize
        keys, tokens, names = [], [], []
        for doc, toks in self._documents(ctx, shard):
            # the tokens alone (the lineage record is checked, exactly, when the document is sent)
            floor = _SHUFFLE_OVERHEAD + _DOC_KEY.size + _DOC_PAYLOAD.size + itemsize * toks.shape[0]
            _check_record(ctx, doc, shard, floor, limit, toks.shape[0])
            keys.append(shuffle_key(doc.doc_id, self.config.seed))
            tokens.append(int(toks.shape[0]))
            names.append(self.bucket_of(doc))
        buckets = sorted(set(names))
        rec = np.empty(len(keys), dtype=CENSUS_RECORD)
        rec["key"] = np.array(keys, dtype=np.uint64)
        rec["tokens"] = tokens
        index = {b: i for i, b in enumerate(buckets)}
        rec["bucket"] = [index[b] for b in names]
        writer.write_bytes(".census", rec.tobytes())
        totals = {b: int(rec["tokens"][rec["bucket"] == i].sum()) for i, b in enumerate(buckets)}
        return {"buckets": buckets, "tokens": totals, "docs": len(keys)}

    def _plan(self, ctx: StageContext, phase: GlobalPhase, inputs: list[InputShard]) -> ShardPlan:
        """Collective: the shard cuts from the census parts (an all-reduced histogram per bucket)."""
        totals = None
        if ctx.rank == 0:
            c: Counter = Counter()
            for p in phase.parts(CENSUS, [s.name for s in inputs]):
                c.update(p.facts["tokens"])
            totals = dict(sorted(c.items()))
        totals = ctx.comm.bcast(totals, root=0)
        buckets = sorted(totals)
        mine = [phase.part(CENSUS, s.name) for s in assign(inputs, ctx.rank, ctx.size)]
        tables, names, part_of = [], [], {}
        for b, bucket in enumerate(buckets):
            bits = histogram_bits(totals[bucket], self.config.shard_target_tokens)
            hist = np.zeros(1 << bits, dtype=np.int64)
            for part in mine:  # one census part in memory at a time
                assert part is not None
                local = part.facts["buckets"]
                if bucket not in local:
                    continue
                rec = map_records(part.path(".census"), CENSUS_RECORD)
                sel = rec["bucket"] == local.index(bucket)
                np.add.at(
                    hist, (rec["key"][sel] >> np.uint64(64 - bits)).astype(np.int64), rec["tokens"][sel]
                )
            total_hist = np.empty_like(hist)
            ctx.comm.Allreduce(hist, total_hist)
            table = shard_of_bins(total_hist, self.config.shard_target_tokens).astype(np.int32)
            tables.append((bits, table))
            for number in np.unique(table[total_hist > 0]).tolist():  # a shard no key fell in is no shard
                part_of[(b, number)] = len(names)
                names.append(shard_name(bucket, number))
        return ShardPlan(buckets, tables, names, part_of)

    def _send_docs(
        self, ctx: StageContext, shard: InputShard, plan: ShardPlan
    ) -> Iterator[tuple[int, bytes, bytes]]:
        bucket_index = {b: i for i, b in enumerate(plan.buckets)}
        limit = round_bytes(ctx.memory_budget_bytes)
        for doc, toks in self._documents(ctx, shard):
            b = bucket_index[self.bucket_of(doc)]
            key = shuffle_key(doc.doc_id, self.config.seed)
            bits, table = plan.tables[b]
            part = plan.part_of[(b, int(table[key >> (64 - bits)]))]
            doc_key, payload = (
                encode_doc_key(key, doc.doc_id),
                encode_doc_record(canonical_json(lineage_record(doc)), toks),
            )
            # before the shuffle sees it: parts are reduced only after the exchange, so none is half-written
            _check_record(
                ctx, doc, shard, _SHUFFLE_OVERHEAD + len(doc_key) + len(payload), limit, toks.shape[0]
            )
            yield part, doc_key, payload

    def _write_shard(
        self,
        part_no: int,
        plan: ShardPlan,
        records: Iterator[tuple[bytes, bytes]],
        writer: PartWriter,
        tok: dict,
    ) -> dict[str, Any]:
        """Stream one token shard: .bin/.idx, lineage, doc_ids and meta, with its validation numbers."""
        name = plan.names[part_no]
        bucket = name.rsplit("-", 1)[0]
        dtype = tok.token_dtype
        bin_hash = BlockHasher(BLOCK_SIZE)
        bin_out = writer.open(".bin")
        bin_file = _BlockHashed(bin_out, bin_hash)
        lineage = writer.open(".jsonl")
        doc_ids_file = writer.open(".doc_ids")
        lengths, offsets, doc_ids = array("i"), array("q", [0]), []
        stats = ShardStatsAccumulator(tok.eos_id)
        pending: list[np.ndarray] = []  # tokens not yet counted: counted in batches of _STATS_BATCH (exact)
        pending_tokens = 0
        for key, payload in records:
            _, doc_id = decode_doc_key(key)
            meta, tokens = decode_doc_record(payload, dtype)
            bin_file.write(tokens.tobytes())
            lineage.write(meta + b"\n")
            doc_ids_file.write(doc_id.encode())
            offsets.append(offsets[-1] + len(meta) + 1)
            lengths.append(tokens.shape[0])
            doc_ids.append(doc_id)
            pending.append(tokens)
            pending_tokens += tokens.shape[0]
            if pending_tokens >= _STATS_BATCH:
                stats.add(np.concatenate(pending))
                pending, pending_tokens = [], 0
        if pending:
            stats.add(np.concatenate(pending))
        idx = index_bytes(np.frombuffer(lengths, dtype=np.int32), dtype)
        writer.write_bytes(".idx", idx)
        offsets_npy = npy_bytes(np.frombuffer(offsets, dtype=np.int64))
        writer.write_bytes(".offsets.npy", offsets_npy)
        numbers = stats.result()
        written = int(sum(lengths))
        failures = validation_failures(numbers, written, self.config)
        meta = {
            "name": name,
            "bucket": bucket,
            "docs": len(doc_ids),
            "tokens": written,
            "token_dtype": dtype,
            "sha256": bin_out.hexdigest(),
            "block_size": BLOCK_SIZE,  # the loader verifies what it reads, block by block
            "block_sha256": bin_hash.block_digests(),
            "idx_sha256": sha256_hex(idx),
            "lineage_sha256": lineage.hexdigest(),
            "lineage_offsets_sha256": sha256_hex(offsets_npy),
            "doc_ids": doc_ids,
            "validation": {**numbers, "failures": failures},
        }
        writer.write_bytes(".meta.json", (json.dumps(meta, sort_keys=True, indent=1) + "\n").encode())
        return {"bucket": bucket, "docs": len(doc_ids), "tokens": written, "validation": meta["validation"]}

    def _validate(self, ctx: StageContext, phase: GlobalPhase, plan: ShardPlan) -> list[Part]:
        """Collective: write ``validation.json`` from the parts' facts; stop the stage if any failed.
        Returns every shard part (in shard order) on every rank."""
        parts = phase.parts(SHARDS, plan.names) if ctx.rank == 0 else None
        parts = ctx.comm.bcast(parts, root=0)
        failed = [p for p in parts if p.facts["validation"]["failures"]]
        if ctx.rank == 0:
            atomic_write_json(
                ctx.out_dir / VALIDATION,
                {
                    "passed": not failed,
                    "limits": {
                        k: getattr(self.config, k)
                        for k in ("max_repeat_run", "min_entropy_bits", "max_top_token_share")
                    },
                    "shards": {p.name: p.facts["validation"] for p in parts},
                },
            )
        ctx.comm.Barrier()  # the report is on disk before any rank stops the job
        if failed:
            lines = [
                f"{p.name} ({p.facts['bucket']}, {p.facts['docs']} docs): "
                + "; ".join(p.facts["validation"]["failures"])
                for p in failed[:10]
            ]
            raise StageError(
                f"{len(failed)} of {len(parts)} shards failed validation (report: "
                f"{ctx.out_dir / VALIDATION}):\n  " + "\n  ".join(lines),
                every_rank=True,  # every rank reads the same parts and raises here
            )
        return parts

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
        for name in _index_names(facts["doc_index_bits"])[ctx.rank :: ctx.size]:
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
                    suffix: FileRef(f"{kind}/{p.name}{suffix}", p.files[f"{p.name}{suffix}"].removeprefix("sha256:"))
                    for suffix, kind in SHARD_FILES.items()
                },
            )
            for p in self._phase.parts(SHARDS, facts["shards"])
        )
        bits = facts["doc_index_bits"]
        index_parts = []
        for p in self._phase.parts(DOC_INDEX, _index_names(bits)):
            file = f"{p.name}{DOC_INDEX_SUFFIX}"
            ref = FileRef(f"{LINEAGE}/{DOC_INDEX_DIR}/{file}", p.files[file].removeprefix("sha256:"))
            index_parts.append((ref, p.facts["docs"]))
        handed_on = WriteShardsFacts(token_shards, PartitionedIndex("docs", bits, facts["docs"], tuple(index_parts)))
        return {
            **handed_on.to_extra(),
            "snapshot_shards": facts["shards"],
            "buckets": facts["buckets"],
            "seed": self.config.seed,
            "shuffle_key": "blake2b64('shuffle', doc_id, seed)",
        }


@dataclass(frozen=True)
class ShardPlan:
    """The shard cuts: per bucket (sorted) its histogram bits and bin -> shard number table; the names
    of the non-empty shards in order (the exchange's parts) and (bucket, number) -> part number."""

    buckets: list[str]
    tables: list[tuple[int, np.ndarray]]
    names: list[str]
    part_of: dict[tuple[int, int], int]


def _check_record(
    ctx: StageContext, doc: Document, shard: InputShard, record: int, limit: int, tokens: int
) -> None:
    """A document's shuffle record must fit in one round of the shuffle: else one line naming
    ``memory_budget_mb`` and what it would need."""
    if record > limit:
        raise StageError(
            f"document {doc.doc_id} of {shard.name} ({tokens:,} tokens): "
            f"{too_large_error(record, ctx.memory_budget_bytes)}"
        )


def _index_names(bits: int) -> list[str]:
    return [f"d{p:05d}" for p in range(1 << bits)]


def _send_doc_ids(part: Part, shard_no: int, bits: int) -> Iterator[tuple[int, bytes, bytes]]:
    """Every doc_id of one token shard, with its place, to the doc index part of its prefix."""
    for j, doc_id in enumerate(map_records(part.path(".doc_ids"), DOC_IDS_RECORD).tolist()):
        yield part_of_doc_id(doc_id, bits), doc_id, encode_doc_location(shard_no, j)


def _write_doc_index(_: int, records: Iterator[tuple[bytes, bytes]], writer: PartWriter) -> dict[str, Any]:
    """One doc index part: its records arrive sorted by doc_id and are written in batches."""
    out = writer.open(DOC_INDEX_SUFFIX)
    n = 0
    for batch in _batched(records, 1 << 16):
        ids, shards, docs = [], [], []
        for doc_id, location in batch:
            shard, doc = decode_doc_location(location)
            ids.append(doc_id)
            shards.append(shard)
            docs.append(doc)
        out.write(encode_doc_index(ids, shards, docs))
        n += len(ids)
    return {"docs": n}


def _batched(it: Iterator[Any], n: int) -> Iterator[list[Any]]:
    while batch := list(itertools.islice(it, n)):
        yield batch


STAGE = WriteShards

if __name__ == "__main__":
    sys.exit(main(STAGE))
