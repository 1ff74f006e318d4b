"""write_shards: the global shuffle and the snapshot's Megatron shards, validated before they count.

Global phase (``prepare``, collective):

1. Every rank reads its tokenize-stage shards and totals tokens per mixture bucket (the document's
   ``source_tier`` unless ``bucket_of_source`` maps its source); an all-gather gives every rank the
   totals, hence the number of shards of each bucket: ``ceil(tokens / shard_target_tokens)``.
2. Each document gets ``shuffle_key(doc_id, seed)``, a 64-bit hash. An all-reduced histogram of
   tokens over each bucket's key range (2**16+ bins) cuts the range into shards of
   ``shard_target_tokens`` (give or take one bin; the last shard takes the rest). So every shard is a
   uniform random sample of its bucket, homogeneous by bucket, and which documents land in which shard
   (and in which order: by key) depends only on content, seed and target, never on the rank count.
3. ``mpi_kernels.shuffle.shuffle_by_key`` routes every document (lineage record + tokens) to the rank
   that owns its shard, sorted by (bucket, shard, shuffle key, doc_id); that rank writes the shard:
   ``megatron/<bucket>-<NNNNN>.bin/.idx`` (Megatron-LM's indexed dataset), ``.meta.json`` (bucket,
   counts, doc_ids in order, sha256s, validation numbers) and ``lineage/<shard>.jsonl`` plus
   ``.offsets.npy`` (each document's metadata, for ``corpus trace``).
4. Every shard is validated by reading it back: token count against its index, longest run of one
   repeated token, unigram entropy and top-token share. Any failure stops the stage with a report
   (``validation.json``) naming the shard and the number that failed.

The phase is checkpointed as a whole (``megatron/_complete.json`` records its key): shards need the
whole shuffle, so a rerun after a crash redoes it and gets byte-identical files. The per-input-shard
document outputs of the runner then pass the documents through unchanged.
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
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from corpus.config import config_to_dict
from corpus.decont.corpus_index import npy_bytes
from corpus.digest import canonical_json, file_sha256, json_digest, sha256_hex, stable_hash64
from corpus.docshard import atomic_write_bytes, atomic_write_json, iter_docs
from corpus.layout import LINEAGE, MEGATRON, SHARD_LIST
from corpus.manifests import read_stage_manifest
from corpus.megatron import BLOCK_SIZE, IndexedShard, block_digests, write_indexed_shard
from corpus.model import Document, Kept, Outcome
from hpc_jobs.tokenize import token_prefix
from mpi_kernels.shuffle import shuffle_by_key
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
_KEY = struct.Struct(">HIQ")  # bucket index, shard number, shuffle key; then the doc_id bytes


@dataclass(frozen=True)
class WriteShardsConfig:
    seed: int = 0  # the build's seed unless set here
    shard_target_tokens: int = 1 << 24
    bucket_of_source: dict[str, str] = field(default_factory=dict)  # source -> bucket; default source_tier
    max_repeat_run: int = 1024  # longest run of one token id a shard may hold
    min_entropy_bits: float = 5.0  # unigram entropy of the shard's non-EOS tokens
    max_top_token_share: float = 0.25  # share of the most frequent non-EOS token


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
    version = "3"  # 3: block digests of each .bin in its .meta.json
    Config = WriteShardsConfig
    artifact_kinds = (MEGATRON, LINEAGE)

    def __init__(self, config: WriteShardsConfig) -> None:
        super().__init__(config)
        if config.shard_target_tokens < 1:
            raise StageError(
                f"[write_shards] shard_target_tokens must be positive, got {config.shard_target_tokens}"
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
    def _tokenizer_info(self, ctx: StageContext) -> dict[str, Any]:
        m = read_stage_manifest(ctx.in_paths[0])
        if m is None or "tokenizer" not in m.extra:
            raise StageError(f"write_shards reads a completed tokenize stage; {ctx.in_paths[0]} is not one")
        return m.extra["tokenizer"]

    def phase_key(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        return json_digest(
            {
                "version": self.version,
                "config": config_to_dict(self.config),
                "inputs": sorted((s.name, s.sha256) for s in inputs),
                "tokenizer": self._tokenizer_info(ctx),
            }
        )

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        comm, out = ctx.comm, ctx.out_dir
        key = self.phase_key(ctx, inputs)
        done = None
        if ctx.rank == 0:
            p = out / MEGATRON / SHARD_LIST
            done = p.exists() and json.loads(p.read_text()).get("key") == key
            if not done:
                for d in (
                    out / MEGATRON,
                    out / LINEAGE,
                    ctx.work_dir / "spill",
                ):  # incl. a killed run's spill
                    shutil.rmtree(d, ignore_errors=True)
                (out / VALIDATION).unlink(missing_ok=True)
        if comm.bcast(done, root=0):
            return key
        comm.Barrier()
        tok = self._tokenizer_info(ctx)
        mine = assign(inputs, ctx.rank, ctx.size)
        in_dir = ctx.in_paths[0]

        # pass 1: every local document's bucket, shuffle key and token count (compact arrays per shard)
        key_parts, bucket_parts, token_parts = [], [], []
        for shard in mine:
            lengths = IndexedShard(token_prefix(in_dir, shard.name)).index.lengths
            names, keys = [], []
            for doc in itertools.islice(iter_docs(shard.path), lengths.shape[0]):
                names.append(self.bucket_of(doc))
                keys.append(shuffle_key(doc.doc_id, self.config.seed))
            key_parts.append(np.array(keys, dtype=np.uint64))
            bucket_parts.append(np.array(names, dtype=str))
            token_parts.append(lengths[: len(keys)].astype(np.int64))
        keys = np.concatenate(key_parts) if key_parts else np.empty(0, np.uint64)
        doc_buckets = np.concatenate(bucket_parts) if bucket_parts else np.empty(0, str)
        doc_tokens = np.concatenate(token_parts) if token_parts else np.empty(0, np.int64)
        local = {str(b): int(doc_tokens[doc_buckets == b].sum()) for b in np.unique(doc_buckets)}
        totals: Counter = Counter()
        for c in comm.allgather(local):
            totals.update(c)
        buckets = sorted(totals)
        bucket_index = {b: i for i, b in enumerate(buckets)}
        # the shard cuts: a global token histogram over each bucket's key range, cut every target tokens
        cuts = []
        for b in buckets:
            bits = histogram_bits(totals[b], self.config.shard_target_tokens)
            hist = np.zeros(1 << bits, dtype=np.int64)
            sel = doc_buckets == b
            np.add.at(hist, (keys[sel] >> np.uint64(64 - bits)).astype(np.int64), doc_tokens[sel])
            total_hist = np.empty_like(hist)
            comm.Allreduce(hist, total_hist)
            cuts.append((bits, shard_of_bins(total_hist, self.config.shard_target_tokens)))
        del keys, doc_buckets, doc_tokens, key_parts, bucket_parts, token_parts
        base = [0, *itertools.accumulate(int(c.max()) + 1 for _, c in cuts)][:-1]

        def records() -> Iterator[tuple[bytes, bytes]]:
            for shard in mine:
                tokens = IndexedShard(token_prefix(in_dir, shard.name))
                n_docs = 0
                for i, doc in enumerate(iter_docs(shard.path)):
                    if i >= len(tokens):
                        break
                    b = bucket_index[self.bucket_of(doc)]
                    skey = shuffle_key(doc.doc_id, self.config.seed)
                    bits, shard_table = cuts[b]
                    number = int(shard_table[skey >> (64 - bits)])
                    rkey = _KEY.pack(b, number, skey) + doc.doc_id.encode()
                    meta = canonical_json(lineage_record(doc))
                    yield rkey, struct.pack("<I", len(meta)) + meta + np.asarray(tokens.document(i)).tobytes()
                    n_docs += 1
                if n_docs != len(tokens) or n_docs != shard.records:
                    raise StageError(
                        f"{shard.name}: {n_docs} documents but {len(tokens)} token sequences in "
                        f"the tokenize stage; rerun tokenize"
                    )

        t0 = time.monotonic()
        received = shuffle_by_key(
            comm,
            records(),
            partition_of=lambda k: base[_KEY.unpack_from(k)[0]] + _KEY.unpack_from(k)[1],
            memory_budget_bytes=ctx.memory_budget_bytes,
            spill_dir=ctx.work_dir / "spill",
        )
        dt = time.monotonic() - t0
        _say(
            ctx,
            f"read and shuffled: received {received.records} docs, {received.bytes / 1e6:.2f} MB in {dt:.2f}s "
            f"({received.rounds} rounds, {received.spilled_runs} spilled runs)",
        )
        t0 = time.monotonic()
        written = []
        dtype = tok["token_dtype"]
        for (b, number), group in itertools.groupby(received, key=lambda r: _KEY.unpack_from(r[0])[:2]):
            written.append(
                self._write_shard(out, shard_name(buckets[b], number), buckets[b], group, dtype, tok)
            )
        _say(ctx, f"wrote and validated {len(written)} shards in {time.monotonic() - t0:.2f}s")
        all_written = sorted(itertools.chain.from_iterable(comm.allgather(written)), key=lambda m: m["name"])
        failed = [m for m in all_written if m["validation"]["failures"]]
        if ctx.rank == 0:
            atomic_write_json(
                out / VALIDATION,
                {
                    "passed": not failed,
                    "limits": {
                        k: getattr(self.config, k)
                        for k in ("max_repeat_run", "min_entropy_bits", "max_top_token_share")
                    },
                    "shards": {m["name"]: m["validation"] for m in all_written},
                },
            )
        comm.Barrier()  # the report is on disk before any rank stops the job
        if failed:
            lines = [
                f"{m['name']} ({m['bucket']}, {m['docs']} docs): " + "; ".join(m["validation"]["failures"])
                for m in failed[:10]
            ]
            raise StageError(
                f"{len(failed)} of {len(all_written)} shards failed validation (report: "
                f"{out / VALIDATION}):\n  " + "\n  ".join(lines)
            )
        if ctx.rank == 0:
            atomic_write_json(
                out / MEGATRON / SHARD_LIST, {"key": key, "shards": [m["name"] for m in all_written]}
            )
        comm.Barrier()
        return key

    def _write_shard(self, out: Path, name: str, bucket: str, group, dtype: str, tok: dict) -> dict[str, Any]:
        doc_ids, metas, arrays = [], [], []
        for rkey, payload in group:
            (mlen,) = struct.unpack_from("<I", payload)
            doc_ids.append(rkey[_KEY.size :].decode())
            metas.append(payload[4 : 4 + mlen])
            arrays.append(np.frombuffer(payload, dtype=dtype, offset=4 + mlen))
        prefix = out / MEGATRON / name
        write_indexed_shard(prefix, arrays, dtype)
        lineage = b"".join(m + b"\n" for m in metas)
        offsets = np.zeros(len(metas) + 1, dtype=np.int64)
        np.cumsum([len(m) + 1 for m in metas], out=offsets[1:])
        atomic_write_bytes(out / LINEAGE / f"{name}.jsonl", lineage)
        atomic_write_bytes(out / LINEAGE / f"{name}.offsets.npy", npy_bytes(offsets))

        shard = IndexedShard(prefix)  # validate what is on disk, not what we meant to write
        expected = int(sum(a.shape[0] for a in arrays))
        stats = shard_stats(np.asarray(shard.tokens), int(tok["eos_id"]))
        failures = validation_failures(stats, shard.index.num_tokens, self.config)
        if shard.index.num_tokens != expected or len(shard) != len(doc_ids):
            failures.append(
                f"index holds {len(shard)} docs / {shard.index.num_tokens} tokens, "
                f"{len(doc_ids)} / {expected} were written"
            )
        meta = {
            "name": name,
            "bucket": bucket,
            "docs": len(doc_ids),
            "tokens": expected,
            "token_dtype": dtype,
            "sha256": file_sha256(prefix.with_suffix(".bin")),
            "block_size": BLOCK_SIZE,  # the loader verifies what it reads, block by block
            "block_sha256": block_digests(prefix.with_suffix(".bin"), BLOCK_SIZE),
            "idx_sha256": file_sha256(prefix.with_suffix(".idx")),
            "lineage_sha256": sha256_hex(lineage),
            "lineage_offsets_sha256": file_sha256(out / LINEAGE / f"{name}.offsets.npy"),
            "doc_ids": doc_ids,
            "validation": {**stats, "failures": failures},
        }
        atomic_write_json(out / MEGATRON / f"{name}.meta.json", meta)
        return {k: meta[k] for k in ("name", "bucket", "docs", "tokens", "validation")}

    # -- the map phase: documents pass through -------------------------------------------------------
    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        for doc in iter_docs(shard.path):
            yield Kept(doc), len(doc.text.encode("utf-8"))

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        complete = json.loads((ctx.out_dir / MEGATRON / SHARD_LIST).read_text())
        buckets: dict[str, dict[str, int]] = {}
        for name in complete["shards"]:
            m = json.loads((ctx.out_dir / MEGATRON / f"{name}.meta.json").read_text())
            b = buckets.setdefault(m["bucket"], {"shards": 0, "docs": 0, "tokens": 0})
            b["shards"] += 1
            b["docs"] += m["docs"]
            b["tokens"] += m["tokens"]
        return {
            "snapshot_shards": complete["shards"],
            "buckets": buckets,
            "seed": self.config.seed,
            "shuffle_key": "blake2b64('shuffle', doc_id, seed)",
        }


def _say(ctx: StageContext, msg: str) -> None:
    """A per-rank progress line in the runner's format."""
    print(
        f"{time.strftime('%H:%M:%S')} [write_shards r{ctx.rank}/{ctx.size}] {msg}",
        file=sys.stderr,
        flush=True,
    )


STAGE = WriteShards

if __name__ == "__main__":
    sys.exit(main(STAGE))
