"""Word-list rates: the share of a text's characters that are on its language's list of obscene and
offensive words, for the 24 languages glin-profanity ships a list of (assets/badwords/README.md).

Why lists and a rate: the toxicity model is English only; for other languages the field's cheap signal
is a word list (C4's "bad words" filter, from the LDNOOBW lists these lists come from). A list is blunt
(Spanish "asesinato", Portuguese "amador" are on it), so the value is stored and a version chooses a
threshold (``max_scores = { badword_fraction = 0.005 }``); nothing is dropped here. Spaced languages
match whole words (a token, lower-cased, with or without its surrounding punctuation) and multi-word
entries as consecutive words; Chinese, Japanese and Thai, written without spaces, match as substrings,
longest first (an entry in Latin letters as a whole word). docs/ingest-and-filters.md ("Word lists").
"""

from __future__ import annotations

import json
import re
from functools import cache
from itertools import repeat
from pathlib import Path
from typing import NamedTuple

import glin_profanity

from corpus.model.digest import sha256_hex

#: the lists' directory in the installed package
LISTS_DIR = Path(glin_profanity.__file__).parent / "data" / "dictionaries"
#: fastText language code -> the package's list
LANG_LISTS = {
    "ar": "arabic",
    "cs": "czech",
    "da": "danish",
    "de": "german",
    "en": "english",
    "eo": "esperanto",
    "es": "spanish",
    "fa": "persian",
    "fi": "finnish",
    "fr": "french",
    "hi": "hindi",
    "hu": "hungarian",
    "it": "italian",
    "ja": "japanese",
    "ko": "korean",
    "nl": "dutch",
    "no": "norwegian",
    "pl": "polish",
    "pt": "portuguese",
    "ru": "russian",
    "sv": "swedish",
    "th": "thai",
    "tr": "turkish",
    "zh": "chinese",
}
#: languages written without spaces between words: entries match as substrings
UNSPACED = frozenset({"ja", "th", "zh"})
#: what a token may be wrapped in (stripped before a second lookup)
WRAPPING = "\"'“”‘’«»()[]{}.,;:!?¡¿…—–-*_/\\|<>"


def _entries(lang: str) -> list[str]:
    data = json.loads((LISTS_DIR / f"{LANG_LISTS[lang]}.json").read_text(encoding="utf-8"))
    return sorted({" ".join(w.lower().split()) for w in data["words"] if w.strip()})


class _SpacedList(NamedTuple):
    """A spaced language's list, shaped for :func:`_matched_chars`."""

    single: frozenset[str]  # one-word entries
    multi: dict[str, list[tuple[str, ...]]]  # multi-word entries by their first word
    words: frozenset[str]  # both: a page with none of them among its stripped words has no match
    edged: tuple[str, ...]  # one-word entries that begin or end with a wrapping character (``a.q.``)


@cache
def _spaced(lang: str) -> _SpacedList:
    single, multi = set(), {}
    for entry in _entries(lang):
        words = tuple(entry.split())
        if len(words) == 1:
            single.add(entry)
        else:
            multi.setdefault(words[0], []).append(words)
    edged = tuple(sorted(e for e in single if e[0] in WRAPPING or e[-1] in WRAPPING))
    return _SpacedList(frozenset(single), multi, frozenset(single | multi.keys()), edged)


@cache
def _unspaced(lang: str) -> re.Pattern:
    """The list as one pattern, longest first (no lookarounds: they cost 8x on every position)."""
    entries = sorted(_entries(lang), key=lambda e: (-len(e), e))
    return re.compile("|".join(re.escape(e).replace(r"\ ", r"\s+") for e in entries))


_LATIN = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


def _unspaced_matches(text: str, lang: str) -> list[int]:
    """The lengths of the list's matches, left to right; a match in Latin letters and digits (``sm``,
    ``xx``) counts as a whole word only, never inside a word of Latin text (``SMP``, ``xxhash``):
    otherwise the search goes on from its next character."""
    pattern, found, at = _unspaced(lang), [], 0
    while (m := pattern.search(text, at)) is not None:
        start, end = m.span()
        word = m.group()
        if word.isascii() and (
            (start and text[start - 1] in _LATIN) or (end < len(text) and text[end] in _LATIN)
        ):
            at = start + 1
            continue
        found.append(end - start)
        at = end
    return found


def _matched_chars(text: str, lang: str) -> tuple[int, int]:
    """(matches, characters matched) of ``lang``'s list in the lower-cased ``text``."""
    if lang in UNSPACED:
        found = _unspaced_matches(text, lang)
        return len(found), sum(found)
    single, multi, words, edged = _spaced(lang)
    tokens = text.split()
    stripped = list(map(str.strip, tokens, repeat(WRAPPING, len(tokens))))
    found = words.intersection(stripped)
    # a token that is an entry only as it stands (``a.q.``, stripped ``a.q``) is an edged entry; its
    # substring test spares most pages a second pass over their tokens
    raw_only = [e for e in edged if e in text and e.strip(WRAPPING) not in single]
    if not found and not raw_only:
        return 0, 0
    # a token counts once: as its stripped word when that is an entry, else as itself. Each entry found
    # is counted by list.count, each multi-word entry's first word found by list.index (in C), not by
    # a loop over the page's words (common first words, "one", "how", are on most pages)
    count = chars = 0
    for word in found.intersection(single):
        n = stripped.count(word)
        count, chars = count + n, chars + n * len(word)
    for raw in raw_only:
        n = tokens.count(raw)
        count, chars = count + n, chars + n * len(raw)
    for first in found.intersection(multi):
        at = stripped.index(first)
        while True:
            for entry in multi[first]:
                if tuple(stripped[at : at + len(entry)]) == entry:
                    count += 1
                    chars += sum(map(len, entry)) + len(entry) - 1
            try:
                at = stripped.index(first, at + 1)
            except ValueError:
                break
    return count, chars


def badword_signals(text: str, lang: str) -> dict[str, float]:
    """``badword_count`` (entries found) and ``badword_fraction`` (their characters over the text's,
    rounded to 6 digits) for a language with a list; none for another."""
    if lang not in LANG_LISTS or not text:
        return {}
    lower = text.lower()
    count, chars = _matched_chars(lower, lang)
    return {"badword_count": float(count), "badword_fraction": round(min(1.0, chars / len(lower)), 6)}


def badwords_id() -> str:
    """The lists' package and version and the digest of every list file (in the annotate config)."""
    digest = sha256_hex(
        b"".join(
            name.encode() + b"\0" + (LISTS_DIR / f"{name}.json").read_bytes()
            for name in sorted(LANG_LISTS.values())
        )
    )
    return f"glin-profanity-{glin_profanity.__version__}:{digest[:16]}"
