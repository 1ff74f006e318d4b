"""The eval-side index and the matching rule.

The rule (defaults: n = 13, M = ``min_run`` = 10, ``min_item_words`` = 8):

* **Long items** (at least M word 13-grams, i.e. at least 12 + M words). A training document is
  contaminated by them when it holds a run of at least M *consecutive* 13-grams that all occur in the
  long items' 13-gram set: about 22 words copied in order. A shared stock phrase gives isolated
  matches, never a run, so clean documents are not flagged.
* **Short items** (``min_item_words`` up to 11 + M words: fewer than M 13-grams, so a run of M can
  never happen). They are caught whole: the document is contaminated when it contains the item's
  entire normalized word sequence. The run length reported is the item's number of 13-grams (1 for
  items under 13 words).
* **Tiny items** (under ``min_item_words`` words, e.g. "Answer: 4") are too generic to attribute and
  are not checked; the report counts them as ``unchecked_items``.

A run is attributed to the benchmark owning most of its 13-grams (ties: the benchmark first by
name), and to that benchmark's first item in the run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from corpus.decont.ngrams import NGRAM, Grams, gram_hashes, is_member, normalize_words, runs_of, word_hashes
from corpus.decont.registry import EvalItem, EvalRegistry


@dataclass(frozen=True)
class Match:
    benchmark: str
    item_id: str
    run: int  # consecutive matching 13-grams (an item's 13-gram count for whole-item matches)


class _GramTable:
    """Sorted unique hashes with the item that first owns each (items in registry order)."""

    def __init__(self, hashes: list[np.ndarray], owners: list[np.ndarray]) -> None:
        if hashes:
            h = np.concatenate(hashes)
            o = np.concatenate(owners)
        else:
            h, o = np.empty(0, np.uint64), np.empty(0, np.int64)
        self.hashes, first = np.unique(h, return_index=True)
        self.owners = o[first]

    def lookup(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mask of values present, owner item index per value; -1 where absent)."""
        mask = is_member(values, self.hashes)
        owner = np.full(values.shape[0], -1, dtype=np.int64)
        if mask.any():
            owner[mask] = self.owners[np.searchsorted(self.hashes, values[mask])]
        return mask, owner


class EvalIndex:
    def __init__(self, registry: EvalRegistry, min_run: int = 10, min_item_words: int = 8) -> None:
        if min_run < 1:
            raise ValueError(f"min_run must be at least 1, got {min_run}")
        if not 1 <= min_item_words <= NGRAM + min_run:
            raise ValueError(f"min_item_words must be 1..{NGRAM + min_run}, got {min_item_words}")
        self.registry = registry
        self.min_run = min_run
        self.min_item_words = min_item_words
        self.items: list[EvalItem] = [item for b in registry.benchmarks for item in b.items]
        self.unchecked: Counter = Counter()
        long_h, long_o = [], []
        whole: dict[int, tuple[list, list]] = {}
        for i, item in enumerate(self.items):
            wh = word_hashes(normalize_words(item.text))
            n_words = wh.shape[0]
            if n_words >= NGRAM + min_run - 1:
                g = gram_hashes(wh, NGRAM)
                long_h.append(g)
                long_o.append(np.full(g.shape[0], i, dtype=np.int64))
            elif n_words >= min_item_words:
                hs, os_ = whole.setdefault(n_words, ([], []))
                hs.append(gram_hashes(wh, n_words))
                os_.append(np.array([i], dtype=np.int64))
            else:
                self.unchecked[item.benchmark] += 1
        self.long = _GramTable(long_h, long_o)
        self.whole = {n: _GramTable(hs, os_) for n, (hs, os_) in sorted(whole.items())}

    def describe(self) -> dict:
        return {
            "ngram": NGRAM,
            "min_run": self.min_run,
            "min_item_words": self.min_item_words,
            "long_item_grams": int(self.long.hashes.shape[0]),
            "whole_items": int(sum(t.hashes.shape[0] for t in self.whole.values())),
            "unchecked_items": dict(sorted(self.unchecked.items())),
        }

    def scan(self, text: str) -> list[Match]:
        """Every benchmark this text is contaminated by, with its longest run (sorted by benchmark)."""
        wh = word_hashes(normalize_words(text))
        grams = Grams(wh)
        best: dict[str, Match] = {}

        def offer(m: Match) -> None:
            if m.benchmark not in best or m.run > best[m.benchmark].run:
                best[m.benchmark] = m

        if wh.shape[0] >= NGRAM and self.long.hashes.shape[0]:
            mask, owner = self.long.lookup(grams.of(NGRAM))
            for start, length in runs_of(mask):
                if length < self.min_run:
                    continue
                run_owners = owner[start : start + length]
                votes = Counter(self.items[o].benchmark for o in run_owners)
                bench = min(votes, key=lambda b: (-votes[b], b))
                first = next(int(o) for o in run_owners if self.items[o].benchmark == bench)
                offer(Match(bench, self.items[first].item_id, length))
        for n, table in self.whole.items():
            if wh.shape[0] < n:
                break
            mask, owner = table.lookup(grams.of(n))
            for o in np.unique(owner[mask]):
                item = self.items[int(o)]
                offer(Match(item.benchmark, item.item_id, max(1, n - NGRAM + 1)))
        return [best[b] for b in sorted(best)]
