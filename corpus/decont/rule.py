"""The decontamination rule: one pure function, applied per document, in the build and after it.

An item is contaminated in a document when one of its passages (:mod:`corpus.decont.content`) has a
run of at least ``min(M, m)`` consecutive word 8-grams that all occur in the document (``m``: the
passage's 8-grams; ``M``: ``min_run``). Passages under ``min_item_words`` words (never fewer than
:data:`RULE_N`) are not checked. The rule needs of a document only the set of its 8-gram hashes, so
the build (:class:`corpus.decont.matcher.EvalIndex`) and the check after it
(:mod:`corpus.decont.doc_grams`) hand the same rows to :func:`contaminated`, the one place that
decides, and agree item by item up to 64-bit collisions. See docs/snapshot.md ("decontaminate").
"""

from __future__ import annotations

import numpy as np

from corpus.decont.ngrams import Grams, distinct_sorted, normalize_words, word_hashes

#: the rule's identity, recorded with every index and report that applies it
RULE = "passage-8gram-set-run/1"
#: the n of the rule's n-grams: short enough that an item of 8 words can be checked from the index
RULE_N = 8
#: consecutive 8-grams of a passage that make a document contaminated: 22 words copied in order
DEFAULT_MIN_RUN = 15
#: passages shorter than this are too generic to attribute
DEFAULT_MIN_ITEM_WORDS = RULE_N


def check_settings(min_run: int, min_item_words: int) -> None:
    if min_run < 1:
        raise ValueError(f"min_run must be at least 1, got {min_run}")
    if min_item_words < RULE_N:
        raise ValueError(
            f"min_item_words must be at least {RULE_N} (the rule's n-gram), got {min_item_words}"
        )


def passage_grams(
    text: str, min_item_words: int = DEFAULT_MIN_ITEM_WORDS, n: int = RULE_N
) -> np.ndarray | None:
    """A passage's n-gram hashes in order (8-grams: the rule's), or None when it is too short to check.
    Which passages are checked does not depend on ``n``, so tables of any n number them alike."""
    words = normalize_words(text)
    if len(words) < max(min_item_words, RULE_N):
        return None
    return Grams(word_hashes(words)).of(n)


def doc_gram_set(grams: Grams, n: int = RULE_N) -> np.ndarray:
    """What the rule reads of a document: its distinct 8-gram hashes, sorted (the per-document index
    keeps exactly these); with ``n`` 5, what the fuzzy tier reads."""
    return distinct_sorted(np.sort(grams.of(n)))


def text_gram_set(text: str) -> np.ndarray:
    return doc_gram_set(Grams(word_hashes(normalize_words(text))))


def required_run(grams: np.ndarray | int, min_run: int) -> np.ndarray | int:
    """The run a passage of ``grams`` 8-grams needs: ``min_run``, or all of them when it has fewer."""
    return np.minimum(grams, min_run)


def contaminated(
    group: np.ndarray, passage: np.ndarray, position: np.ndarray, passage_len: np.ndarray, min_run: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """THE RULE. Each row says: the document of ``group`` holds the 8-gram of ``passage`` at ``position``
    (rows in any order, repeats allowed; ``passage_len[p]`` is passage p's number of 8-grams). Returns
    (group, passage, run) for every (document, passage) where the passage is contaminated, ``run`` being
    its longest run of consecutive positions held, sorted by (group, passage)."""
    group, passage, position = (np.asarray(a, dtype=np.int64) for a in (group, passage, position))
    empty = np.empty(0, dtype=np.int64)
    if group.shape[0] == 0:
        return empty, empty, empty
    order = np.lexsort((position, passage, group))
    g, p, q = group[order], passage[order], position[order]
    fresh = np.ones(g.shape[0], dtype=bool)
    fresh[1:] = (g[1:] != g[:-1]) | (p[1:] != p[:-1]) | (q[1:] != q[:-1])
    g, p, q = g[fresh], p[fresh], q[fresh]
    new_pair = np.ones(g.shape[0], dtype=bool)
    new_pair[1:] = (g[1:] != g[:-1]) | (p[1:] != p[:-1])
    run_start = new_pair.copy()
    run_start[1:] |= q[1:] != q[:-1] + 1
    run_len = np.bincount(np.cumsum(run_start) - 1)
    pair_of_run = np.cumsum(new_pair[run_start]) - 1
    longest = np.zeros(int(pair_of_run[-1]) + 1, dtype=np.int64)
    np.maximum.at(longest, pair_of_run, run_len)
    pair_g, pair_p = g[new_pair], p[new_pair]
    hit = longest >= required_run(np.asarray(passage_len, dtype=np.int64)[pair_p], min_run)
    return pair_g[hit], pair_p[hit], longest[hit]


#: the fuzzy tier's identity: a passage is fuzzily contaminated when most of its words lie in 5-grams
#: the document holds, anywhere and in any order (a paraphrase breaks runs, not most short n-grams)
FUZZY_RULE = "passage-5gram-cover/1"
#: the fuzzy tier's n: a 5-gram survives an edit in one word in ten with probability 0.59, an 8-gram 0.43
FUZZY_N = 5
#: the share of a passage's words covered by 5-grams the document holds (0: no fuzzy tier)
DEFAULT_FUZZY_SHARE = 0.55
#: and at least this many words (all of a shorter passage): a stock phrase is not a match
DEFAULT_FUZZY_MIN_WORDS = 8


def covered(
    group: np.ndarray,
    passage: np.ndarray,
    position: np.ndarray,
    passage_len: np.ndarray,
    share: float,
    min_words: int,
    n: int = FUZZY_N,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """THE FUZZY RULE. Each row says: the document of ``group`` holds the n-gram of ``passage`` at
    ``position`` (rows in any order, repeats allowed; ``passage_len[p]`` is passage p's number of
    n-grams, so it has ``passage_len[p] + n - 1`` words). A word is covered when an n-gram held covers
    it. Returns (group, passage, covered share of its words) for every (document, passage) where at
    least ``share`` of the passage's words and at least ``min(min_words, its words)`` are covered,
    sorted by (group, passage)."""
    group, passage, position = (np.asarray(a, dtype=np.int64) for a in (group, passage, position))
    empty = np.empty(0, dtype=np.int64)
    if group.shape[0] == 0 or share <= 0:
        return empty, empty, np.empty(0, dtype=np.float64)
    order = np.lexsort((position, passage, group))
    g, p, q = group[order], passage[order], position[order]
    new_pair = np.ones(g.shape[0], dtype=bool)
    new_pair[1:] = (g[1:] != g[:-1]) | (p[1:] != p[:-1])
    # an n-gram held covers the words up to the next one held of its passage, n at most (a repeat: none)
    reach = np.full(g.shape[0], n, dtype=np.int64)
    reach[:-1] = np.minimum(n, q[1:] - q[:-1])
    starts = np.flatnonzero(new_pair)
    reach[starts[1:] - 1] = n
    words_covered = np.add.reduceat(reach, starts)
    pair_g, pair_p = g[starts], p[starts]
    words = np.asarray(passage_len, dtype=np.int64)[pair_p] + n - 1
    hit = (words_covered >= share * words) & (words_covered >= np.minimum(min_words, words))
    return pair_g[hit], pair_p[hit], words_covered[hit] / words[hit]
