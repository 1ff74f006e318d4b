"""Text normalization for dedup keys and shingles. Versioned: changing one changes every decision
made with it, so each stage's phase key and manifest carry the version it used.

* Exact and line keys (``KEY_VERSION`` 2, :func:`key_form`): Unicode NFKC, lower-case, runs of
  whitespace folded to one space, ends stripped. Punctuation, operators and digits count: ``3.14`` is
  not ``314``, ``x = a + b;`` is not ``x = a - b;`` and ``} else {`` is not ``else:`` (version 1 removed
  them, which merged different texts of code, numbers and prose).
* MinHash shingles (``NORMALIZATION_VERSION`` 1, :func:`normalize_text`): as above, and every character
  that is neither a word character nor whitespace removed, so "Hello,  World!" and "hello world" share
  their shingles: near-duplicate detection is about the words.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

NORMALIZATION_VERSION = "1"
KEY_VERSION = "2"

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
