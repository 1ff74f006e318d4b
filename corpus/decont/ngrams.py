"""Normalized word n-grams as 64-bit hashes: the unit both sides of decontamination compare.

Normalization (scheme ``nfkc-lower-words/1``): Unicode NFKC, lower case, then the maximal runs of word
characters (``\\w+``); punctuation and whitespace only separate words. So "Answer: 18." on a web page
matches "answer 18" in a benchmark however it was punctuated or spaced.

An n-gram's hash is a pure function of its words (each word hashed with blake2b, the n words combined
with fixed odd multipliers and a 64-bit finalizer, n mixed in), computed with numpy for a whole
document at once. The same text gives the same hashes on any machine, so an index built today answers
questions asked about a benchmark published next year.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

import numpy as np

from corpus.digest import stable_hash64

SCHEME = "nfkc-lower-words/1+blake2b-word/poly64-gram"
NGRAM = 13
_WORD = re.compile(r"\w+")
_MAX_N = 64
_MULT = np.array([stable_hash64("decont-gram-multiplier", j) | 1 for j in range(_MAX_N)], dtype=np.uint64)
_WORD_CACHE: dict[str, int] = {}
_WORD_CACHE_MAX = 1 << 20


def normalize_words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def _word_hash(word: str) -> int:
    h = _WORD_CACHE.get(word)
    if h is None:
        h = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
        if len(_WORD_CACHE) >= _WORD_CACHE_MAX:
            _WORD_CACHE.clear()
        _WORD_CACHE[word] = h
    return h


def word_hashes(words: list[str]) -> np.ndarray:
    return np.fromiter((_word_hash(w) for w in words), dtype=np.uint64, count=len(words))


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: spreads every input bit over the output (uint64 arithmetic wraps)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def gram_hashes(hashes: np.ndarray, n: int) -> np.ndarray:
    """The hash of every run of ``n`` consecutive words, in text order (empty when fewer words)."""
    if not 1 <= n <= _MAX_N:
        raise ValueError(f"n-gram length must be 1..{_MAX_N}, got {n}")
    m = hashes.shape[0] - n + 1
    if m <= 0:
        return np.empty(0, dtype=np.uint64)
    acc = np.full(m, np.uint64(n), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n):
            acc += hashes[j : j + m] * _MULT[j]
        return _mix64(acc)


def text_grams(text: str, n: int = NGRAM) -> np.ndarray:
    return gram_hashes(word_hashes(normalize_words(text)), n)


def is_member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Boolean mask: which ``values`` are in ``sorted_set`` (a sorted unique uint64 array)."""
    if sorted_set.shape[0] == 0 or values.shape[0] == 0:
        return np.zeros(values.shape[0], dtype=bool)
    pos = np.searchsorted(sorted_set, values)
    pos[pos == sorted_set.shape[0]] = 0
    return sorted_set[pos] == values


def runs_of(mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs of True as (start, length), in order."""
    if mask.shape[0] == 0:
        return []
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(s), int(e - s)) for s, e in zip(edges[::2], edges[1::2], strict=True)]


def longest_run(mask: np.ndarray) -> int:
    return max((length for _, length in runs_of(mask)), default=0)
