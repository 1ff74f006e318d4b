"""Gopher (Rae et al. 2021, appendix A) and C4 (Raffel et al. 2020) quality signals, as numbers.

``heuristic_signals(text, lang)`` is a pure function of the text and its language returning every
signal; it decides nothing (the thresholds are :mod:`corpus.select.policy`'s). Gopher signals are
computed as datatrove 0.10.1 computes them, where the paper is silent too (words are spaCy's blank
English tokens, punctuation included; every character fraction is over ``len(text)``), checked value
by value against datatrove by tests/stages/test_gopher_c4_oracle.py; the C4 line rules are those of
C4's reference code. The language decides what a word is and its stop words
(:mod:`corpus.signals.words`); ``lang=None`` is English, datatrove's default. Each signal's definition:
docs/ingest-and-filters.md ("Gopher and C4 signals").
"""

from __future__ import annotations

import re
import sys
from bisect import bisect_right
from collections import Counter
from itertools import chain
from operator import itemgetter

import numpy as np

from corpus.signals.words import PUNCTUATION, segment, segmenters_id, stop_words

GOPHER_BULLETS = ("•", "-")  # datatrove's: a line (left-stripped) starting with either
GOPHER_ELLIPSES = ("...", "…")
TOP_NGRAMS = (2, 3, 4)
DUP_NGRAMS = (5, 6, 7, 8, 9, 10)

# C4's line rules, as its reference code has them (TFDS c4_utils: _END_MARKS, _ELLIPSIS, ...)
C4_END_MARKS = (".", "?", "!", '"')
C4_ELLIPSIS = "..."
C4_MIN_WORDS_PER_LINE = 5
C4_MAX_WORD_LENGTH = 1000
C4_POLICY_SUBSTRINGS = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
C4_CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")
# this project's (not C4's): end marks of the scripts of the corpus, for terminal_punct_line_fraction
TERMINAL_PUNCT = (".", "!", "?", '"', "”", "'", "’", "。", "！", "？", ":")

_PARAGRAPH_SPLIT = re.compile(r"\n{2,}")  # GopherRepetitionFilter.paragraph_exp
_LINE_SPLIT = re.compile(r"\n+")  # GopherRepetitionFilter._line_splitter

# --- words: spaCy's English tokenizer, one whitespace-separated span at a time ------------------------

_tokenizer = None
_nlp = None
#: whitespace-separated span -> (its tokens, their number, non-symbol tokens, their characters, tokens
#: with a letter). A span's tokens do not depend on its neighbours (spaCy splits on whitespace first),
#: so each distinct span is tokenized once. Two generations of at most _SPANS_MAX spans each (about
#: 130 MB together): when the new one is full it becomes the old one, and a span found in the old one
#: moves back, so the spans in use stay.
Row = tuple[tuple[str, ...], int, int, int, int]
_spans: dict[str, Row] = {}
_old_spans: dict[str, Row] = {}
_SPANS_MAX = 1 << 17


def word_tokenizer():
    """spaCy's rule-based English tokenizer (datatrove's word tokenizer for English), built once.

    thinc, which spaCy imports, imports torch when it can: 4x the import time and ~250 MB for a
    tokenizer that never uses it, so torch is hidden while spaCy is imported (unless already loaded).
    The lexical attributes spaCy computes for each new string (shape, like_num, ...) are not made:
    tokenization never reads them."""
    global _tokenizer, _nlp
    if _tokenizer is None:
        hide = "torch" not in sys.modules
        if hide:
            sys.modules["torch"] = None  # type: ignore[assignment]  # import torch -> ImportError
        try:
            import spacy
        finally:
            if hide and sys.modules.get("torch", 0) is None:
                del sys.modules["torch"]
        _nlp = spacy.blank("en")
        _nlp.vocab.lex_attr_getters = {}
        _tokenizer = _nlp.tokenizer
    return _tokenizer


def tokenizer_id() -> str:
    """What the word-based signals depend on besides this code: the English tokenizer, every
    language's segmenter and the stop-word lists, with their versions."""
    import spacy

    word_tokenizer()
    return f"spacy-{spacy.__version__}-blank-en;{segmenters_id()}"


def _tail_suffix_search(search):
    """spaCy's English suffix search, as fast on a long span as on a short one: the rules that match
    at most W characters are searched in the last W only (a lookbehind still sees what comes before),
    and the one unbounded rule, two dots or more, is a count of the final dots. None when the
    tokenizer's suffix pattern is not the one this was written for."""
    import re._parser as sre_parse

    from spacy.lang.en import English
    from spacy.util import compile_suffix_regex

    entries = [e for e in English.Defaults.suffixes if e.strip()]
    if (
        getattr(search, "__self__", None) is None
        or compile_suffix_regex(entries).pattern != search.__self__.pattern
    ):
        return None
    widths = [sre_parse.parse(e).getwidth()[1] for e in entries]
    unbounded = [e for e, w in zip(entries, widths, strict=True) if w >= sre_parse.MAXREPEAT]
    if unbounded != [r"\.\.+"]:
        return None
    width = max(w for w in widths if w < sre_parse.MAXREPEAT)
    bounded = re.compile("|".join(e + "$" for e in entries if e not in unbounded))

    class Match:  # what Tokenizer.find_suffix reads of a match
        __slots__ = ("_start", "_end")

        def __init__(self, start: int, end: int) -> None:
            self._start, self._end = start, end

        def start(self) -> int:
            return self._start

        def end(self) -> int:
            return self._end

    def tail_search(string: str):
        n = len(string)
        m = bounded.search(string, max(0, n - width))
        start = m.start() if m else n
        if string.endswith(".."):
            start = min(start, len(string.rstrip(".")))
        return Match(start, n) if start < n else None

    return tail_search


class _Affixes:
    """spaCy's ``Tokenizer._split_affixes`` and ``_attach_tokens`` (tokenizer.pyx) in Python, with the
    tokenizer's own rules: a span's tokens without building a spaCy Doc, which costs twice as much.
    ``tokens`` answers None where spaCy's special cases could apply (a span, or what is left of it,
    that is one; tokens that join into one containing an affix, which spaCy's special-case matcher
    retokenizes): those spans go through spaCy itself."""

    def __init__(self, tok) -> None:
        from spacy.attrs import ORTH

        self.rules = frozenset(tok.rules)
        self.prefix = tok.prefix_search
        self.suffix = tok.suffix_search
        self.infix = tok.infix_finditer
        self.url = tok.url_match
        self.suffix = _tail_suffix_search(self.suffix) or self.suffix
        self.usable = tok.token_match is None and tok.faster_heuristics and self.prefix and self.suffix
        # the special cases spaCy's matcher looks for after the affixes are split (add_special_case):
        # as the tokens it matches, which are those of the case split without special cases
        keys = [k for k in self.rules if self._affix(k) or " " in k]
        self.matched = frozenset(k.replace(" ", "") for k in keys)
        # (a case that is one token, and stays that one token, changes nothing)
        self.single = frozenset(
            k for k in keys if self._split(k, frozenset()) == [k] and [d[ORTH] for d in tok.rules[k]] != [k]
        )
        self.longest = max(map(len, self.matched), default=0)

    def _affix(self, string: str) -> bool:
        return bool(
            (self.prefix and self.prefix(string))
            or (self.suffix and self.suffix(string))
            or (self.infix and next(self.infix(string), None))
        )

    def tokens(self, span: str) -> tuple[str, ...] | None:
        if span in self.rules or not self.usable:
            return None
        if span.isalpha():  # no prefix, suffix or infix rule matches letters alone (a test checks)
            return (span,)
        out = self._split(span, self.rules)
        if out is None or self._special_inside(out):
            return None
        return tuple(out)

    def _split(self, span: str, rules: frozenset[str]) -> list[str] | None:
        """The tokens of ``span`` by the affix rules, None if a special case is left to apply."""
        prefix, suffix = self.prefix, self.suffix
        prefixes: list[str] = []
        suffixes: list[str] = []
        string = span
        last_size = 0
        while string and len(string) != last_size:  # _split_affixes
            if string in rules or string.isalpha():  # a special case, or no affix left
                break
            last_size = len(string)
            m = prefix(string)
            pre_len = m.end() - m.start() if m else 0
            if pre_len:
                pre = string[:pre_len]
                minus_pre = string[pre_len:]
                if minus_pre and minus_pre in rules:
                    string = minus_pre
                    prefixes.append(pre)
                    break
            m = suffix(string[pre_len:])
            suf_len = m.end() - m.start() if m else 0
            if suf_len:
                suf = string[-suf_len:]
                minus_suf = string[:-suf_len]
                if minus_suf and minus_suf in rules:
                    string = minus_suf
                    suffixes.append(suf)
                    break
            if pre_len and suf_len and (pre_len + suf_len) <= len(string):
                string = string[pre_len:-suf_len]
                prefixes.append(pre)
                suffixes.append(suf)
            elif pre_len:
                string = minus_pre
                prefixes.append(pre)
            elif suf_len:
                string = minus_suf
                suffixes.append(suf)
        out = prefixes
        if string:  # _attach_tokens
            if string in rules:
                return None
            matches = list(self.infix(string)) if self.infix and not string.isalpha() else []
            if not matches or (self.url and self.url(string)):
                out.append(string)
            else:
                start = 0
                for match in matches:
                    infix_start, infix_end = match.start(), match.end()
                    if infix_start == 0:
                        continue
                    if infix_start != start:
                        out.append(string[start:infix_start])
                    if infix_start != infix_end:
                        out.append(string[infix_start:infix_end])
                    start = infix_end
                if string[start:]:
                    out.append(string[start:])
        out.extend(reversed(suffixes))
        return out

    def _special_inside(self, tokens: list[str]) -> bool:
        """Whether a token, or consecutive tokens, could be what spaCy's matcher retokenizes."""
        matched, longest = self.matched, self.longest
        if not self.single.isdisjoint(tokens):
            return True
        for i in range(len(tokens) - 1):
            joined = tokens[i]
            for t in tokens[i + 1 :]:
                joined += t
                if len(joined) > longest:
                    break
                if joined in matched:
                    return True
        return False


_affixes: _Affixes | None = None


def _tokenize_spans(spans: list[str]) -> list[tuple[str, ...]]:
    """The tokens of each span (no whitespace in any): by :class:`_Affixes`, else through spaCy in one
    call, the spans joined by a newline, which is a token of its own, so no rule sees two spans."""
    from spacy.attrs import IDX, LENGTH

    global _affixes
    tok = word_tokenizer()
    if _affixes is None:
        _affixes = _Affixes(tok)
    out = list(map(_affixes.tokens, spans))
    hard = [span for span, t in zip(spans, out, strict=True) if t is None]
    if not hard:
        return out  # type: ignore[return-value]
    joined = "\n".join(hard)
    parts: list[tuple[str, ...]] = []
    cur: list[str] = []
    with _nlp.memory_zone():  # the strings and lexemes of these tokens are freed after
        offsets = tok(joined).to_array([IDX, LENGTH]).tolist()
    for i, n in offsets:
        token = joined[i : i + n]
        if token == "\n":
            parts.append(tuple(cur))
            cur = []
        else:
            cur.append(token)
    parts.append(tuple(cur))
    assert len(parts) == len(hard)
    it = iter(parts)
    return [t if t is not None else next(it) for t in out]


def _has_letter(token: str) -> bool:
    return token.isalpha() or any(map(str.isalpha, token))


def clear_span_cache() -> None:
    """Forget every tokenized span (benchmarks: a rank's first pass)."""
    _spans.clear()
    _old_spans.clear()


def _row(tokens: tuple[str, ...]) -> Row:
    if len(tokens) == 1:  # most spans
        t = tokens[0]
        word = bool(t.strip(PUNCTUATION))  # a character outside PUNCTUATION
        return tokens, 1, word, len(t) if word else 0, _has_letter(t)
    ws = [t for t in tokens if t.strip(PUNCTUATION)]
    return tokens, len(tokens), len(ws), sum(map(len, ws)), sum(map(_has_letter, tokens))


def _rows(spans: list[str]) -> list[Row]:
    """Each span's row, tokenizing the spans not seen yet."""
    global _spans, _old_spans
    missing = set(spans).difference(_spans)
    if missing:
        if len(_spans) + len(missing) > _SPANS_MAX:
            _old_spans, _spans = _spans, {}
            missing = set(spans)
        old = _old_spans
        moved = [s for s in missing if s in old]
        _spans.update(zip(moved, map(old.__getitem__, moved), strict=True))
        new = sorted(missing.difference(moved))
        _spans.update(zip(new, map(_row, _tokenize_spans(new)), strict=True))
    return list(map(_spans.__getitem__, spans))


def words(text: str, lang: str | None = None) -> list[str]:
    """The words of ``text`` in language ``lang``: its segmenter's (``corpus.signals.words``), or as
    datatrove's ``split_into_words(text)`` gives them in English (spaCy's tokens), punctuation
    included, whitespace dropped."""
    segmented = segment(text, lang)
    if segmented is not None:
        return segmented
    return list(chain.from_iterable(map(itemgetter(0), _rows(text.split()))))


# --- Gopher repetition ---------------------------------------------------------------------------------


def _duplicates(parts: list[str]) -> tuple[int, int]:
    """datatrove's ``find_duplicates``: every occurrence after the first, counted and in characters."""
    counts = Counter(parts)
    n = len(parts) - len(counts)
    if not n:
        return 0, 0
    return n, sum(len(p) * (c - 1) for p, c in counts.items() if c > 1)


def _top_ngram_chars(ws: list[str], ids: np.ndarray, lens: np.ndarray, n: int) -> int:
    """datatrove's ``find_top_duplicate(get_n_grams(ws, n))``: the characters of the most frequent
    n-gram (words joined by a space; the first seen among equals; a count of 1 too) times its count.
    Tokens hold no whitespace (but a segmenter's rare one, e.g. Thai "ต่าง ๆ", where datatrove's
    joined strings could make two n-grams one), so an n-gram is its words: their ids, packed in one
    integer where they fit, else hashed (and the winner checked: a hash shared by two n-grams falls
    back to counting tuples)."""
    m = len(ids) - n + 1
    if m <= 0:
        return 0
    bits = 63 // n
    packed = int(ids.max()) < 1 << bits
    key = ids[:m].copy()
    with np.errstate(over="ignore"):
        for i in range(1, n):
            if packed:
                key <<= np.uint64(bits)
                key |= ids[i : i + m]
            else:
                key *= np.uint64(_BASE)
                key ^= ids[i : i + m] + np.uint64(0x632BE59BD9B4E019)
    _, first, counts = np.unique(key, return_index=True, return_counts=True)
    count = int(counts.max())
    pos = int(first[counts == count].min())
    if not packed:
        at = np.flatnonzero(key == key[pos])
        rows = ids[at[:, None] + np.arange(n)]
        if not (rows == rows[0]).all():
            grams = Counter(zip(*(ws[i:] for i in range(n)), strict=False))
            gram, count = max(grams.items(), key=itemgetter(1))  # the first of equals, as most_common
            return (sum(map(len, gram)) + n - 1) * count
    return (int(lens[pos : pos + n].sum()) + n - 1) * count


#: powers of an odd 64-bit base and of its inverse (mod 2^64), grown as needed
_BASE = 0x9E3779B97F4A7C15
_pow = np.ones(1, dtype=np.uint64)
_inv_pow = np.ones(1, dtype=np.uint64)


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """B^k and B^-k mod 2^64 for k < n (at least)."""
    global _pow, _inv_pow
    if len(_pow) < n:
        size = max(n, 2 * len(_pow))
        _pow = np.full(size, _BASE, dtype=np.uint64)
        _inv_pow = np.full(size, pow(_BASE, -1, 1 << 64), dtype=np.uint64)
        _pow[0] = _inv_pow[0] = 1
        _pow = np.cumprod(_pow, dtype=np.uint64)  # uint64 arithmetic wraps: mod 2^64
        _inv_pow = np.cumprod(_inv_pow, dtype=np.uint64)
    return _pow, _inv_pow


def _dup_ngram_chars(joined: str, prefix: np.ndarray, weight: np.ndarray, off: np.ndarray, n: int) -> int:
    """datatrove's ``find_all_duplicate(ws, n)``: left to right, an n-gram (words joined with no
    separator) seen before counts its characters and the scan jumps past it; otherwise it is
    remembered and the scan moves one word.

    ``joined`` is ``"".join(ws)``, ``off`` the offsets of the words in it; ``prefix`` and ``weight``
    give each n-gram a polynomial hash. Only n-grams whose hash occurs twice can be duplicates: those
    are compared as strings, so the result is exact whatever the hash."""
    m = len(off) - n  # len(ws) - n + 1
    if m <= 1:
        return 0
    a, b = off[:m], off[n:]
    with np.errstate(over="ignore"):
        h = (prefix[b] - prefix[a]) * weight[a]
    # n-grams whose hash occurs twice: first by the hash's top bits (a table 4-8 times the n-grams),
    # then among those by the whole hash
    bits = min(m.bit_length() + 3, 32)
    bucket = (h >> np.uint64(64 - bits)).astype(np.intp)
    candidates = np.flatnonzero(np.bincount(bucket, minlength=1 << bits)[bucket] > 1)
    if not len(candidates):
        return 0
    candidates = candidates[_repeated(h[candidates])]
    if not len(candidates):
        return 0
    starts_ = a[candidates].tolist()
    ends_ = b[candidates].tolist()
    pos = candidates.tolist()
    grams = [joined[s:e] for s, e in zip(starts_, ends_, strict=True)]
    first = dict(zip(reversed(grams), reversed(pos), strict=True))  # gram -> its first position
    # The scan finds a gram a duplicate iff it visited an earlier position holding it. A gram's first
    # position cannot be one; walk the others, with the ranges the scan skipped so far (the n-1
    # positions after each duplicate) to tell whether it visited a gram's first position.
    seen: set[str] = set()
    starts: list[int] = []  # skipped ranges [start, end), in order
    ends: list[int] = []
    total = 0
    for i, g in zip(pos, grams, strict=True):
        if ends and i < ends[-1]:
            continue  # skipped
        f = first[g]
        if f == i:
            continue
        if g in seen or _visited(f, starts, ends):
            total += len(g)
            starts.append(i + 1)
            ends.append(i + n)
        else:
            seen.add(g)
    return total


def _repeated(values: np.ndarray) -> np.ndarray:
    """Whether each value occurs more than once in ``values`` (one sort, no counting)."""
    order = np.argsort(values)
    ordered = values[order]
    equal = ordered[1:] == ordered[:-1]
    repeated = np.zeros(len(values), dtype=bool)
    repeated[1:] = equal
    repeated[:-1] |= equal
    out = np.empty_like(repeated)
    out[order] = repeated
    return out


def _visited(pos: int, starts: list[int], ends: list[int]) -> bool:
    """Whether the scan visited ``pos``, given the ranges it skipped so far."""
    k = bisect_right(starts, pos) - 1
    return k < 0 or pos >= ends[k]


def _ngram_signals(ws: list[str], n_chars: int) -> dict[str, float]:
    lens = np.fromiter(map(len, ws), dtype=np.int64, count=len(ws))
    # word -> an id, dense in the document (fewer ids than words: zip stops at the words)
    index = dict(zip(dict.fromkeys(ws), range(len(ws)), strict=False))
    ids = np.fromiter(map(index.__getitem__, ws), dtype=np.uint64, count=len(ws))
    out = {f"top_{n}gram_char_fraction": _top_ngram_chars(ws, ids, lens, n) / n_chars for n in TOP_NGRAMS}
    joined = "".join(ws)
    codes = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.uint64)
    powers, inv_powers = _powers(len(codes) + 1)
    # prefix[k] = sum_{j<k} c_j B^-j; the hash of joined[a:b] is (prefix[b] - prefix[a]) * B^a
    prefix = np.zeros(len(codes) + 1, dtype=np.uint64)
    np.cumsum(codes * inv_powers[: len(codes)], dtype=np.uint64, out=prefix[1:])
    off = np.zeros(len(ws) + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    for n in DUP_NGRAMS:
        out[f"dup_{n}gram_char_fraction"] = _dup_ngram_chars(joined, prefix, powers, off, n) / n_chars
    return out


# --- C4 --------------------------------------------------------------------------------------------


def _c4_lines(lines: list[str], phrases: bool) -> tuple[int, float, float, float]:
    """C4's line rules (TFDS ``clean_page``) over the lines of a document: the non-blank lines it removes,
    their share of the characters of the non-blank lines (both stripped), and whether it drops the page
    for "lorem ipsum" or for "{".

    Each stripped line, in C4's order: a word over 1000 characters -> removed; citations ([1], [edit],
    [citation needed]) cut out; no end mark (. ? ! ") or an ellipsis end -> removed; fewer than 5 words
    -> removed; "lorem ipsum" -> the page is dropped; "javascript" -> removed; "{" -> the page is dropped;
    a cookie / terms-of-use phrase -> removed. Blank lines (removed by C4 too) are not counted. The page
    rules are judged as if the other page rule were off (C4 stops at the first).

    ``lines`` are the stripped non-blank lines; ``phrases``: whether the lower-cased document holds
    "lorem ipsum", "javascript" or a policy phrase (if not, only a line whose citations are cut out
    can, so the others are not lower-cased)."""
    removed = removed_chars = total_chars = 0
    lorem = brace = False
    for line in lines:
        total_chars += len(line)
        if len(line) > C4_MAX_WORD_LENGTH and any(len(w) > C4_MAX_WORD_LENGTH for w in line.split()):
            removed += 1
            removed_chars += len(line)
            continue
        cited = "[" in line
        cut = C4_CITATION.sub("", line) if cited else line
        if not cut.endswith(C4_END_MARKS) or cut.endswith(C4_ELLIPSIS):
            removed += 1
            removed_chars += len(line)
            continue
        if len(cut.split()) < C4_MIN_WORDS_PER_LINE:
            removed += 1
            removed_chars += len(line)
            continue
        if not (phrases or cited):
            brace = brace or "{" in cut
            continue
        lower = cut.lower()
        lorem = lorem or "lorem ipsum" in lower
        if "javascript" in lower:
            removed += 1
            removed_chars += len(line)
            continue
        brace = brace or "{" in cut
        if any(p in lower for p in C4_POLICY_SUBSTRINGS):
            removed += 1
            removed_chars += len(line)
    return removed, removed_chars / total_chars if total_chars else 0.0, float(lorem), float(brace)


# --- every signal ------------------------------------------------------------------------------------

SIGNALS = (
    # Gopher quality
    "word_count",
    "mean_word_length",
    "hash_word_ratio",
    "ellipsis_word_ratio",
    "bullet_line_fraction",
    "ellipsis_line_fraction",
    "alpha_word_fraction",
    "stop_word_count",
    # Gopher repetition
    "dup_line_fraction",
    "dup_line_char_fraction",
    "dup_paragraph_fraction",
    "dup_paragraph_char_fraction",
    *(f"top_{n}gram_char_fraction" for n in TOP_NGRAMS),
    *(f"dup_{n}gram_char_fraction" for n in DUP_NGRAMS),
    # C4
    "c4_removed_lines",
    "c4_removed_char_fraction",
    "lorem_ipsum",
    "curly_brace",
    "javascript_line_fraction",
    "policy_line_fraction",
    # this project's
    "terminal_punct_line_fraction",
    "char_count",
)


def heuristic_signals(text: str, lang: str | None = None) -> dict[str, float]:
    """Every Gopher/C4 signal of ``text`` in language ``lang`` (fractions in [0, 1], counts as floats,
    flags as 0/1); an empty text has every signal 0. ``stop_word_count`` is absent for a language
    without a stop-word list (a missing value, not a count of 0)."""
    stops = stop_words(lang)
    if not text:
        return {k: 0.0 for k in SIGNALS if stops is not None or k != "stop_word_count"}
    segmented = segment(text, lang)
    if segmented is None:
        rows = _rows(text.split())
        ws = list(chain.from_iterable(map(itemgetter(0), rows)))
    else:  # one row per word: each is a token of its own
        ws = segmented
        distinct = {w: _row((w,)) for w in dict.fromkeys(ws)}
        rows = list(map(distinct.__getitem__, ws))
    n_tok = len(ws)
    n_wd = sum(map(itemgetter(2), rows))
    n_chars = len(text)
    lines = text.splitlines()
    n_lines = len(lines)
    nonblank = list(filter(None, map(str.strip, lines)))
    n_nonblank = len(nonblank) or 1
    # the stripped lines, each between newlines (none holds a line break: splitlines cut there), so a
    # line's first and last characters are counted with str.count; lower-casing is per character (but
    # a final sigma, which no ASCII phrase holds), so a phrase is in the lower-cased whole iff in a line
    joined = "\n" + "\n".join(nonblank) + "\n"
    lower = joined.lower()
    js = "javascript" in lower
    policy = any(p in lower for p in C4_POLICY_SUBSTRINGS)

    paragraphs = _PARAGRAPH_SPLIT.split(text.strip())
    dup_paras, dup_para_chars = _duplicates(paragraphs)
    rep_lines = _LINE_SPLIT.split(text)
    dup_lines, dup_line_chars = _duplicates(rep_lines)
    c4_removed, c4_removed_frac, lorem, brace = _c4_lines(nonblank, js or policy or "lorem ipsum" in lower)

    signals = {
        # Gopher quality (GopherQualityFilter): words are the tokens that are not only punctuation
        "word_count": float(n_wd),
        "mean_word_length": sum(map(itemgetter(3), rows)) / n_wd if n_wd else 0.0,
        "hash_word_ratio": text.count("#") / n_tok if n_tok else 0.0,
        "ellipsis_word_ratio": (text.count("...") + text.count("…")) / n_tok if n_tok else 0.0,
        # (a blank line neither starts with a bullet nor ends with an ellipsis)
        "bullet_line_fraction": sum(joined.count("\n" + b) for b in GOPHER_BULLETS) / n_lines,
        "ellipsis_line_fraction": sum(joined.count(e + "\n") for e in GOPHER_ELLIPSES) / n_lines,
        "alpha_word_fraction": sum(map(itemgetter(4), rows)) / n_tok if n_tok else 0.0,
        **({"stop_word_count": float(len(stops.intersection(ws)))} if stops is not None else {}),
        # Gopher repetition (GopherRepetitionFilter)
        "dup_line_fraction": dup_lines / len(rep_lines),
        "dup_line_char_fraction": dup_line_chars / n_chars,
        "dup_paragraph_fraction": dup_paras / len(paragraphs),
        "dup_paragraph_char_fraction": dup_para_chars / n_chars,
        **_ngram_signals(ws, n_chars),
        # C4 (TFDS clean_page)
        "c4_removed_lines": float(c4_removed),
        "c4_removed_char_fraction": c4_removed_frac,
        "lorem_ipsum": lorem,
        "curly_brace": brace,
        "javascript_line_fraction": sum("javascript" in ln.lower() for ln in nonblank) / n_nonblank
        if js
        else 0.0,
        "policy_line_fraction": sum(any(p in ln.lower() for p in C4_POLICY_SUBSTRINGS) for ln in nonblank)
        / n_nonblank
        if policy
        else 0.0,
        # this project's (each mark one character: a line ends with one at most)
        "terminal_punct_line_fraction": sum(joined.count(p + "\n") for p in TERMINAL_PUNCT) / n_nonblank,
        "char_count": float(n_chars),
    }
    return signals
