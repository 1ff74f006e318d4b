"""The census step of write_shards: each document's bucket, shuffle key and token count.

A map step, one part per input shard: fixed-width :data:`CENSUS_RECORD` rows, the part's facts its
buckets' token totals. A document too large for the rank that will write its shard stops the stage
here, before anything is sent. docs/snapshot.md, "write_shards".
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from corpus.formats.docshard import iter_docs
from corpus.formats.megatron import IndexedShard
from corpus.model import Document
from corpus.model.digest import stable_hash64
from corpus.text.tokenizer import TokenizerInfo
from hpc_jobs.tokenize.stage import token_prefix
from hpc_jobs.write_shards.config import WriteShardsConfig
from runtime.global_phase import PartWriter
from runtime.input_shard import InputShard
from runtime.runner import StageError

CENSUS = "census"
BUCKET_NAME = re.compile(r"^[A-Za-z0-9_]+$")
#: a census record: one document of an input shard (bucket = index into the part's sorted bucket list)
CENSUS_RECORD = np.dtype([("key", "<u8"), ("tokens", "<i8"), ("bucket", "<u2")])


def shuffle_key(doc_id: str, seed: int) -> int:
    """H(doc_id, seed): a document's place in the shuffled order, the same on every machine."""
    return stable_hash64("shuffle", doc_id, seed)


def bucket_of(doc: Document, bucket_of_source: dict[str, str]) -> str:
    """A document's mixture bucket: its source's mapped bucket, else its tier; a name fit for a file."""
    bucket = bucket_of_source.get(doc.source) or doc.source_tier or "default"
    if not BUCKET_NAME.match(bucket):
        raise StageError(
            f"document {doc.doc_id}: bucket {bucket!r} is not a valid name; map source "
            f"{doc.source!r} in [write_shards] bucket_of_source"
        )
    return bucket


def check_document(memory_budget_bytes: int, doc_id: str, shard: str, nbytes: int, tokens: int) -> None:
    """The rank writing a shard holds one document (its tokens and lineage line), which must fit in a
    quarter of the budget: else one line naming ``memory_budget_mb`` and what it would need."""
    if nbytes > memory_budget_bytes // 4:
        raise StageError(
            f"document {doc_id} of {shard} ({tokens:,} tokens): memory_budget_mb = "
            f"{memory_budget_bytes / (1 << 20):.4g} is too small for a document of {nbytes:,} bytes "
            "(tokens and lineage): the rank writing its shard holds one document, which must fit in a "
            f"quarter of the budget, so it needs memory_budget_mb >= {max(1, math.ceil(4 * nbytes / (1 << 20)))}"
        )


def check_sequences(shard: InputShard, docs: int, sequences: int) -> None:
    """An input shard and its tokens in the tokenize stage must hold the same documents."""
    if docs != sequences or (shard.records >= 0 and docs != shard.records):
        raise StageError(
            f"{shard.name}: {shard.records} documents but {sequences} token sequences in "
            f"the tokenize stage; rerun tokenize"
        )


def documents(tokenize_dir: Path, shard: InputShard) -> Iterator[tuple[Document, np.ndarray]]:
    """An input shard's documents with their tokens (the tokenize stage's sequences, in order)."""
    tokens = IndexedShard(token_prefix(tokenize_dir, shard.name))
    n = 0
    for doc in iter_docs(shard.path):
        if n >= len(tokens):
            n += 1
            break
        yield doc, tokens.document(n)
        n += 1
    check_sequences(shard, n, len(tokens))


def write_census_part(
    shard: InputShard,
    writer: PartWriter,
    *,
    tokenize_dir: Path,
    memory_budget_bytes: int,
    tok: TokenizerInfo,
    config: WriteShardsConfig,
) -> dict[str, Any]:
    """One input shard's census part; refuses a document whose tokens alone exceed what the rank
    writing its shard may hold of one document."""
    itemsize = np.dtype(tok.token_dtype).itemsize
    keys, tokens, names = [], [], []
    for doc, toks in documents(tokenize_dir, shard):
        # the tokens alone (the lineage line is counted too, exactly, when the document is sent)
        check_document(memory_budget_bytes, doc.doc_id, shard.name, itemsize * toks.shape[0], toks.shape[0])
        keys.append(shuffle_key(doc.doc_id, config.seed))
        tokens.append(int(toks.shape[0]))
        names.append(bucket_of(doc, config.bucket_of_source))
    buckets = sorted(set(names))
    rec = np.empty(len(keys), dtype=CENSUS_RECORD)
    rec["key"] = np.array(keys, dtype=np.uint64)
    rec["tokens"] = tokens
    index = {b: i for i, b in enumerate(buckets)}
    rec["bucket"] = [index[b] for b in names]
    writer.write_bytes(".census", rec.tobytes())
    totals = {b: int(rec["tokens"][rec["bucket"] == i].sum()) for i, b in enumerate(buckets)}
    return {"buckets": buckets, "tokens": totals, "docs": len(keys)}
