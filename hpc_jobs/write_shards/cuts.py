"""The cuts of write_shards: which shard of its bucket each shuffle key falls in.

Collective, not a part: recomputed from the census parts. Each bucket's all-reduced token histogram
over its key range is cut every ``shard_target_tokens``, so every shard is a uniform random sample of
its bucket, holds the target give or take one bin, and which documents land in which shard depends
only on content, seed and target, never on ranks. The histogram is counted and all-reduced
``CUT_CHUNK_BINS`` bins at a time (one chunk held, never the up to 2**24 bins). docs/snapshot.md.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from corpus.formats.partitions import map_records
from hpc_jobs.write_shards.base_shards import BaseShards
from hpc_jobs.write_shards.census import CENSUS, CENSUS_RECORD
from mpi_kernels.barrier import sleeping_bcast
from runtime.global_phase import GlobalPhase, Part
from runtime.input_shard import InputShard
from runtime.runner import StageContext, assign

#: key histogram bins counted and all-reduced at once by the cuts (2 MiB per int64 array)
CUT_CHUNK_BINS = 1 << 18


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


def histogram(ctx: StageContext, mine: list[Part | None], bucket: str, bits: int) -> Iterator[np.ndarray]:
    """Collective: a bucket's token histogram over its ``2**bits`` key bins, summed over every rank's
    census parts, ``CUT_CHUNK_BINS`` bins at a time (each chunk reads this rank's parts once more)."""
    for lo in range(0, 1 << bits, CUT_CHUNK_BINS):
        hist = np.zeros(min(CUT_CHUNK_BINS, (1 << bits) - lo), dtype=np.int64)
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


def plan_cuts(
    ctx: StageContext, phase: GlobalPhase, inputs: list[InputShard], target: int, base: BaseShards | None
) -> ShardPlan:
    """Collective: the shard cuts from the census parts, numbered per bucket after the base's."""
    # 1. every bucket's token total, summed by rank 0 from the census parts' facts
    totals = None
    if ctx.rank == 0:
        c: Counter = Counter()
        for p in phase.parts(CENSUS, [s.name for s in inputs]):
            c.update(p.facts["tokens"])
        totals = dict(sorted(c.items()))
    totals = sleeping_bcast(ctx.comm, totals)
    buckets = sorted(totals)
    mine = [phase.part(CENSUS, s.name) for s in assign(inputs, ctx.rank, ctx.size)]
    after = base.next_number if base is not None else {}
    # 2. per bucket, its histogram cut every target tokens; the filled runs are the shards
    runs, names = [], []
    for bucket in buckets:
        bits = histogram_bits(totals[bucket], target)
        starts, numbers, filled = shard_runs(histogram(ctx, mine, bucket, bits), totals[bucket], target)
        parts = np.full(len(starts), -1, dtype=np.int64)
        for i in np.flatnonzero(filled).tolist():
            parts[i] = len(names)
            names.append(shard_name(bucket, after.get(bucket, 0) + int(numbers[i])))
        runs.append((bits, starts, parts))
    return ShardPlan(buckets, runs, names)
