"""Text normalization for dedup keys and shingles. Versioned: changing it changes every dedup decision.

Version 1: Unicode NFKC, lower-case, every character that is neither a word character nor whitespace
(punctuation and symbols) removed, runs of whitespace folded to one space, ends stripped. So
"Hello,  World!" and "hello world" are the same text, while letters, digits and word order still count.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

NORMALIZATION_VERSION = "1"

_NOT_WORD_OR_SPACE = re.compile(r"[^\w\s]+")
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


def text_key(text: str) -> bytes:
    """16-byte key of a document's normalized text (exact dedup groups documents by it)."""
    return hashlib.blake2b(
        normalize_text(text).encode("utf-8"),
        digest_size=16,
        person=b"exact-v" + NORMALIZATION_VERSION.encode(),
    ).digest()


def line_key(line: str) -> bytes | None:
    """8-byte key of one line's normalized form; None for lines with nothing left after normalizing
    (blank or punctuation-only lines are never counted and never removed)."""
    norm = normalize_text(line)
    if not norm:
        return None
    return hashlib.blake2b(
        norm.encode("utf-8"), digest_size=8, person=b"line-v" + NORMALIZATION_VERSION.encode()
    ).digest()
