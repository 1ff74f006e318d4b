"""The shards step of write_shards: every document to its token shard's owner, which streams the shard.

An exchange step, one part per output token shard. A document travels as a fixed-width
:data:`SHARD_ROW` (where its tokens and lineage line are), never as its bytes; each sender first spools
its input shard's lineage lines under ``work/lineage_spool/``. The owner first copies the part's
documents in input order (:func:`stage_part`: each input file opened once, read front to back), then
streams the part in row order from that copy: ``.bin`` (hashed whole and per block), ``.idx``,
``.jsonl`` + ``.offsets.npy``, ``.doc_ids``, the metadata table and ``.meta.json`` with the validation
numbers, holding the part's rows, one document and one 4 MiB block at a time. docs/snapshot.md,
"write_shards".
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import struct
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from corpus.formats.block_layout import DOCUMENTS, DocumentBlockHasher
from corpus.formats.doc_index import DOC_ID_CHARS
from corpus.formats.docshard import iter_docs
from corpus.formats.megatron import BLOCK_SIZE, block_file_bytes, index_bytes, read_index
from corpus.formats.metadata import METADATA_SUFFIX, MetadataWriter
from corpus.formats.partitions import npy_bytes
from corpus.model import Document
from corpus.model.digest import canonical_json, sha256_hex
from corpus.model.layout import LINEAGE, MEGATRON, METADATA
from corpus.text.tokenizer import TokenizerInfo
from hpc_jobs.tokenize.stage import token_prefix
from hpc_jobs.write_shards.census import bucket_of, check_document, check_sequences, shuffle_key
from hpc_jobs.write_shards.config import WriteShardsConfig
from hpc_jobs.write_shards.cuts import ShardPlan
from hpc_jobs.write_shards.validation import ShardStatsAccumulator, validation_failures
from mpi_kernels.barrier import sleeping_bcast
from runtime.global_phase import GlobalPhase, Part, PartWriter
from runtime.input_shard import InputShard
from runtime.runner import StageContext, StageError

SHARDS = "shards"
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
#: the files of one token shard part, and where each is published (directory under the stage)
SHARD_FILES = {
    ".bin": MEGATRON,
    ".idx": MEGATRON,
    ".meta.json": MEGATRON,
    ".blocks": MEGATRON,
    ".jsonl": LINEAGE,
    ".offsets.npy": LINEAGE,
    METADATA_SUFFIX: METADATA,
}
#: where each sender spools its input shards' lineage lines for the shards step (under the work dir)
LINEAGE_SPOOL = "lineage_spool"
_SPOOL_SUFFIX = ".jsonl"
_OPEN_FILES = 64  # files a reader keeps open (staging reads one input shard at a time)
_STAGED = (".tokens-staged", ".lineage-staged")  # a part's copy of its documents, in its step directory
_ROWS_AT_ONCE = 1024  # rows turned into Python objects at a time while a shard is written
_STATS_BATCH = 1 << 16  # tokens counted at once by the validation statistics (~40 bytes each, transient)


def lineage_record(doc: Document) -> dict[str, Any]:
    """What ``corpus trace`` tells about a document: everything but its text."""
    d = doc.to_dict()
    d["text_bytes"] = len(d.pop("text").encode("utf-8"))
    return d


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


class _BlockHashed:
    """A part's .bin, written a document at a time: the part writer hashes the whole file; this adds the
    digests of each document's blocks (the documents layout: a reader of some documents hashes them only)."""

    def __init__(self, out: Any, blocks: DocumentBlockHasher) -> None:
        self.out = out
        self.blocks = blocks

    def write(self, data: bytes) -> None:
        self.blocks.add_document(data)
        self.out.write(data)


def write_token_shards(
    ctx: StageContext,
    phase: GlobalPhase,
    inputs: list[InputShard],
    plan: ShardPlan,
    tok: TokenizerInfo,
    config: WriteShardsConfig,
) -> list[Part]:
    """Collective: the shards step; returns every shard part (in shard order) on every rank."""
    t0 = time.monotonic()
    tokenize_dir = ctx.in_paths[0]
    spool = Path(ctx.work_dir) / LINEAGE_SPOOL
    # 1. clear an earlier run's spools: every run that sends writes its own
    if ctx.rank == 0:
        shutil.rmtree(spool, ignore_errors=True)
        spool.mkdir(parents=True)
    ctx.comm.Barrier()
    # 2. send every document's row to its shard's owner, which streams the shard's files
    input_no = {s.name: i for i, s in enumerate(inputs)}
    reader = DocumentReader(
        [token_prefix(tokenize_dir, s.name).with_suffix(".bin") for s in inputs],
        [spool / f"{s.name}{_SPOOL_SUFFIX}" for s in inputs],
    )
    try:
        received = phase.exchange_rows(
            SHARDS,
            plan.names,
            inputs,
            lambda shard: send_docs(
                shard,
                input_no[shard.name],
                plan,
                spool,
                tokenize_dir=tokenize_dir,
                memory_budget_bytes=ctx.memory_budget_bytes,
                tok=tok,
                config=config,
            ),
            lambda p, batches, w: write_shard(p, plan, batches, w, tok, reader, config),
            dtype=SHARD_ROW,
            order_fields=("key", "doc_id"),
        )
    finally:
        reader.close()
    # 3. remove the spools once every owner has read what it needed from them
    ctx.comm.Barrier()
    if ctx.rank == 0:
        shutil.rmtree(spool, ignore_errors=True)
    docs, nbytes = (received.records, received.bytes_received) if received else (0, 0)
    ctx.say(
        f"read and shuffled: received {docs} docs, {nbytes / 1e6:.2f} MB in {time.monotonic() - t0:.2f}s "
        "(the shards step: sending, exchange and streaming this rank's shards)"
    )
    # 4. every shard part's facts to every rank
    parts = phase.parts(SHARDS, plan.names) if ctx.rank == 0 else None
    return sleeping_bcast(ctx.comm, parts)


def send_docs(
    shard: InputShard,
    input_no: int,
    plan: ShardPlan,
    spool: Path,
    *,
    tokenize_dir: Path,
    memory_budget_bytes: int,
    tok: TokenizerInfo,
    config: WriteShardsConfig,
) -> Iterator[np.ndarray]:
    """One input shard's rows (one array): each document's part, order and location. Its lineage
    lines are spooled first, so they are on disk before the exchange ends and any owner reads them."""
    index = read_index(token_prefix(tokenize_dir, shard.name).with_suffix(".idx"))
    bucket_index = {b: i for i, b in enumerate(plan.buckets)}
    itemsize = np.dtype(tok.token_dtype).itemsize
    buckets, keys, doc_ids, lineage_at, lineage_bytes = [], [], [], [], []
    at = 0
    with open(spool / f"{shard.name}{_SPOOL_SUFFIX}", "wb") as out:
        for doc in iter_docs(shard.path):
            n = len(keys)
            if n >= index.num_docs:
                check_sequences(shard, n + 1, index.num_docs)
            line = canonical_json(lineage_record(doc)) + b"\n"
            tokens = int(index.lengths[n])
            # before any part is reduced (only after the exchange), so none is half-written
            check_document(memory_budget_bytes, doc.doc_id, shard.name, len(line) + itemsize * tokens, tokens)
            buckets.append(bucket_index[bucket_of(doc, config.bucket_of_source)])
            keys.append(shuffle_key(doc.doc_id, config.seed))
            doc_ids.append(doc.doc_id.encode())
            lineage_at.append(at)
            lineage_bytes.append(len(line))
            out.write(line)
            at += len(line)
    check_sequences(shard, len(keys), index.num_docs)
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


def write_shard(
    part_no: int,
    plan: ShardPlan,
    batches: Iterator[np.ndarray],
    writer: PartWriter,
    tok: TokenizerInfo,
    reader: DocumentReader,
    config: WriteShardsConfig,
) -> dict[str, Any]:
    """Stream one token shard in row order, each document read by location: .bin/.idx, lineage,
    doc_ids and meta, with its validation numbers."""
    name = plan.names[part_no]
    bucket = name.rsplit("-", 1)[0]
    dtype = tok.token_dtype
    itemsize = np.dtype(dtype).itemsize
    bin_hash = DocumentBlockHasher(BLOCK_SIZE)
    bin_out = writer.open(".bin")
    bin_file = _BlockHashed(bin_out, bin_hash)
    lineage = writer.open(".jsonl")
    doc_ids_file = writer.open(".doc_ids")
    table = MetadataWriter(name, writer.step_dir / f".{name}.metadata-spool")
    lengths, offsets, doc_ids = array("i"), array("q", [0]), []
    stats = ShardStatsAccumulator(tok.eos_id)
    pending: list[np.ndarray] = []  # tokens not yet counted: counted in batches of _STATS_BATCH (exact)
    pending_tokens = 0
    rows, staged = stage_part(batches, reader, itemsize, writer.step_dir, name)
    try:
        for doc_id, shard, tokens_at, n, line in _in_shard_order(iter([rows]), staged):
            data = staged.tokens(shard, tokens_at, n * itemsize)
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
    finally:
        staged.close()
        for suffix in _STAGED:
            (writer.step_dir / f".{name}{suffix}").unlink(missing_ok=True)
    if pending:
        stats.add(np.concatenate(pending))
    idx = index_bytes(np.frombuffer(lengths, dtype=np.int32), dtype)
    writer.write_bytes(".idx", idx)
    offsets_npy = npy_bytes(np.frombuffer(offsets, dtype=np.int64))
    writer.write_bytes(".offsets.npy", offsets_npy)
    metadata = writer.open(METADATA_SUFFIX)
    table.finish(metadata)
    blocks = block_file_bytes(bin_hash.block_digests())
    writer.write_bytes(".blocks", blocks)
    numbers = stats.result()
    written = int(sum(lengths))
    failures = validation_failures(numbers, written, config)
    meta = {
        "name": name,
        "bucket": bucket,
        "docs": len(doc_ids),
        "tokens": written,
        "token_dtype": dtype,
        "sha256": bin_out.hexdigest(),
        "block_size": BLOCK_SIZE,  # the loader verifies what it reads, block by block
        "block_layout": DOCUMENTS,  # each document's bytes in blocks of at most block_size
        "blocks_sha256": sha256_hex(blocks),  # the block digests themselves: the .blocks file
        "idx_sha256": sha256_hex(idx),
        "lineage_sha256": lineage.hexdigest(),
        "lineage_offsets_sha256": sha256_hex(offsets_npy),
        "metadata_sha256": metadata.hexdigest(),
        "doc_ids": doc_ids,
        "validation": {**numbers, "failures": failures},
    }
    writer.write_bytes(".meta.json", (json.dumps(meta, sort_keys=True, indent=1) + "\n").encode())
    return {"bucket": bucket, "docs": len(doc_ids), "tokens": written, "validation": meta["validation"]}


def stage_part(
    batches: Iterator[np.ndarray], reader: DocumentReader, itemsize: int, directory: Path, name: str
) -> tuple[np.ndarray, DocumentReader]:
    """Copy a part's documents (its rows, as they arrive) into two files of its own, in the order of
    their input shards and offsets, each document at its row's place: (the rows pointing into the
    copy, a reader of it). A token shard draws its documents from every input shard in shuffled order;
    read in that order, a rank would open and close input files at nearly every document (10⁵ input
    shards against a cache of 64) and read each file back and forth. Staged, each input file is
    opened once per part and read front to back, and the part is then streamed from its copy."""
    rows = np.concatenate([np.empty(0, dtype=SHARD_ROW), *batches])
    token_bytes = rows["tokens"].astype(np.int64) * itemsize
    line_bytes = rows["lineage_bytes"].astype(np.int64)
    staged = rows.copy()
    staged["shard"] = 0
    staged["tokens_at"] = np.cumsum(token_bytes) - token_bytes
    staged["lineage_at"] = np.cumsum(line_bytes) - line_bytes
    paths = [directory / f".{name}{suffix}" for suffix in _STAGED]
    order = np.lexsort((rows["tokens_at"], rows["shard"]))  # an input shard's documents front to back
    src, dst = rows[order], staged[order]
    copies = zip(
        *(src[c].tolist() for c in ("shard", "tokens_at", "lineage_at")),
        *(dst[c].tolist() for c in ("tokens_at", "lineage_at")),
        token_bytes[order].tolist(),
        line_bytes[order].tolist(),
        strict=True,
    )
    with open(paths[0], "wb") as tokens, open(paths[1], "wb") as lines:
        for shard, tokens_at, lineage_at, tokens_to, lineage_to, n, m in copies:
            os.pwrite(tokens.fileno(), reader.tokens(shard, tokens_at, n), tokens_to)
            os.pwrite(lines.fileno(), reader.lineage(shard, lineage_at, m), lineage_to)
    return staged, DocumentReader([paths[0]], [paths[1]])


def _in_shard_order(
    batches: Iterator[np.ndarray], reader: DocumentReader
) -> Iterator[tuple[bytes, int, int, int, bytes]]:
    """A part's documents in shard order, as (doc_id, input shard, tokens' byte offset, tokens, lineage
    line): by (shuffle key, doc_id) as the rows arrive; documents that share a doc_id (the same text
    and source, e.g. texts line_dedup made equal: 40,000 generated documents hold such pairs) by their
    lineage record's length as 4 little-endian bytes, then the record: an order the shards' bytes are
    fixed by (docs/snapshot.md, "Stage versions", 4). Such a group is held whole (its lineage lines) to
    sort it."""

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
