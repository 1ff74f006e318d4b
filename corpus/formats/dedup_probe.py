"""Probing a dedup index's generations for a batch of keys of one partition.

Per generation (oldest first: the first generation holding a key answers it; for a kind that sums, every
generation holding it adds its count) the keys not yet found are tested against the generation's Bloom filter of the partition; each "maybe" is confirmed by a binary
search of the memory-mapped sorted file, so a false positive costs one lookup and never changes an
answer. A probe holds its batch of keys, one Bloom filter and one memory map at a time (unmapped after
use). Probing and the filters' measured cost: docs/incremental.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from corpus.formats.dedup_files import Generation
from corpus.formats.dedup_keys import count_values, counts_of, key_hash, sort_words


@dataclass
class ProbeStats:
    """What a probe did: keys tested against a filter, rejected by it, looked up, and filter hits the
    lookup found absent (false positives)."""

    bloom_tests: int = 0
    bloom_rejected: int = 0
    lookups: int = 0
    false_positives: int = 0

    @property
    def fp_rate(self) -> float:
        absent = self.bloom_rejected + self.false_positives
        return self.false_positives / absent if absent else 0.0


@dataclass
class ProbeResult:
    """Per key probed, in the order given: the answer of the oldest generation holding it (or, summing,
    the sum of every generation's count)."""

    found: np.ndarray  # bool
    values: np.ndarray  # the record's value type (zeros where not found)
    generation: np.ndarray  # int32: index (of the oldest holding it) in the index's generations, -1 if none

    @classmethod
    def empty(cls, n: int, record: np.dtype) -> ProbeResult:
        return cls(np.zeros(n, bool), np.zeros(n, record["value"]), np.full(n, -1, np.int32))


def _search(keys_mm: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized binary search of the key words ``q`` (m, nw) in the sorted memory-mapped keys:
    (position, found). Touches about log2(n) records per query."""
    n = len(keys_mm)
    m = q.shape[0]
    lo = np.zeros(m, dtype=np.int64)
    hi = np.full(m, n, dtype=np.int64)
    active = np.arange(m)
    while len(active):
        mid = (lo[active] + hi[active]) // 2
        less = _lex_less_rows(sort_words(keys_mm[mid]), q[active])
        lo[active[less]] = mid[less] + 1
        hi[active[~less]] = mid[~less]
        active = active[lo[active] < hi[active]]
    found = np.zeros(m, dtype=bool)
    inside = np.nonzero(lo < n)[0]
    if len(inside):
        found[inside] = (sort_words(keys_mm[lo[inside]]) == q[inside]).all(axis=1)
    return lo, found


def _lex_less_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row: a < b, lexicographically (both (n, c) uint64)."""
    less = np.zeros(a.shape[0], dtype=bool)
    for i in reversed(range(a.shape[1])):
        less = (a[:, i] < b[:, i]) | ((a[:, i] == b[:, i]) & less)
    return less


def probe_generations(
    generations: Sequence[Generation],
    p: int,
    keys: np.ndarray,
    record: np.dtype,
    *,
    use_bloom: bool = True,
    stats: ProbeStats | None = None,
    sums: bool = False,
) -> ProbeResult:
    """For each key (void items of partition ``p``): found, its value in the oldest generation holding
    it (``sums``: its counts summed over every generation holding it), the oldest such generation's
    position in ``generations``."""
    n = len(keys)
    result = ProbeResult.empty(n, record)
    total = np.zeros(n, dtype=np.uint64) if sums else None
    words = sort_words(keys)
    hashes = key_hash(words) if use_bloom else None
    remaining = np.arange(n)
    for g, gen in enumerate(generations):  # oldest first: the first generation holding a key wins
        if not len(remaining):
            break
        if not int(gen.part(p)["records"]):
            continue
        cand = remaining
        if use_bloom:
            maybe = gen.bloom(p).might_contain(hashes[remaining])
            cand = remaining[maybe]
            if stats is not None:
                stats.bloom_tests += len(remaining)
                stats.bloom_rejected += int((~maybe).sum())
        if not len(cand):
            continue
        mm = gen.map_part(p, record)
        pos, hit = _search(mm["key"], words[cand])
        hits = cand[hit]
        if total is not None:
            total[hits] += counts_of(mm["value"][pos[hit]])
            result.generation[hits[~result.found[hits]]] = g
        else:
            result.values[hits] = mm["value"][pos[hit]]
            result.generation[hits] = g
        result.found[hits] = True
        del mm
        if stats is not None:
            stats.lookups += len(cand)
            if use_bloom:
                stats.false_positives += int((~hit).sum())
        if total is None:  # summing, every generation is asked for every key
            remaining = remaining[~result.found[remaining]]
    if total is not None:
        result.values[:] = count_values(total)
    return result
