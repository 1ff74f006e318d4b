"""MinHash signatures and LSH band keys, compiled with numba.

A document's shingles are word 5-grams (``ngram``) of its normalized text, or character 5-grams
(``char_ngram``) for a document written mostly in scripts without spaces (``normalize.is_unspaced``,
decided by the kernel from the bytes); one with no unit has no shingle and an empty signature (never
banded). Shingles are hashed to x < 2^61; permutation k is ``(a_k * x + b_k) mod (2^61 - 1)``, exact in
64-bit integers, with a_k, b_k from the config seed by ``stable_hash64`` (no RNG, the same on every
machine); the signature is the minimum of each over the shingles (K = 112 uint64). A band key is 18
bytes: the band number (big-endian u16), then a 128-bit hash of the band. docs/dedup.md (*MinHash*).
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numba
import numpy as np

from corpus.model.digest import stable_hash64
from corpus.text.normalize import CHAR_NGRAM, LETTER, UNSPACED_LETTER, UNSPACED_WEIGHT


def _array_math_without_blas_probe() -> None:
    """Import numba's array-math implementations, which the first call of any kernel loads, without
    their probe for a BLAS: the probe imports ``scipy.linalg`` (~0.2 CPU s in every process, as much
    as the stage's own imports) so that ``np.convolve``/``np.correlate`` of floats may call BLAS
    instead of a loop. These kernels use no linear algebra; a jitted function that does (``np.dot``,
    ``np.linalg``) still gets scipy's BLAS, which numba imports when it compiles one. Nothing to do
    where scipy's BLAS or the array math is already imported."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg.cython_blas" in sys.modules:
        return
    sys.modules["scipy.linalg.cython_blas"] = None  # importing it raises ImportError: "no BLAS"
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules["scipy.linalg.cython_blas"]


_array_math_without_blas_probe()

MERSENNE_61 = (1 << 61) - 1
#: the value of an empty signature (no shingle): larger than any h_k
EMPTY = MERSENNE_61
BAND_KEY_BYTES = 18

_P = np.uint64(MERSENNE_61)
_M32 = np.uint64(0xFFFFFFFF)
_M29 = np.uint64((1 << 29) - 1)
_S3 = np.uint64(3)
_S29 = np.uint64(29)
_S32 = np.uint64(32)
_S33 = np.uint64(33)
_S61 = np.uint64(61)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_MIX1 = np.uint64(0xFF51AFD7ED558CCD)
_MIX2 = np.uint64(0xC4CEB9FE1A85EC53)


#: what the kernel does with a character (``codepoint_classes``; for an ASCII byte ``_CLASS``): drop it,
#: a letter of a spaced script, a separator, a letter of an unspaced script, a word character that is not
#: a letter (decimal digit, ``_``). Every class but DROP and SEPARATOR is part of a word and a character unit.
DROP, LETTER_SPACED, SEPARATOR, LETTER_UNSPACED, WORD_OTHER = 0, 1, 2, 3, 4


def _byte_classes() -> np.ndarray:
    """The class of each ASCII byte (``DROP`` ... ``WORD_OTHER``).

    For ASCII text this is exactly ``normalize_text`` (NFKC is the identity on ASCII; lower-case; drop
    what is neither ``\\w`` nor ``\\s``; whitespace separates words), so ASCII documents skip the Python
    normalization; no ASCII letter is of an unspaced script. Bytes >= 0x80 are classified by code point.
    """
    classes = np.zeros(256, dtype=np.uint8)
    for c in range(128):
        ch = chr(c)
        if ch.isalpha():
            classes[c] = LETTER_SPACED
        elif ch.isdigit() or ch == "_":
            classes[c] = WORD_OTHER
        elif ch.isspace():
            classes[c] = SEPARATOR
    classes[128:] = LETTER_SPACED
    return classes


_CLASS = _byte_classes()
_LOWER = np.array([c + 32 if 65 <= c <= 90 else c for c in range(256)], dtype=np.uint8)
_BAND_SEED_1 = np.uint64(0x9E3779B97F4A7C15)
_BAND_SEED_2 = np.uint64(0xD1B54A32D192ED03)


@dataclass(frozen=True, kw_only=True)
class BandParams:
    """What a signature and its band keys depend on besides the shingles' normalization: the
    permutations (``num_perm``, ``seed``), the banding (``bands`` x ``rows``) and the word n-gram. A
    stage's config embeds them by inheriting them (``MinhashDedupConfig``), so they are written once."""

    num_perm: int = 112
    bands: int = 14
    rows: int = 8
    ngram: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands x rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}")
        if min(self.num_perm, self.bands, self.rows, self.ngram) < 1:
            raise ValueError("num_perm, bands, rows and ngram must be positive")
        if self.bands >= 1 << 16:
            raise ValueError("at most 65535 bands")


@dataclass(frozen=True, kw_only=True)
class MinHashParams(BandParams):
    #: n of the character n-grams of unspaced documents; the stage keeps the normalization version's
    #: (``normalize.CHAR_NGRAM``), other values are for measurements
    char_ngram: int = CHAR_NGRAM

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.char_ngram < 1:
            raise ValueError("char_ngram must be positive")

    @classmethod
    def of(cls, bands: BandParams) -> MinHashParams:
        """The kernel's parameters of a config that embeds :class:`BandParams` (``char_ngram``: the
        normalization version's)."""
        return cls(**{f.name: getattr(bands, f.name) for f in fields(BandParams)})


def permutation_coefficients(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of the K universal hashes, a pure function of (K, seed)."""
    a = np.array(
        [1 + stable_hash64("minhash-a", seed, k) % (MERSENNE_61 - 1) for k in range(num_perm)], np.uint64
    )
    b = np.array([stable_hash64("minhash-b", seed, k) % MERSENNE_61 for k in range(num_perm)], np.uint64)
    return a, b


@numba.njit(cache=True, inline="always")
def _mix64(h):
    h ^= h >> _S33
    h *= _MIX1
    h ^= h >> _S33
    h *= _MIX2
    h ^= h >> _S33
    return h


@numba.njit(cache=True, inline="always")
def _mulmod61_add(a_hi, a_lo, x_hi, x_lo, b):
    """(a * x + b) mod 2^61-1 for a, x, b < 2^61, given the 32-bit halves of a and x."""
    hh = a_hi * x_hi
    mid = a_hi * x_lo + a_lo * x_hi
    ll = a_lo * x_lo
    r = (hh << _S3) + (mid >> _S29) + ((mid & _M29) << _S32) + (ll & _P) + (ll >> _S61) + b
    r = (r & _P) + (r >> _S61)
    return r - _P if r >= _P else r


def mulmod61_add(a: int, x: int, b: int) -> int:
    """The kernel's modular arithmetic, callable from Python (tests check it against big integers)."""
    a64, x64 = np.uint64(a), np.uint64(x)
    return int(_mulmod61_add(a64 >> _S32, a64 & _M32, x64 >> _S32, x64 & _M32, np.uint64(b)))


@numba.njit(cache=True)
def _word_hashes(buf, start, end, classes, lower, cp_classes, out):
    """FNV-1a hashes of the words of UTF-8 bytes: ASCII by ``classes`` (lower-cased by ``lower``),
    other characters decoded and classified by ``cp_classes``. Returns (words, letters of unspaced
    scripts); the count costs nothing on ASCII bytes, which are never such letters."""
    n = 0
    unspaced = 0
    h = _FNV_OFFSET
    in_word = False
    i = start
    while i < end:
        c = buf[i]
        width = 1
        if c < 128:
            cls = classes[c]
        else:
            if c >= 0xF0:
                width = 4
                cp = np.int64(c & 0x07)
            elif c >= 0xE0:
                width = 3
                cp = np.int64(c & 0x0F)
            else:
                width = 2
                cp = np.int64(c & 0x1F)
            for j in range(1, width):
                cp = (cp << 6) | np.int64(buf[i + j] & 0x3F)
            cls = cp_classes[cp]
            if cls == 3:
                unspaced += 1
        if cls == 2:
            if in_word:
                out[n] = h
                n += 1
                h = _FNV_OFFSET
                in_word = False
        elif cls != 0:
            for j in range(width):
                h ^= np.uint64(lower[buf[i + j]])
                h *= _FNV_PRIME
            in_word = True
        i += width
    if in_word:
        out[n] = h
        n += 1
    return n, unspaced


@numba.njit(cache=True)
def _char_hashes(buf, start, end, classes, lower, cp_classes, out):
    """FNV-1a hashes of the characters of UTF-8 bytes that are part of a word (every class but drop and
    separator), each over its bytes as ``_word_hashes`` reads them. Returns (characters, letters of
    spaced scripts)."""
    n = 0
    spaced = 0
    i = start
    while i < end:
        c = buf[i]
        width = 1
        if c < 128:
            cls = classes[c]
        else:
            if c >= 0xF0:
                width = 4
                cp = np.int64(c & 0x07)
            elif c >= 0xE0:
                width = 3
                cp = np.int64(c & 0x0F)
            else:
                width = 2
                cp = np.int64(c & 0x1F)
            for j in range(1, width):
                cp = (cp << 6) | np.int64(buf[i + j] & 0x3F)
            cls = cp_classes[cp]
        if cls != 0 and cls != 2:
            h = _FNV_OFFSET
            for j in range(width):
                h ^= np.uint64(lower[buf[i + j]])
                h *= _FNV_PRIME
            out[n] = h
            n += 1
            if cls == 1:
                spaced += 1
        i += width
    return n, spaced


@numba.njit(cache=True)
def _signatures(buf, offsets, ngram, char_ngram, unspaced_weight, a, b, classes, lower, cp_classes, out):
    num_perm = a.shape[0]
    a_hi = a >> _S32
    a_lo = a & _M32
    longest = 0
    for d in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[d + 1] - offsets[d])
    # a document of L bytes has at most L // 2 + 1 words and L characters: the character buffer (and
    # room for that many shingles) is only allocated once a document is shingled by characters
    n_max = longest // 2 + 1
    words = np.empty(n_max, dtype=np.uint64)
    chars = np.empty(0, dtype=np.uint64)
    x_hi = np.empty(n_max, dtype=np.uint64)
    x_lo = np.empty(n_max, dtype=np.uint64)
    for d in range(offsets.shape[0] - 1):
        start, end = offsets[d], offsets[d + 1]
        n_units, unspaced = _word_hashes(buf, start, end, classes, lower, cp_classes, words)
        units = words
        n = ngram
        if unspaced > 0:
            if chars.shape[0] == 0:
                chars = np.empty(longest + 1, dtype=np.uint64)
                x_hi = np.empty(longest + 1, dtype=np.uint64)
                x_lo = np.empty(longest + 1, dtype=np.uint64)
            n_chars, spaced = _char_hashes(buf, start, end, classes, lower, cp_classes, chars)
            if unspaced_weight * unspaced >= spaced:
                units = chars
                n_units = n_chars
                n = char_ngram
        if n_units == 0:
            out[d, :] = _P
            continue
        width = min(n, n_units)
        n_shingles = n_units - width + 1
        for s in range(n_shingles):
            h = _FNV_OFFSET
            for j in range(width):
                h = (h ^ units[s + j]) * _FNV_PRIME
            x = _mix64(h) & _P
            x_hi[s] = x >> _S32
            x_lo[s] = x & _M32
        # permutation-outer, shingle-inner: a branch-free min reduction over contiguous arrays
        for k in range(num_perm):
            ah, al, bk = a_hi[k], a_lo[k], b[k]
            m = _P
            for s in range(n_shingles):
                m = min(m, _mulmod61_add(ah, al, x_hi[s], x_lo[s], bk))
            out[d, k] = m


@numba.njit(cache=True)
def _set_signatures(values, offsets, a, b, out):
    num_perm = a.shape[0]
    a_hi = a >> _S32
    a_lo = a & _M32
    for d in range(offsets.shape[0] - 1):
        start, end = offsets[d], offsets[d + 1]
        for k in range(num_perm):
            ah, al, bk = a_hi[k], a_lo[k], b[k]
            m = _P
            for s in range(start, end):
                x = values[s] & _P
                m = min(m, _mulmod61_add(ah, al, x >> _S32, x & _M32, bk))
            out[d, k] = m


@numba.njit(cache=True)
def _band_keys(sigs, bands, rows, out):
    for d in range(sigs.shape[0]):
        for i in range(bands):
            h1 = _mix64(_BAND_SEED_1 ^ np.uint64(i))
            h2 = _mix64(_BAND_SEED_2 ^ np.uint64(i))
            for j in range(rows):
                v = sigs[d, i * rows + j]
                h1 = _mix64(h1 ^ v)
                h2 = _mix64(h2 ^ (v * _FNV_PRIME))
            out[d, i, 0] = np.uint8(i >> 8)
            out[d, i, 1] = np.uint8(i & 255)
            for byte in range(8):
                out[d, i, 2 + byte] = np.uint8((h1 >> np.uint64(56 - 8 * byte)) & np.uint64(255))
                out[d, i, 10 + byte] = np.uint8((h2 >> np.uint64(56 - 8 * byte)) & np.uint64(255))


_ASCII_ONLY = np.zeros(1, dtype=np.uint8)
#: code points below this are 1-3 UTF-8 bytes (the Basic Multilingual Plane); only a 4-byte sequence
#: (lead byte 0xF0-0xF4) is above it
BMP = 0x10000
_LEAD_4 = 0xF0


@functools.cache
def codepoint_classes(limit: int = 0x110000) -> np.ndarray:
    """The class (``DROP`` ... ``WORD_OTHER``) of every code point below ``limit``, by the same rules as
    ``normalize_text``'s regexes and ``is_unspaced``'s (``\\w`` is a word character, ``\\s`` a separator,
    anything else is dropped; ``normalize.LETTER`` is a letter, ``normalize.UNSPACED_LETTER`` one of an
    unspaced script). Built once per process and limit with five regex passes over the code points:
    ~0.15 CPU s for all of Unicode, ~0.01 s for the BMP, which is all that a text without 4-byte UTF-8
    sequences needs. The string of every code point is decoded from one UTF-32 buffer: joining 1.1 M
    one-character strings peaked at ~100 MB, more than a whole rank's share of a small memory budget."""
    everything = np.arange(limit, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    marked = re.sub(r"[^\w\s]", "\x00", everything)  # \x00-\x04 are neither \w nor letters
    marked = re.sub(r"\s", "\x02", marked)
    marked = UNSPACED_LETTER.sub("\x03", marked)
    marked = LETTER.sub("\x01", marked)
    marked = re.sub(r"[^\x00-\x03]", "\x04", marked)  # the rest of \w: decimal digits and _
    return np.frombuffer(marked.encode("latin-1"), dtype=np.uint8).copy()


def kernel_bytes(text: str) -> bytes:
    """The text as the kernel reads it: its units are exactly ``shingle_units(text)``.

    ASCII text goes as it is (the kernel lower-cases, drops and splits ASCII itself); other text gets
    NFKC and lower-case here and the kernel classifies its characters with ``codepoint_classes`` (the
    whole-text regexes of ``normalize_text`` are the slow part on punctuation-heavy text).
    """
    if text.isascii():
        return text.encode("ascii")
    return unicodedata.normalize("NFKC", text).lower().encode("utf-8", "surrogatepass")


class MinHasher:
    """Signatures and band keys for a batch of documents under one set of parameters."""

    def __init__(self, params: MinHashParams | None = None) -> None:
        self.params = params or MinHashParams()
        self.a, self.b = permutation_coefficients(self.params.num_perm, self.params.seed)

    def _kernel(self, encoded: list[bytes]) -> np.ndarray:
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        buf = np.frombuffer(b"".join(encoded), dtype=np.uint8) if offsets[-1] else np.zeros(1, np.uint8)
        out = np.empty((len(encoded), self.params.num_perm), dtype=np.uint64)
        # the code point table is only needed (and built) once a text is not ASCII, and beyond the BMP
        # only once a text has a 4-byte sequence (the kernel indexes it by the decoded code point)
        if all(e.isascii() for e in encoded):
            cp_classes = _ASCII_ONLY
        else:
            cp_classes = codepoint_classes(0x110000 if int(buf.max()) >= _LEAD_4 else BMP)
        p = self.params
        _signatures(
            buf,
            offsets,
            p.ngram,
            p.char_ngram,
            UNSPACED_WEIGHT,
            self.a,
            self.b,
            _CLASS,
            _LOWER,
            cp_classes,
            out,
        )
        return out

    def signatures_of_normalized(self, texts: Sequence[str]) -> np.ndarray:
        """(n, K) uint64 signatures of texts already passed through ``normalize_text``."""
        return self._kernel([t.encode("utf-8") for t in texts])

    def signatures(self, texts: Sequence[str]) -> np.ndarray:
        """(n, K) uint64 signatures of raw document texts: ASCII texts are normalized inside the
        kernel, others are prepared by ``kernel_bytes``; both give the signature of the normalized text."""
        return self._kernel([kernel_bytes(t) for t in texts])

    def set_signatures(self, values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """(n, K) uint64 signatures of n sets of 64-bit element hashes, set d being
        ``values[offsets[d]:offsets[d + 1]]``: the same permutations as text signatures, applied to
        elements already hashed (each reduced to 61 bits), so the elementwise minimum of two
        signatures is the signature of the union. An empty set has the empty signature."""
        out = np.empty((len(offsets) - 1, self.params.num_perm), dtype=np.uint64)
        _set_signatures(
            np.ascontiguousarray(values, dtype=np.uint64), np.asarray(offsets, np.int64), self.a, self.b, out
        )
        return out

    def band_keys(self, sigs: np.ndarray) -> np.ndarray:
        """(n, bands, 18) uint8: the band keys of each signature (see the module docstring)."""
        p = self.params
        out = np.empty((sigs.shape[0], p.bands, BAND_KEY_BYTES), dtype=np.uint8)
        _band_keys(np.ascontiguousarray(sigs), p.bands, p.rows, out)
        return out


def is_empty(sigs: np.ndarray) -> np.ndarray:
    """Rows that had no shingle at all (they are never banded: every empty text would collide)."""
    return sigs[:, 0] == EMPTY


def lsh_probability(s: float | np.ndarray, bands: int, rows: int) -> float | np.ndarray:
    """Probability that two documents of Jaccard similarity ``s`` share at least one band: 1-(1-s^r)^b."""
    return 1.0 - (1.0 - np.asarray(s, dtype=float) ** rows) ** bands
