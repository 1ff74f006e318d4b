"""Known-bad content: an operator's list of exact keys of texts that must never be stored, removed
physically by extract with only their hashes logged.

Why a list of hashes and not of texts: the content is what nobody may keep, the list included. An
entry is the exact-dedup key of a text (:func:`corpus.text.normalize.text_key`, spelt
``KEY_VERSION:hex`` as the holdout spells it; ``corpus known-bad-keys`` makes them), so a copy that
differs in case, whitespace or Unicode form is the same entry. The key's version is part of each entry:
a list made with another key version is refused, never silently matching nothing. The build records the
list by its digest (the sorted keys), not its path. docs/ingest-and-filters.md ("Known-bad content").
"""

from __future__ import annotations

import re
from pathlib import Path

from corpus.model.digest import sha256_hex
from corpus.model.errors import UserError
from corpus.text.inputs import InputRefused, open_regular
from corpus.text.normalize import KEY_VERSION, text_key

#: one entry: the key's version, a colon, 32 hex digits
ENTRY = re.compile(r"([0-9a-z]+):([0-9a-f]{32})")


def spelt_key(text: str) -> str:
    """The entry a text's copies match: ``KEY_VERSION:hex``."""
    return f"{KEY_VERSION}:{text_key(text).hex()}"


def read_known_bad(path: Path) -> frozenset[bytes]:
    """The keys of a list file (one a line; ``#`` comments and blank lines skipped), refused in one line
    naming the file and line for anything else, or an entry of another key version."""
    try:
        with open_regular(Path(path)) as f:
            data = f.read()
    except InputRefused:
        raise UserError(f"known-bad list {path}: not a regular file") from None
    except OSError as e:
        raise UserError(f"known-bad list {path}: {e.strerror or e}") from None
    try:
        lines = data.decode("ascii").split("\n")
    except UnicodeDecodeError as e:
        raise UserError(f"known-bad list {path}: not ASCII (byte {e.start})") from None
    keys = set()
    for n, line in enumerate(lines, 1):
        entry = line.split("#", 1)[0].strip().lower()
        if not entry:
            continue
        m = ENTRY.fullmatch(entry)
        if m is None:
            raise UserError(f"known-bad list {path} line {n}: not a key VERSION:32-HEX-DIGITS")
        if m.group(1) != KEY_VERSION:
            raise UserError(
                f"known-bad list {path} line {n}: a key of version {m.group(1)}, this build's keys are "
                f"{KEY_VERSION}: make the list again (corpus known-bad-keys)"
            )
        keys.add(bytes.fromhex(m.group(2)))
    return frozenset(keys)


def list_digest(keys: frozenset[bytes]) -> str:
    """What the build's config records of a list: the sha256 of its sorted keys ("" for none)."""
    return sha256_hex(b"".join(sorted(keys))) if keys else ""
