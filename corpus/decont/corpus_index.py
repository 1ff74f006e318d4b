"""The corpus-side 13-gram index retained with a snapshot: a sorted array of unique 64-bit hashes.

It lets ``corpus contamination --benchmark FILE`` check a benchmark published after the snapshot was
built without re-reading the corpus: an item is contaminated when a run of at least M of its
*consecutive* 13-grams all occur somewhere in the corpus (the GPT-3 / Dolma style of test; the index
keeps no positions, so the run is taken on the benchmark side). Items with fewer than M 13-grams must
have all of them present; items under 13 words cannot be answered from a 13-gram index and are
reported as unchecked.

A sorted array costs 8 bytes per distinct 13-gram and answers exactly (no false positives beyond
64-bit collisions); a Bloom filter would be ~8x smaller at 1% false positives, the upgrade path once an
index outgrows a node's memory. Files are plain ``.npy`` (byte-deterministic), built per stage shard
and merged once per snapshot.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus.decont.ngrams import NGRAM, gram_hashes, is_member, longest_run, normalize_words, word_hashes
from corpus.decont.registry import Benchmark
from corpus.docshard import atomic_write_bytes


def doc_grams(text: str) -> np.ndarray:
    return np.unique(gram_hashes(word_hashes(normalize_words(text)), NGRAM))


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def save_index(path: Path, hashes: np.ndarray) -> None:
    atomic_write_bytes(Path(path), npy_bytes(np.unique(np.asarray(hashes, dtype=np.uint64))))


def load_index(path: Path) -> np.ndarray:
    arr = np.load(path, mmap_mode="r", allow_pickle=False)
    if arr.dtype != np.uint64 or arr.ndim != 1:
        raise ValueError(
            f"{path}: not a 13-gram index (expected a 1-d uint64 array, got {arr.dtype} {arr.shape})"
        )
    return arr


def merge_indices(paths: list[Path]) -> np.ndarray:
    parts = [np.asarray(load_index(p)) for p in paths]
    return np.unique(np.concatenate(parts)) if parts else np.empty(0, np.uint64)


@dataclass(frozen=True)
class ItemCheck:
    item_id: str
    grams: int
    longest_run: int
    flagged: bool


def check_benchmark(benchmark: Benchmark, corpus: np.ndarray, min_run: int = 10) -> dict:
    """Per-benchmark result of checking every item against the corpus index."""
    checks: list[ItemCheck] = []
    unchecked = 0
    for item in benchmark.items:
        g = gram_hashes(word_hashes(normalize_words(item.text)), NGRAM)
        if g.shape[0] == 0:
            unchecked += 1
            continue
        run = longest_run(is_member(g, corpus))
        checks.append(ItemCheck(item.item_id, int(g.shape[0]), run, run >= min(min_run, g.shape[0])))
    flagged = [c for c in checks if c.flagged]
    return {
        "benchmark": benchmark.name,
        "sha256": benchmark.sha256,
        "items": len(benchmark.items),
        "checked_items": len(checks),
        "unchecked_items": unchecked,
        "flagged_items": len(flagged),
        "rate": len(flagged) / len(checks) if checks else 0.0,
        "longest_run": max((c.longest_run for c in checks), default=0),
        "flagged_ids": [c.item_id for c in flagged],
    }
