"""write_shards: the global shuffle and the snapshot's Megatron shards, validated before they count.

The global phase (``prepare``, :class:`runtime.global_phase.GlobalPhase`) has three steps, each of
whose parts is checkpointed as it completes, so a rank killed or pre-empted loses only its current part:

1. ``census`` (a map step, one part per input shard): each document's mixture bucket (its
   ``source_tier`` unless ``bucket_of_source`` maps its source), shuffle key ``shuffle_key(doc_id,
   seed)`` and token count, as fixed-width records (:data:`CENSUS_RECORD`); the part's facts hold its
   buckets' token totals. A document whose tokens alone cannot fit in a quarter of the budget stops the
   stage here with a one-line error naming ``memory_budget_mb`` and the size it needs, before anything
   is sent (its lineage record is counted too, exactly, when it is sent).
2. The cuts (collective, not a part: recomputed from the census parts): from the totals, each
   bucket's key histogram resolution (``histogram_bits``); the all-reduced token histogram over the
   bucket's key range is cut every ``shard_target_tokens`` (``shard_runs``), so every shard is a
   uniform random sample of its bucket, holds the target give or take one bin, and which documents land
   in which shard, in which order (by key), depends only on content, seed and target, never on ranks.
   The histogram is counted and all-reduced ``_CUT_CHUNK_BINS`` bins at a time (one pass over the
   rank's census parts per chunk): whole, its up to 2**24 bins took 128 MiB per array on every rank.
3. ``shards`` (an exchange step through ``exchange_rows``, one part per output token shard): every
   document goes to the owner of its shard's part as a fixed-width row (:data:`SHARD_ROW`: shuffle key,
   doc_id and where its tokens and lineage are), sorted by (shuffle key, doc_id). Not the document
   itself: tokens and lineage as variable-length records on the shuffle's bytes path cost the receiver
   its send queue, the round's copies and the Python objects of what it held, which grew with the
   corpus until the rounds filled (93 -> 128 MB per rank from 10,000 to 40,000 documents at a 64 MB
   budget); a row is 72 bytes, moved and sorted without Python work per record. Each sender first
   writes its input shard's lineage lines to a spool file (``work/lineage_spool/``, rewritten by every
   run that sends, removed after the step). The owner *streams* the part in row order, reading each
   document by location (its tokens from the tokenize stage's ``.bin``, its lineage line from the
   spool: positioned reads, nothing mapped, so nothing read stays resident): ``.bin`` (tokens, hashed
   whole and per block while written), ``.idx``, ``.jsonl`` + ``.offsets.npy`` (lineage), ``.doc_ids``
   and ``.meta.json``, with the validation numbers computed incrementally
   (:class:`ShardStatsAccumulator`). It holds one document, the shard's per-document lengths, offsets
   and doc_ids, and one 4 MiB block at a time. The parts' bytes are those the bytes-path version wrote
   (documents that share a doc_id keep its order: :func:`_in_shard_order`), so the stage version and
   the snapshot id did not change.
4. Validation: every shard's numbers go to ``validation.json``; any failure stops the stage naming the
   shard and the number (the parts stay checkpointed: a rerun fails the same way without redoing them).
5. ``doc_index`` (an exchange step, fixed-width rows, :data:`DOC_INDEX_ROW`): each shard's doc_ids,
   with (shard number, document number), go to the part of their doc_id prefix (``2**bits`` parts of
   about ``doc_index_part_docs`` records, fixed by the data); each part is written sorted
   (:mod:`corpus.formats.doc_index`).

Then every rank links the parts it owns into ``megatron/``, ``lineage/`` and ``lineage/doc_index/``, and
the manifest lists them with the digests their writers computed (``extra["token_shards"]``,
``extra["doc_index"]``): nothing is re-hashed. In a build with a base (``corpus build --base``, found through the
build layout: :class:`BaseShards`) the shards are numbered per bucket after the base candidates' and
the doc_id index counts them after the base's shards, so the delta's candidates can list both. The per-input-shard document outputs of the runner pass
the documents through unchanged.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import struct
import time
from array import array
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from corpus.formats.doc_index import DOC_ID_CHARS, encode_doc_index, parts_of_doc_ids
from corpus.formats.docshard import atomic_write_json, iter_docs
from corpus.formats.megatron import BLOCK_SIZE, BlockHasher, IndexedShard, index_bytes, read_index
from corpus.formats.metadata import METADATA_SUFFIX, MetadataWriter
from corpus.formats.partitions import map_records, npy_bytes, prefix_bits
from corpus.model import Document, Kept, Outcome
from corpus.model.digest import canonical_json, sha256_hex, stable_hash64
from corpus.model.facts import (
    FileRef,
    MissingFacts,
    PartitionedIndex,
    TokenShardListing,
    WriteShardsFacts,
    tokenizer_facts,
)
from corpus.model.layout import (
    DOC_INDEX_DIR,
    DOC_INDEX_SUFFIX,
    LINEAGE,
    MEGATRON,
    METADATA,
    base_build_of,
    build_dir_of_stage,
    candidates_dir,
    link_file,
    manifest_path,
)
from corpus.model.manifest import read_stage_manifest
from corpus.text.tokenizer import TokenizerInfo
from hpc_jobs.tokenize.stage import token_prefix
from runtime.global_phase import GlobalPhase, Part, PartWriter, global_phase_key
from runtime.runner import (
    InputShard,
    Stage,
    StageContext,
    StageError,
    assign,
)

VALIDATION = "validation.json"
_BUCKET_NAME = re.compile(r"^[A-Za-z0-9_]+$")
CENSUS, SHARDS, DOC_INDEX = "census", "shards", "doc_index"

# -- the records of the phase, one codec each --------------------------------------------------------
#: a census record: one document of an input shard (bucket = index into the part's sorted bucket list)
CENSUS_RECORD = np.dtype([("key", "<u8"), ("tokens", "<i8"), ("bucket", "<u2")])
#: a document on its way to its token shard: the part (token shard) number; its place in the shard
#: (shuffle key, then doc_id: the exchange sorts by these, then by the rest); its input shard's number
#: (in the stage's input list); its tokens in that shard's tokenize ``.bin`` (byte offset, count); its
#: lineage line in that shard's spool (byte offset, length with the newline)
SHARD_ROW = np.dtype(
    [
        ("part", "<u4"),
        ("key", "<u8"),
        ("doc_id", f"S{DOC_ID_CHARS}"),
        ("shard", "<u4"),
        ("tokens_at", "<u8"),
        ("tokens", "<u4"),
        ("lineage_at", "<u8"),
        ("lineage_bytes", "<u4"),
    ]
)
#: a doc index record on its way: the part of its doc_id prefix, then the record (sorted by doc_id, then
#: shard number and document number)
DOC_INDEX_ROW = np.dtype([("part", "<u4"), ("doc_id", f"S{DOC_ID_CHARS}"), ("shard", "<u4"), ("doc", "<u4")])
#: a part's doc_ids, in order: 32 ASCII hex characters each
DOC_IDS_RECORD = np.dtype(f"S{DOC_ID_CHARS}")
#: the files of one token shard part, and where each is published (directory under the stage)
SHARD_FILES = {
    ".bin": MEGATRON,
    ".idx": MEGATRON,
    ".meta.json": MEGATRON,
    ".jsonl": LINEAGE,
    ".offsets.npy": LINEAGE,
    METADATA_SUFFIX: METADATA,
}
#: where each sender spools its input shards' lineage lines for the shards step (under the work dir)
LINEAGE_SPOOL = "lineage_spool"
_SPOOL_SUFFIX = ".jsonl"
_OPEN_FILES = 64  # files a shard's writer keeps open to read documents by location
_ROWS_AT_ONCE = 1024  # rows turned into Python objects at a time while a shard is written
#: key histogram bins counted and all-reduced at once by the cuts (2 MiB per int64 array)
_CUT_CHUNK_BINS = 1 << 18
_STATS_BATCH = 1 << 16  # tokens counted at once by the validation statistics (~40 bytes each, transient)


@dataclass(frozen=True)
class WriteShardsConfig:
    seed: int = 0  # the build's seed unless set here
    shard_target_tokens: int = 1 << 24
    bucket_of_source: dict[str, str] = field(default_factory=dict)  # source -> bucket; default source_tier
    max_repeat_run: int = 1024  # longest run of one token id a shard may hold
    min_entropy_bits: float = 5.0  # unigram entropy of the shard's non-EOS tokens (compared in millibits)
    max_top_token_share: float = 0.25  # share of the most frequent non-EOS token
    #: about how many documents one part of the doc_id index holds (40 bytes each); the number of parts
    #: follows from the data and this, never from the rank count
    doc_index_part_docs: int = 1 << 20


def shuffle_key(doc_id: str, seed: int) -> int:
    """H(doc_id, seed): a document's place in the shuffled order, the same on every machine."""
    return stable_hash64("shuffle", doc_id, seed)


def histogram_bits(bucket_tokens: int, target: int) -> int:
    """Resolution of a bucket's key histogram: about 64 bins per shard, 2**16 to 2**24 bins (integer
    arithmetic: ``ceil(log2(64 * shards))`` is the bit length of ``64 * shards - 1``)."""
    shards = max(1, -(-bucket_tokens // target))
    return min(24, max(16, (64 * shards - 1).bit_length()))


def shard_runs(chunks: Iterable[np.ndarray], total: int, target: int) -> tuple[np.ndarray, ...]:
    """The cuts of a bucket from its key histogram, read chunk by chunk in bin order (one chunk held,
    never the up to 2**24 bins): bins are taken in key order and a new shard starts every ``target``
    tokens, so shards hold ``target`` tokens give or take one bin (the last one the rest); ``total`` is
    the histogram's sum. Returns, per run of bins of one shard, its first bin, its shard number and
    whether any of its bins holds tokens (a shard no key fell in is no shard)."""
    n_shards = max(1, -(-total // target))
    starts, numbers, filled = array("q"), array("q"), array("b")
    at = before = 0
    for hist in chunks:
        shard = np.minimum((before + np.cumsum(hist) - hist) // target, n_shards - 1)
        seg = np.concatenate(([0], np.flatnonzero(np.diff(shard)) + 1))
        seg_filled = np.logical_or.reduceat(hist > 0, seg)
        if numbers and int(shard[0]) == numbers[-1]:  # the run still open at the end of the last chunk
            filled[-1] |= int(seg_filled[0])
            seg, seg_filled = seg[1:], seg_filled[1:]
        starts.frombytes((at + seg).astype(np.int64).tobytes())
        numbers.frombytes(shard[seg].astype(np.int64).tobytes())
        filled.frombytes(seg_filled.astype(np.int8).tobytes())
        at += len(hist)
        before += int(hist.sum())
    return (
        np.frombuffer(starts, dtype=np.int64),
        np.frombuffer(numbers, dtype=np.int64),
        np.frombuffer(filled, dtype=np.int8).astype(bool),
    )


def shard_name(bucket: str, number: int) -> str:
    return f"{bucket}-{number:05d}"


@dataclass(frozen=True)
class BaseShards:
    """The shards a build's candidates inherit from its base (``corpus build --base``): the delta's
    candidates list the base's shards first, then its own, and a shard's name is written into every
    row of its metadata table (the version step joins the selection bits on it) while the doc_id index
    addresses shards by their place in that list. So a delta's shards are numbered, per bucket, after
    the highest number of that bucket in the base's candidates (``next_number``), and its doc_id index
    counts its shards after the base's ``shards``; ``label`` is the base candidates' id."""

    label: str
    shards: int
    next_number: dict[str, int]

    @classmethod
    def of_build(cls, stage_directory: Path) -> BaseShards | None:
        """The base of the build this stage directory belongs to, found through the build layout (never
        a config value, so where builds live enters no config hash); None without a base."""
        build = build_dir_of_stage(stage_directory)
        found = base_build_of(build) if build is not None else None
        if found is None:
            return None
        base_dir, label = found
        listing = manifest_path(candidates_dir(base_dir))
        try:
            candidates = json.loads(listing.read_text())
        except FileNotFoundError:
            raise StageError(
                f"the build's base {base_dir} has no candidates ({listing})", every_rank=True
            ) from None
        if candidates["snapshot_id"] != label:
            raise StageError(
                f"the candidates of the build's base {base_dir} are {candidates['snapshot_id']}, the build was "
                f"forked from {label}: the base changed; rebuild against it into a new directory",
                every_rank=True,
            )
        after: dict[str, int] = {}
        for shard in candidates["shards"]:
            bucket, number = Path(shard["path"]).name.removesuffix(".bin").rsplit("-", 1)
            after[bucket] = max(after.get(bucket, 0), int(number) + 1)
        return cls(label, len(candidates["shards"]), dict(sorted(after.items())))

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "shards": self.shards, "next_number": self.next_number}


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
    counts = np.bincount(content) if content.shape[0] else np.zeros(0, np.int64)
    return {
        "tokens": n,
        "max_repeat_run": max_run,
        "max_repeat_token": run_token,
        **token_distribution(counts),
    }


#: fractional bits of the fixed-point base-2 logarithms the entropy is computed with
_LOG2_BITS = 32
#: working bits of :func:`log2_fixed` (the squarings' truncation stays below its last 32 bits)
_LOG2_WORK = 64


def log2_fixed(n: int) -> int:
    """``log2(n)`` for an integer ``n >= 1`` in fixed point with ``_LOG2_BITS`` fractional bits (less
    than one unit of the last place below the exact value), by integer arithmetic only (bit by bit,
    squaring the mantissa): the same value on every machine, whatever its vector unit or libm."""
    k = n.bit_length() - 1
    x = (n << _LOG2_WORK) >> k  # the mantissa n / 2**k in [1, 2), _LOG2_WORK fractional bits
    two = 2 << _LOG2_WORK
    result = k << _LOG2_BITS
    for bit in range(_LOG2_BITS - 1, -1, -1):
        x = (x * x) >> _LOG2_WORK
        if x >= two:
            x >>= 1
            result |= 1 << bit
    return result


def entropy_millibits(counts: Iterable[int]) -> int:
    """The unigram entropy (bits) of a distribution given by its integer counts, in integer millibits
    (rounded half up): ``H = log2(N) - sum(c log2 c) / N`` with ``N = sum(c)``, in exact integer
    arithmetic on the fixed-point logarithms of :func:`log2_fixed` (one per distinct count). No float
    takes part, so the number -- which enters the shard's digested ``.meta.json`` -- has the same value
    on every CPU (a numpy ``log2`` and float sum gave last bits that depend on the vector unit)."""
    multiplicity = Counter(c for c in counts if c > 0)
    total = sum(c * m for c, m in multiplicity.items())
    if not total:
        return 0
    weighted = sum(c * m * log2_fixed(c) for c, m in sorted(multiplicity.items()))  # sum of c log2 c
    numerator = 1000 * (total * log2_fixed(total) - weighted)  # 1000 N H, in units of 2**-_LOG2_BITS
    denominator = total << _LOG2_BITS
    return max(0, (2 * numerator + denominator) // (2 * denominator))


def token_distribution(counts: np.ndarray) -> dict[str, Any]:
    """From a shard's per-token-id counts of its non-EOS tokens (a bincount): the entropy in integer
    millibits, the most frequent token (the smallest id of the most frequent) and its share of the
    tokens, ``top / content`` as one correctly rounded division of Python integers, rounded to 6
    decimals (the same double on every machine)."""
    content = int(counts.sum()) if counts.shape[0] else 0
    if not content:
        return {"entropy_millibits": 0, "top_token": -1, "top_token_share": 0.0}
    top = int(np.argmax(counts))
    return {
        "entropy_millibits": entropy_millibits(counts.tolist()),
        "top_token": top,
        "top_token_share": round(int(counts[top]) / content, 6),
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
        return {
            "tokens": self.n,
            "max_repeat_run": max_run if self.n else 0,
            "max_repeat_token": run_token if self.n else -1,
            **token_distribution(self.counts),
        }


class _BlockHashed:
    """A part's .bin: the part writer hashes the whole file; this adds the per-block digests."""

    def __init__(self, out: Any, blocks: BlockHasher) -> None:
        self.out = out
        self.blocks = blocks

    def write(self, data: bytes) -> None:
        self.blocks.update(data)
        self.out.write(data)


def as_written(threshold: float) -> Fraction:
    """A threshold of the config as its decimal spelling says (5.7 is 57/10, not the double just above
    it), so the stored millibits compare with it exactly."""
    return Fraction(str(threshold))


def validation_failures(stats: dict[str, Any], index_tokens: int, cfg: WriteShardsConfig) -> list[str]:
    failures = []
    if stats["tokens"] != index_tokens:
        failures.append(f"token count {stats['tokens']} != {index_tokens} in the index")
    if stats["max_repeat_run"] > cfg.max_repeat_run:
        failures.append(
            f"token {stats['max_repeat_token']} repeats {stats['max_repeat_run']} times in a row "
            f"(max_repeat_run {cfg.max_repeat_run})"
        )
    if Fraction(stats["entropy_millibits"], 1000) < as_written(cfg.min_entropy_bits):
        failures.append(
            f"token entropy {stats['entropy_millibits'] / 1000:.3f} bits < min_entropy_bits "
            f"{cfg.min_entropy_bits}"
        )
    if stats["top_token_share"] > cfg.max_top_token_share:
        failures.append(
            f"top token {stats['top_token']} is {100 * stats['top_token_share']:.1f}% of tokens "
            f"(max_top_token_share {100 * cfg.max_top_token_share:.1f}%)"
        )
    return failures


class WriteShards(Stage):
    name = "write_shards"
    # 4: the global phase in checkpointed parts; the doc_id index range-partitioned
    # 5: each shard's per-document metadata table (Parquet), the input of versions
    # 6: validation's entropy in integer millibits (``entropy_millibits``, integer arithmetic on the
    #    token counts) instead of a float from numpy's log2, whose last bits depend on the CPU
    # 7: the metadata's licence_class in the classes of corpus.select.licences 2 (strong/weak copyleft, none)
    # 8: in a build with a base, shards numbered per bucket after the base's and the doc_id index's shard
    #    numbers counted after the base's shards (BaseShards); without a base the same bytes as 7
    version = "8"
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
        _check_sequences(shard, n, len(tokens))

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        """census (map) -> cuts -> shards (exchange) -> validation -> doc_index (exchange) -> publish."""
        tok = self._tokenizer_info(ctx)
        base = self._base = BaseShards.of_build(ctx.out_dir)
        on_base = {"base": base.to_dict()} if base is not None else {}  # no key without a base: as before
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
        phase.map(CENSUS, inputs, lambda shard, w: self._census(ctx, shard, w, tok))
        # 2. the cuts: which shard of its bucket each key falls in
        plan = self._plan(ctx, phase, inputs)
        # 3. shards: every document's row to its shard's owner, which streams the shard's files
        t0 = time.monotonic()
        spool = Path(ctx.work_dir) / LINEAGE_SPOOL
        if ctx.rank == 0:  # an earlier run's spools: every run that sends writes its own
            shutil.rmtree(spool, ignore_errors=True)
            spool.mkdir(parents=True)
        ctx.comm.Barrier()
        input_no = {s.name: i for i, s in enumerate(inputs)}
        reader = DocumentReader(
            [token_prefix(ctx.in_paths[0], s.name).with_suffix(".bin") for s in inputs],
            [spool / f"{s.name}{_SPOOL_SUFFIX}" for s in inputs],
        )
        try:
            received = phase.exchange_rows(
                SHARDS,
                plan.names,
                inputs,
                lambda shard: self._send_docs(ctx, input_no[shard.name], shard, plan, spool, tok),
                lambda p, batches, w: self._write_shard(p, plan, batches, w, tok, reader),
                dtype=SHARD_ROW,
                order_fields=("key", "doc_id"),
            )
        finally:
            reader.close()
        ctx.comm.Barrier()  # every owner has read what it needed from the spools
        if ctx.rank == 0:
            shutil.rmtree(spool, ignore_errors=True)
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
        first = base.shards if base is not None else 0  # the base's shards come first in the candidates
        shard_no = {n: first + i for i, n in enumerate(plan.names)}
        phase.exchange_rows(
            DOC_INDEX,
            index_names,
            shard_parts,
            lambda part: _doc_index_rows(part, shard_no[part.name], bits),
            _write_doc_index,
            dtype=DOC_INDEX_ROW,
            order_fields=("doc_id",),
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
        """One input shard's census part; refuses a document whose tokens alone exceed what the rank
        writing its shard may hold of one document."""
        itemsize = np.dtype(tok.token_dtype).itemsize
        keys, tokens, names = [], [], []
        for doc, toks in self._documents(ctx, shard):
            # the tokens alone (the lineage line is counted too, exactly, when the document is sent)
            _check_document(ctx, doc.doc_id, shard.name, itemsize * toks.shape[0], toks.shape[0])
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
        """Collective: the shard cuts from the census parts (an all-reduced histogram per bucket, in
        chunks of ``_CUT_CHUNK_BINS`` bins)."""
        totals = None
        if ctx.rank == 0:
            c: Counter = Counter()
            for p in phase.parts(CENSUS, [s.name for s in inputs]):
                c.update(p.facts["tokens"])
            totals = dict(sorted(c.items()))
        totals = ctx.comm.bcast(totals, root=0)
        buckets = sorted(totals)
        mine = [phase.part(CENSUS, s.name) for s in assign(inputs, ctx.rank, ctx.size)]
        after = self._base.next_number if self._base is not None else {}
        runs, names = [], []
        for bucket in buckets:
            bits = histogram_bits(totals[bucket], self.config.shard_target_tokens)
            starts, numbers, filled = shard_runs(
                _histogram(ctx, mine, bucket, bits), totals[bucket], self.config.shard_target_tokens
            )
            parts = np.full(len(starts), -1, dtype=np.int64)
            for i in np.flatnonzero(filled).tolist():
                parts[i] = len(names)
                names.append(shard_name(bucket, after.get(bucket, 0) + int(numbers[i])))
            runs.append((bits, starts, parts))
        return ShardPlan(buckets, runs, names)

    def _send_docs(
        self,
        ctx: StageContext,
        input_no: int,
        shard: InputShard,
        plan: ShardPlan,
        spool: Path,
        tok: TokenizerInfo,
    ) -> Iterator[np.ndarray]:
        """One input shard's rows (one array): each document's part, order and location. Its lineage
        lines are spooled first, so they are on disk before the exchange ends and any owner reads them."""
        index = read_index(token_prefix(ctx.in_paths[0], shard.name).with_suffix(".idx"))
        bucket_index = {b: i for i, b in enumerate(plan.buckets)}
        itemsize = np.dtype(tok.token_dtype).itemsize
        buckets, keys, doc_ids, lineage_at, lineage_bytes = [], [], [], [], []
        at = 0
        with open(spool / f"{shard.name}{_SPOOL_SUFFIX}", "wb") as out:
            for doc in iter_docs(shard.path):
                n = len(keys)
                if n >= index.num_docs:
                    _check_sequences(shard, n + 1, index.num_docs)
                line = canonical_json(lineage_record(doc)) + b"\n"
                tokens = int(index.lengths[n])
                # before any part is reduced (only after the exchange), so none is half-written
                _check_document(ctx, doc.doc_id, shard.name, len(line) + itemsize * tokens, tokens)
                buckets.append(bucket_index[self.bucket_of(doc)])
                keys.append(shuffle_key(doc.doc_id, self.config.seed))
                doc_ids.append(doc.doc_id.encode())
                lineage_at.append(at)
                lineage_bytes.append(len(line))
                out.write(line)
                at += len(line)
        _check_sequences(shard, len(keys), index.num_docs)
        rows = np.empty(len(keys), dtype=SHARD_ROW)
        rows["key"] = np.array(keys, dtype=np.uint64)
        rows["part"] = plan.parts_of(np.array(buckets, dtype=np.int64), rows["key"])
        rows["doc_id"] = doc_ids
        rows["shard"] = input_no
        rows["tokens_at"] = index.offsets
        rows["tokens"] = index.lengths
        rows["lineage_at"] = lineage_at
        rows["lineage_bytes"] = lineage_bytes
        yield rows

    def _write_shard(
        self,
        part_no: int,
        plan: ShardPlan,
        batches: Iterator[np.ndarray],
        writer: PartWriter,
        tok: dict,
        reader: DocumentReader,
    ) -> dict[str, Any]:
        """Stream one token shard in row order, each document read by location: .bin/.idx, lineage,
        doc_ids and meta, with its validation numbers."""
        name = plan.names[part_no]
        bucket = name.rsplit("-", 1)[0]
        dtype = tok.token_dtype
        itemsize = np.dtype(dtype).itemsize
        bin_hash = BlockHasher(BLOCK_SIZE)
        bin_out = writer.open(".bin")
        bin_file = _BlockHashed(bin_out, bin_hash)
        lineage = writer.open(".jsonl")
        doc_ids_file = writer.open(".doc_ids")
        table = MetadataWriter(name, writer.step_dir / f".{name}.metadata-spool")
        lengths, offsets, doc_ids = array("i"), array("q", [0]), []
        stats = ShardStatsAccumulator(tok.eos_id)
        pending: list[np.ndarray] = []  # tokens not yet counted: counted in batches of _STATS_BATCH (exact)
        pending_tokens = 0
        for doc_id, shard, tokens_at, n, line in _in_shard_order(batches, reader):
            data = reader.tokens(shard, tokens_at, n * itemsize)
            bin_file.write(data)
            lineage.write(line)
            table.add(json.loads(line), n)
            doc_ids_file.write(doc_id)
            offsets.append(offsets[-1] + len(line))
            lengths.append(n)
            doc_ids.append(doc_id.decode())
            pending.append(np.frombuffer(data, dtype=dtype))
            pending_tokens += n
            if pending_tokens >= _STATS_BATCH:
                stats.add(np.concatenate(pending))
                pending, pending_tokens = [], 0
        if pending:
            stats.add(np.concatenate(pending))
        idx = index_bytes(np.frombuffer(lengths, dtype=np.int32), dtype)
        writer.write_bytes(".idx", idx)
        offsets_npy = npy_bytes(np.frombuffer(offsets, dtype=np.int64))
        writer.write_bytes(".offsets.npy", offsets_npy)
        metadata = writer.open(METADATA_SUFFIX)
        table.finish(metadata)
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
            "metadata_sha256": metadata.hexdigest(),
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
        for p in self._phase.parts(DOC_INDEX, _index_names(bits)):
            file = f"{p.name}{DOC_INDEX_SUFFIX}"
            ref = FileRef(f"{LINEAGE}/{DOC_INDEX_DIR}/{file}", p.files[file].removeprefix("sha256:"))
            index_parts.append((ref, p.facts["docs"]))
        handed_on = WriteShardsFacts(
            token_shards, PartitionedIndex("docs", bits, facts["docs"], tuple(index_parts))
        )
        return {
            **handed_on.to_extra(),
            "snapshot_shards": facts["shards"],
            "buckets": facts["buckets"],
            "seed": self.config.seed,
            "shuffle_key": "blake2b64('shuffle', doc_id, seed)",
            **({"base": self._base.to_dict()} if self._base is not None else {}),
        }


@dataclass(frozen=True)
class ShardPlan:
    """The shard cuts: per bucket (sorted) its histogram bits, the first bin of each run of bins of one
    shard and the run's part number (-1: a shard no key fell in, which is no shard); the names of the
    non-empty shards in order (the exchange's parts)."""

    buckets: list[str]
    runs: list[tuple[int, np.ndarray, np.ndarray]]
    names: list[str]

    def parts_of(self, buckets: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """The part number of each document, from its bucket's number and its shuffle key."""
        parts = np.empty(len(keys), dtype=np.int64)
        for b in np.unique(buckets).tolist():
            bits, starts, run_parts = self.runs[b]
            sel = buckets == b
            bins = (keys[sel] >> np.uint64(64 - bits)).astype(np.int64)
            parts[sel] = run_parts[np.searchsorted(starts, bins, side="right") - 1]
        return parts


def _histogram(ctx: StageContext, mine: list[Part | None], bucket: str, bits: int) -> Iterator[np.ndarray]:
    """Collective: a bucket's token histogram over its ``2**bits`` key bins, summed over every rank's
    census parts, ``_CUT_CHUNK_BINS`` bins at a time (each chunk reads this rank's parts once more)."""
    for lo in range(0, 1 << bits, _CUT_CHUNK_BINS):
        hist = np.zeros(min(_CUT_CHUNK_BINS, (1 << bits) - lo), dtype=np.int64)
        for part in mine:  # one census part in memory at a time
            assert part is not None
            local = part.facts["buckets"]
            if bucket not in local:
                continue
            rec = map_records(part.path(".census"), CENSUS_RECORD)
            bins = (rec["key"] >> np.uint64(64 - bits)).astype(np.int64)
            sel = (rec["bucket"] == local.index(bucket)) & (bins >= lo) & (bins < lo + len(hist))
            np.add.at(hist, bins[sel] - lo, rec["tokens"][sel])
        total = np.empty_like(hist)
        ctx.comm.Allreduce(hist, total)
        yield total


def _check_document(ctx: StageContext, doc_id: str, shard: str, nbytes: int, tokens: int) -> None:
    """The rank writing a shard holds one document (its tokens and lineage line), which must fit in a
    quarter of the budget: else one line naming ``memory_budget_mb`` and what it would need."""
    if nbytes > ctx.memory_budget_bytes // 4:
        raise StageError(
            f"document {doc_id} of {shard} ({tokens:,} tokens): memory_budget_mb = "
            f"{ctx.memory_budget_bytes / (1 << 20):.4g} is too small for a document of {nbytes:,} bytes "
            "(tokens and lineage): the rank writing its shard holds one document, which must fit in a "
            f"quarter of the budget, so it needs memory_budget_mb >= {max(1, math.ceil(4 * nbytes / (1 << 20)))}"
        )


def _check_sequences(shard: InputShard, docs: int, sequences: int) -> None:
    """An input shard and its tokens in the tokenize stage must hold the same documents."""
    if docs != sequences or (shard.records >= 0 and docs != shard.records):
        raise StageError(
            f"{shard.name}: {shard.records} documents but {sequences} token sequences in "
            f"the tokenize stage; rerun tokenize"
        )


class DocumentReader:
    """A document's tokens (from its input shard's tokenize ``.bin``) and lineage line (from the shard's
    spool), read by location with positioned reads: nothing is mapped, so what was read does not stay
    resident, and at most ``_OPEN_FILES`` files are open (the least recently used is closed), however
    many input shards a token shard draws from."""

    def __init__(self, tokens: list[Path], lineage: list[Path]) -> None:
        self._paths = (tokens, lineage)
        self._open: OrderedDict[tuple[int, int], int] = OrderedDict()

    def tokens(self, shard: int, at: int, nbytes: int) -> bytes:
        return self._read(0, shard, at, nbytes)

    def lineage(self, shard: int, at: int, nbytes: int) -> bytes:
        return self._read(1, shard, at, nbytes)

    def _read(self, kind: int, shard: int, at: int, nbytes: int) -> bytes:
        fd = self._open.pop((kind, shard), None)
        if fd is None:
            if len(self._open) >= _OPEN_FILES:
                os.close(self._open.popitem(last=False)[1])
            fd = os.open(self._paths[kind][shard], os.O_RDONLY)
        self._open[(kind, shard)] = fd
        data = os.pread(fd, nbytes, at)
        if len(data) != nbytes:
            raise StageError(
                f"{self._paths[kind][shard]}: {nbytes} bytes at {at} asked, {len(data)} read: the file "
                "changed during the stage; rerun it"
            )
        return data

    def close(self) -> None:
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()


def _index_names(bits: int) -> list[str]:
    return [f"d{p:05d}" for p in range(1 << bits)]


def _in_shard_order(
    batches: Iterator[np.ndarray], reader: DocumentReader
) -> Iterator[tuple[bytes, int, int, int, bytes]]:
    """A part's documents in shard order, as (doc_id, input shard, tokens' byte offset, tokens, lineage
    line): by (shuffle key, doc_id) as the rows arrive; documents that share a doc_id (the same text
    and source, e.g. texts line_dedup made equal: 40,000 generated documents hold such pairs) by their
    lineage record's length as 4 little-endian bytes, then the record, which is the order the bytes-path
    shuffle of stage version 4 gave them, so the shards' bytes are unchanged. Such a group is held whole
    (its lineage lines) to sort it."""

    def rows() -> Iterator[tuple[Any, ...]]:
        for batch in batches:
            for start in range(0, len(batch), _ROWS_AT_ONCE):  # Python objects for a slice of rows only
                yield from batch[start : start + _ROWS_AT_ONCE].tolist()

    for _, group in itertools.groupby(rows(), key=itemgetter(1, 2)):
        docs = [
            (doc_id, shard, tokens_at, n, reader.lineage(shard, lineage_at, line_bytes))
            for _, _, doc_id, shard, tokens_at, n, lineage_at, line_bytes in group
        ]
        if len(docs) > 1:
            docs.sort(key=lambda d: (struct.pack("<I", len(d[4]) - 1), d[4]))
        yield from docs


def _doc_index_rows(part: Part, shard_no: int, bits: int) -> Iterator[np.ndarray]:
    """Every doc_id of one token shard, with its place, to the doc index part of its prefix."""
    doc_ids = map_records(part.path(".doc_ids"), DOC_IDS_RECORD)
    rows = np.empty(len(doc_ids), dtype=DOC_INDEX_ROW)
    rows["part"] = parts_of_doc_ids(doc_ids, bits)
    rows["doc_id"] = doc_ids
    rows["shard"] = shard_no
    rows["doc"] = np.arange(len(doc_ids))
    yield rows


def _write_doc_index(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
    """One doc index part: its rows arrive sorted by doc_id and are written batch by batch."""
    out = writer.open(DOC_INDEX_SUFFIX)
    n = 0
    for rows in batches:
        out.write(encode_doc_index(rows["doc_id"], rows["shard"], rows["doc"]))
        n += len(rows)
    return {"docs": n}


STAGE = WriteShards
