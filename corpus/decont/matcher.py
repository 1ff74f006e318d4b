"""The eval-side index: every checked passage's 8-grams, and the rule applied to one document.

A table holds one row per (8-gram hash, passage, position in the passage), sorted by hash: in memory
(:class:`PassageTable`, for a later benchmark's check), or written once and mapped by every rank behind
a Bloom filter (:mod:`corpus.decont.eval_table`, the build's). A document is scanned by looking its distinct 8-grams up in the table: the rows found are exactly the
(passage, position) pairs whose 8-gram the document holds, which :func:`corpus.decont.rule.contaminated`
turns into the contaminated passages; an item is contaminated when one of its passages is, with the
longest run of its passages. The check after the build (:mod:`corpus.decont.doc_grams`) builds the
same rows from the per-document index and calls the same function. The build's fuzzy tier looks the
document's 5-grams up in a second table of the same passages (:func:`corpus.decont.rule.covered`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from corpus.decont.eval_table import RUN_ROWS, EvalTable, build_eval_table, expand_ranges
from corpus.decont.ngrams import Grams, normalize_words, word_hashes
from corpus.decont.registry import EvalItem
from corpus.decont.rule import (
    DEFAULT_FUZZY_MIN_WORDS,
    DEFAULT_FUZZY_SHARE,
    DEFAULT_MIN_ITEM_WORDS,
    DEFAULT_MIN_RUN,
    FUZZY_N,
    FUZZY_RULE,
    RULE,
    RULE_N,
    check_settings,
    contaminated,
    covered,
    doc_gram_set,
    passage_grams,
)


@dataclass(frozen=True)
class Match:
    benchmark: str
    item_id: str
    run: int  # the longest run of consecutive passage 8-grams the document holds


@dataclass(frozen=True)
class FuzzyMatch:
    benchmark: str
    item_id: str
    share: float  # the largest share of one of its passages' words the document's 5-grams cover


@dataclass(frozen=True)
class PassageTable:
    """The checked passages of a list of items: their 8-grams as rows sorted by hash."""

    hashes: np.ndarray  # uint64, sorted
    passage: np.ndarray  # int64: which passage each row is of
    position: np.ndarray  # int64: the 8-gram's position in its passage
    passage_len: np.ndarray  # int64 per passage: its number of 8-grams
    passage_item: np.ndarray  # int64 per passage: the item (index into the list) it belongs to
    unchecked: np.ndarray  # bool per item: no passage long enough to check

    @classmethod
    def build(cls, items: list[EvalItem], min_item_words: int = DEFAULT_MIN_ITEM_WORDS) -> PassageTable:
        grams, lengths, owners = [], [], []
        unchecked = np.ones(len(items), dtype=bool)
        for i, item in enumerate(items):
            for text in item.passages or (item.text,):
                g = passage_grams(text, min_item_words)
                if g is None:
                    continue
                grams.append(g)
                lengths.append(g.shape[0])
                owners.append(i)
                unchecked[i] = False
        lengths_a = np.asarray(lengths, dtype=np.int64)
        if grams:
            h = np.concatenate(grams)
            passage = np.repeat(np.arange(len(grams), dtype=np.int64), lengths_a)
            position = np.arange(h.shape[0], dtype=np.int64) - np.repeat(
                np.cumsum(lengths_a) - lengths_a, lengths_a
            )
        else:
            h, passage, position = (np.empty(0, np.uint64), np.empty(0, np.int64), np.empty(0, np.int64))
        order = np.argsort(h, kind="stable")
        return cls(
            h[order],
            passage[order],
            position[order],
            lengths_a,
            np.asarray(owners, dtype=np.int64),
            unchecked,
        )

    def rows_in(self, doc_set: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(passage, position) of every passage 8-gram in ``doc_set`` (a document's sorted distinct 8-grams)."""
        left = np.searchsorted(self.hashes, doc_set, side="left")
        right = np.searchsorted(self.hashes, doc_set, side="right")
        rows = expand_ranges(left, right)
        return self.passage[rows], self.position[rows]


class EvalIndex:
    """The registry's tables (:mod:`corpus.decont.eval_table`, mapped: the rule's 8-grams and the fuzzy
    tier's 5-grams of the same passages) and the rules' settings: what the build's decontaminate stage
    asks about each document."""

    def __init__(
        self,
        table: EvalTable,
        min_run: int = DEFAULT_MIN_RUN,
        fuzzy_table: EvalTable | None = None,
        fuzzy_share: float = DEFAULT_FUZZY_SHARE,
        fuzzy_min_words: int = DEFAULT_FUZZY_MIN_WORDS,
    ) -> None:
        self.min_item_words = int(table.manifest["key"]["min_item_words"])
        check_settings(min_run, self.min_item_words)
        if not 0 <= fuzzy_share <= 1 or fuzzy_min_words < 1:
            raise ValueError(
                f"fuzzy_share must be in [0, 1] and fuzzy_min_words at least 1, got {fuzzy_share}, {fuzzy_min_words}"
            )
        if fuzzy_table is not None and (
            fuzzy_table.manifest["key"] != table.manifest["key"] | {"ngram": FUZZY_N}
        ):
            raise ValueError("the fuzzy tier's table is not this registry's 5-gram table")
        # the fuzzy tier runs where its table is given and its share is not 0
        self.table, self.fuzzy_table = table, fuzzy_table if fuzzy_share else None
        self.min_run = min_run
        self.fuzzy_share = fuzzy_share if self.fuzzy_table is not None else 0.0
        self.fuzzy_min_words = fuzzy_min_words
        self.unchecked: Counter = table.unchecked()

    @classmethod
    def build(
        cls,
        registry_dir: Path,
        table_dir: Path,
        min_run: int = DEFAULT_MIN_RUN,
        min_item_words: int = DEFAULT_MIN_ITEM_WORDS,
        run_rows: int = RUN_ROWS,
    ) -> EvalIndex:
        """The index of the registry in ``registry_dir``, its tables written to ``table_dir`` and
        :func:`fuzzy_dir` of it unless there."""
        check_settings(min_run, min_item_words)
        build_eval_table(registry_dir, min_item_words, table_dir, run_rows)
        build_eval_table(registry_dir, min_item_words, fuzzy_dir(table_dir), run_rows, n=FUZZY_N)
        return cls(EvalTable.open(table_dir), min_run, EvalTable.open(fuzzy_dir(table_dir)))

    @property
    def registry_digest(self) -> str:
        return self.table.manifest["key"]["eval_registry"]

    def describe_registry(self) -> dict:
        """Per benchmark: sha256, items, file, content builder, and unchecked items where there are any."""
        return {name: dict(facts) for name, facts in self.table.manifest["benchmarks"]}

    def describe(self) -> dict:
        return {
            "rule": RULE,
            "ngram": RULE_N,
            "min_run": self.min_run,
            "min_item_words": self.min_item_words,
            "passages": int(self.table.manifest["passages"]),
            "passage_grams": int(self.table.manifest["rows"]),
            "unchecked_items": dict(sorted(self.unchecked.items())),
            "fuzzy_rule": FUZZY_RULE if self.fuzzy_share else None,
            "fuzzy_ngram": FUZZY_N,
            "fuzzy_share": self.fuzzy_share,
            "fuzzy_min_words": self.fuzzy_min_words,
        }

    def match_set(self, doc_set: np.ndarray) -> list[Match]:
        """Every item contaminated in the document whose distinct 8-grams are ``doc_set``, in registry
        order, each with the longest run of its passages."""
        return self._exact(*self.table.rows_in(doc_set))[0]

    def match_both(
        self, grams: Grams, doc_set: np.ndarray | None = None
    ) -> tuple[list[Match], list[FuzzyMatch]]:
        """The items of :meth:`match_set` on the document whose n-grams are ``grams`` (``doc_set``: its
        distinct 8-grams, where the caller has them), and the items the fuzzy tier finds that it does
        not (the document's 5-grams looked up in the fuzzy table), each with the largest share of one of
        its passages' words covered."""
        doc_set = doc_gram_set(grams) if doc_set is None else doc_set
        exact, found = self._exact(*self.table.rows_in(doc_set))
        if self.fuzzy_table is None:
            return exact, []
        passage, position = self.fuzzy_table.rows_in(doc_gram_set(grams, FUZZY_N))
        _, near, share = covered(
            np.zeros(passage.shape[0], dtype=np.int64),
            passage,
            position,
            self.fuzzy_table.passage_len,
            self.fuzzy_share,
            self.fuzzy_min_words,
        )
        fuzzy: dict[int, float] = {}
        for p, f in zip(near.tolist(), share.tolist(), strict=True):
            i = int(self.table.passage_item[p])
            if i not in found:
                fuzzy[i] = max(fuzzy.get(i, 0.0), f)
        return exact, [FuzzyMatch(*self.table.item(i), round(fuzzy[i], 4)) for i in sorted(fuzzy)]

    def _exact(self, passage: np.ndarray, position: np.ndarray) -> tuple[list[Match], set[int]]:
        _, hit, run = contaminated(
            np.zeros(passage.shape[0], dtype=np.int64),
            passage,
            position,
            self.table.passage_len,
            self.min_run,
        )
        best: dict[int, int] = {}
        for p, r in zip(hit.tolist(), run.tolist(), strict=True):
            i = int(self.table.passage_item[p])
            best[i] = max(best.get(i, 0), r)
        return [Match(*self.table.item(i), best[i]) for i in sorted(best)], set(best)

    def match_grams(self, grams: Grams) -> list[Match]:
        return self.match_set(doc_gram_set(grams))

    def match(self, text: str) -> list[Match]:
        """Every item contaminated in ``text`` (see :meth:`match_set`)."""
        return self.match_grams(Grams(word_hashes(normalize_words(text))))

    def scan(self, text: str) -> list[Match]:
        """Per benchmark, the contaminated item with the longest run (ties: the first in the registry),
        sorted by benchmark."""
        return best_per_benchmark(self.match(text))


def fuzzy_dir(table_dir: Path) -> Path:
    """Where the fuzzy tier's 5-gram table lies beside the rule's table in ``table_dir``."""
    return table_dir.with_name(f"{table_dir.name}-{FUZZY_N}gram")


def best_per_benchmark(matches: list, value: str = "run") -> list:
    """Per benchmark, the match with the largest ``value`` (a Match's ``run``, a FuzzyMatch's
    ``share``; ties: the first in the registry), sorted by benchmark."""
    best: dict[str, Any] = {}
    for m in matches:
        if m.benchmark not in best or getattr(m, value) > getattr(best[m.benchmark], value):
            best[m.benchmark] = m
    return [best[b] for b in sorted(best)]
