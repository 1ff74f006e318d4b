"""Text normalization for dedup keys and shingles. Versioned: changing one changes every decision made
with it, so each stage's phase key and manifest carry the version it used.

* Exact and line keys (``KEY_VERSION``, :func:`key_form`): NFKC, lower-case, whitespace runs folded to
  one space, ends stripped; punctuation, operators and digits count.
* MinHash shingles (``NORMALIZATION_VERSION``, :func:`normalize_text`, :func:`shingle_units`): the
  key form without punctuation; the units are words, or characters for a document written mostly in
  an unspaced script (:func:`is_unspaced`: ``3 u >= o`` over its letters, :data:`UNSPACED_SCRIPTS`).
  ASCII text is never unspaced.

The rules, their thresholds and why: docs/dedup.md ("Normalization", "Shingles per script").
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

NORMALIZATION_VERSION = "2"
KEY_VERSION = "2"

_NOT_WORD_OR_SPACE = re.compile(r"[^\w\s]+")
#: n of the character n-grams of unspaced documents (part of NORMALIZATION_VERSION, not a setting)
CHAR_NGRAM = 5
#: (script, first, last code point): the blocks of scripts written without spaces between words; a
#: letter in one of them is an "unspaced" letter (Hangul is written with spaces: not here)
UNSPACED_SCRIPTS: tuple[tuple[str, int, int], ...] = (
    ("Thai", 0x0E00, 0x0E7F),
    ("Lao", 0x0E80, 0x0EFF),
    ("Tibetan", 0x0F00, 0x0FFF),
    ("Myanmar", 0x1000, 0x109F),
    ("Khmer", 0x1780, 0x17FF),
    ("Tai Le", 0x1950, 0x197F),
    ("New Tai Lue", 0x1980, 0x19DF),
    ("Khmer", 0x19E0, 0x19FF),
    ("Tai Tham", 0x1A20, 0x1AAF),
    ("Balinese", 0x1B00, 0x1B7F),
    ("Han", 0x2E80, 0x2FDF),  # radicals (NFKC maps the Kangxi ones to ideographs)
    ("Han", 0x3000, 0x303F),  # iteration marks and numerals of the CJK symbols block (々 〆 〇 〻)
    ("Hiragana", 0x3040, 0x309F),
    ("Katakana", 0x30A0, 0x30FF),
    ("Bopomofo", 0x3100, 0x312F),
    ("Han", 0x3190, 0x319F),  # kanbun
    ("Bopomofo", 0x31A0, 0x31BF),
    ("Katakana", 0x31F0, 0x31FF),
    ("Han", 0x3400, 0x4DBF),
    ("Han", 0x4E00, 0x9FFF),
    ("Yi", 0xA000, 0xA4CF),
    ("Javanese", 0xA980, 0xA9DF),
    ("Myanmar", 0xA9E0, 0xA9FF),
    ("Myanmar", 0xAA60, 0xAA7F),
    ("Tai Viet", 0xAA80, 0xAADF),
    ("Han", 0xF900, 0xFAFF),
    ("Katakana", 0xFF65, 0xFF9F),  # half-width (NFKC makes them full-width)
    ("Katakana", 0x1AFF0, 0x1B16F),  # kana supplement and extensions
    ("Han", 0x20000, 0x3FFFF),  # extensions B-I and compatibility supplement
)
#: a letter: a word character other than a decimal digit and the underscore
LETTER = re.compile(r"[^\W\d_]")
#: a letter of an unspaced script
UNSPACED_LETTER = re.compile(
    r"(?=[^\W\d_])[" + "".join(f"{chr(lo)}-{chr(hi)}" for _, lo, hi in UNSPACED_SCRIPTS) + "]"
)
#: an unspaced letter counts this many times against the other letters (see the module docstring)
UNSPACED_WEIGHT = 3
_WHITESPACE = re.compile(r"\s+")
#: the same rule for ASCII text as a translate table (str.translate has an ASCII fast path)
_ASCII_DROP = str.maketrans(
    {c: None for c in range(128) if not (chr(c).isalnum() or chr(c) == "_" or chr(c).isspace())}
)


def normalize_text(text: str) -> str:
    """The normalized form two texts must share to count as duplicates (see the module docstring)."""
    if text.isascii():  # NFKC is the identity on ASCII; str.split() splits on exactly what \s matches
        return " ".join(text.lower().translate(_ASCII_DROP).split())
    text = unicodedata.normalize("NFKC", text).lower()
    text = _NOT_WORD_OR_SPACE.sub("", text)
    return _WHITESPACE.sub(" ", text).strip()


def is_unspaced(normalized: str) -> bool:
    """Whether a text already passed through :func:`normalize_text` is shingled by characters: it has
    a letter of an unspaced script and ``UNSPACED_WEIGHT`` times their count is at least the count of its
    other letters (see the module docstring). A pure function of the text; ASCII text is never unspaced."""
    if normalized.isascii():
        return False
    unspaced = len(UNSPACED_LETTER.findall(normalized))
    return unspaced > 0 and UNSPACED_WEIGHT * unspaced >= len(LETTER.findall(normalized)) - unspaced


def shingle_units(text: str) -> tuple[list[str], bool]:
    """The units a document's shingles are made of, and whether they are characters: the words of
    ``normalize_text(text)``, or, when it :func:`is_unspaced`, its characters other than whitespace.
    (The MinHash kernel computes the same units from bytes; this is the reference.)"""
    normalized = normalize_text(text)
    if is_unspaced(normalized):
        return list(normalized.replace(" ", "")), True
    return normalized.split(), False


def key_form(text: str) -> str:
    """The form two texts (or lines) must share to be the same for exact and line dedup."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    return " ".join(text.lower().split())


def text_key(text: str) -> bytes:
    """16-byte key of a document's key form (exact dedup groups documents by it)."""
    return hashlib.blake2b(
        key_form(text).encode("utf-8"), digest_size=16, person=b"exact-v" + KEY_VERSION.encode()
    ).digest()


def line_key(line: str) -> bytes | None:
    """8-byte key of one line's key form; None for a line without a letter or digit (blank lines and
    lines of punctuation alone, such as ``}`` or ``----``, are never counted and never removed)."""
    form = key_form(line)
    if not any(c.isalnum() for c in form):
        return None
    return hashlib.blake2b(
        form.encode("utf-8"), digest_size=8, person=b"line-v" + KEY_VERSION.encode()
    ).digest()
