"""Normalized word n-grams as 64-bit hashes: the unit both sides of decontamination compare.

Normalization (scheme ``nfkc-lower-words/1``): Unicode NFKC, lower case, then the maximal runs of word
characters (``\\w+``); punctuation and whitespace only separate words. So "Answer: 18." on a web page
matches "answer 18" in a benchmark however it was punctuated or spaced.

An n-gram's hash is a pure function of its words (each word hashed with blake2b, the n words combined
as a polynomial in a fixed odd base modulo 2**64, n mixed in, a 64-bit finalizer), computed with numpy
for a whole document at once, for any n from one prefix sum. The same text gives the same hashes on any machine, so an index built today answers
questions asked about a benchmark published next year.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

import numpy as np

from corpus.model.digest import stable_hash64

SCHEME = "nfkc-lower-words/1+blake2b-word/poly64-prefix-gram/2"
_WORD = re.compile(r"\w+")
#: word -> hash for the words seen last, emptied when full. About 150 bytes an entry, so the bound
#: (~10 MB) is what keeps it from growing with the corpus's vocabulary: at 2**20 entries it reached
#: ~125 k words (~19 MB) a rank at 40,000 documents and could grow to ~150 MB. On the benchmark corpus
#: (2.2 M words, 89 k distinct) 2**16 entries miss 5.2 % of the words, against the 4.0 % never seen before.
_WORD_CACHE: dict[str, int] = {}
_WORD_CACHE_MAX = 1 << 16


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


_BASE = stable_hash64("decont-gram-base") | 1  # odd, hence invertible modulo 2**64
_BASE_INV = pow(_BASE, -1, 1 << 64)
_N_SALT = np.uint64(stable_hash64("decont-gram-length"))
_powers = np.ones(1, dtype=np.uint64)
_inverse_powers = np.ones(1, dtype=np.uint64)


def _cumulative_powers(base: int, size: int) -> np.ndarray:
    factors = np.full(size, base, dtype=np.uint64)
    factors[0] = 1
    return np.cumprod(factors, dtype=np.uint64)


def _power_tables(k: int) -> tuple[np.ndarray, np.ndarray]:
    """BASE**t and BASE**-t mod 2**64 for t < k (grown on demand, shared by all calls)."""
    global _powers, _inverse_powers
    if _powers.shape[0] < k:
        size = max(k, 2 * _powers.shape[0])
        with np.errstate(over="ignore"):
            _powers = _cumulative_powers(_BASE, size)
            _inverse_powers = _cumulative_powers(_BASE_INV, size)
    return _powers[:k], _inverse_powers[:k]


class Grams:
    """Every n-gram hash of one word sequence, for any n, from one prefix sum.

    The n-gram at i hashes ``sum(w[i+j] * BASE**j for j < n)`` mod 2**64 (then n is mixed in and the
    result finalized); with ``P[k] = sum(w[t] * BASE**t for t < k)`` that is
    ``(P[i+n] - P[i]) * BASE**-i``, so each n costs two vector operations whatever its length.
    """

    def __init__(self, hashes: np.ndarray) -> None:
        k = hashes.shape[0]
        powers, self._inverse = _power_tables(k + 1)
        self.prefix = np.zeros(k + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            np.cumsum(hashes * powers[:k], dtype=np.uint64, out=self.prefix[1:])

    def of(self, n: int) -> np.ndarray:
        """The hash of every run of ``n`` consecutive words, in text order (empty when fewer words)."""
        if n < 1:
            raise ValueError(f"n-gram length must be positive, got {n}")
        m = self.prefix.shape[0] - n
        if m <= 0:
            return np.empty(0, dtype=np.uint64)
        with np.errstate(over="ignore"):
            raw = (self.prefix[n:] - self.prefix[:m]) * self._inverse[:m]
            return _mix64(raw + np.uint64(n) * _N_SALT)


def distinct_sorted(values: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array: a mask of where a value differs from the one before
    (np.unique without its sort or hash table, which took 4x as long on a page's thousand hashes)."""
    if values.shape[0] == 0:
        return values
    keep = np.empty(values.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def gram_hashes(hashes: np.ndarray, n: int) -> np.ndarray:
    return Grams(hashes).of(n)


def text_grams(text: str, n: int) -> np.ndarray:
    return gram_hashes(word_hashes(normalize_words(text)), n)
