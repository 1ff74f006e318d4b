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

from corpus.decont.ngrams import Grams, normalize_words, word_hashes

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


def passage_grams(text: str, min_item_words: int = DEFAULT_MIN_ITEM_WORDS) -> np.ndarray | None:
    """A passage's 8-gram hashes in order, or None when it is too short to check."""
    words = normalize_words(text)
    if len(words) < max(min_item_words, RULE_N):
        return None
    return Grams(word_hashes(words)).of(RULE_N)


def doc_gram_set(grams: Grams) -> np.ndarray:
    """What the rule reads of a document: its distinct 8-gram hashes, sorted (the per-document index
    keeps exactly these)."""
    return np.unique(grams.of(RULE_N))


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


#: the fuzzy tier's identity: a passage is fuzzily contaminated when the document holds a share of its
#: 8-grams, anywhere and in any order (a paraphrase breaks runs, not most 8-grams)
FUZZY_RULE = "passage-8gram-containment/1"
#: the share of a passage's distinct 8-grams the document must hold (0: no fuzzy tier)
DEFAULT_FUZZY_SHARE = 0.2
#: and at least this many of them (or all of a shorter passage's): a few stock 8-grams are not a match
DEFAULT_FUZZY_MIN_GRAMS = 3


def contained(
    group: np.ndarray,
    passage: np.ndarray,
    position: np.ndarray,
    passage_len: np.ndarray,
    share: float,
    min_grams: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """THE FUZZY RULE, on the rows :func:`contaminated` reads. Returns (group, passage, held share) for
    every (document, passage) where the document holds at least ``share`` of the passage's 8-gram
    positions and at least ``min(min_grams, passage_len)`` of them, sorted by (group, passage)."""
    group, passage, position = (np.asarray(a, dtype=np.int64) for a in (group, passage, position))
    empty = np.empty(0, dtype=np.int64)
    if group.shape[0] == 0 or share <= 0:
        return empty, empty, np.empty(0, dtype=np.float64)
    rows = np.unique(np.stack([group, passage, position], axis=1), axis=0)  # sorted, distinct
    pairs, held = np.unique(rows[:, :2], axis=0, return_counts=True)
    length = np.asarray(passage_len, dtype=np.int64)[pairs[:, 1]]
    fraction = held / length
    hit = (fraction >= share) & (held >= np.minimum(min_grams, length))
    return pairs[hit, 0], pairs[hit, 1], fraction[hit]
