"""Known-bad content: an operator's list of hashes of texts that must never be stored, removed
physically by extract with only their hashes logged.

Why hashes and not texts: the content is what nobody may keep, the list included. An exact entry is
the exact-dedup key of a text (:func:`corpus.text.normalize.text_key`, spelt ``KEY_VERSION:hex`` as
the holdout spells it), so a copy differing in case, whitespace or Unicode form is the same entry; a
near entry (``KEY_VERSION:near:hex``) is the text's MinHash signature under the fixed parameters of
:mod:`hpc_jobs.extract.known_bad`, for copies with a few words changed. ``corpus known-bad-keys``
makes both. The key's version is part of each entry: a list made with another is refused, never
silently matching nothing. The build records the list by its digest, not its path.
docs/ingest-and-filters.md ("Known-bad content").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus.model.digest import sha256_hex
from corpus.model.errors import UserError
from corpus.text.inputs import InputRefused, open_regular
from corpus.text.normalize import KEY_VERSION, text_key

#: one entry: the key's version, a colon, 32 hex digits; or a near entry, a signature of NEAR_PERM
#: big-endian 64-bit values
ENTRY = re.compile(r"([0-9a-z]+):([0-9a-f]{32})")
NEAR_PERM = 112
NEAR_ENTRY = re.compile(rf"([0-9a-z]+):near:([0-9a-f]{{{NEAR_PERM * 16}}})")


@dataclass(frozen=True)
class KnownBad:
    """A list's exact keys and near signatures ((n, NEAR_PERM) uint64)."""

    keys: frozenset[bytes]
    near: np.ndarray

    def __bool__(self) -> bool:
        return bool(self.keys) or len(self.near) > 0

    @property
    def digest(self) -> str:
        """What the build's config records: the sha256 of the sorted keys, then the sorted signatures
        ("" for an empty list)."""
        if not self:
            return ""
        rows = sorted(r.astype(">u8").tobytes() for r in self.near)
        return sha256_hex(b"".join(sorted(self.keys)) + b"near" + b"".join(rows))


NO_LIST = KnownBad(frozenset(), np.zeros((0, NEAR_PERM), np.uint64))


def spelt_key(text: str) -> str:
    """The entry a text's copies match: ``KEY_VERSION:hex``."""
    return f"{KEY_VERSION}:{text_key(text).hex()}"


def spelt_near(signature: np.ndarray) -> str:
    """The near entry of a signature: ``KEY_VERSION:near:hex``."""
    return f"{KEY_VERSION}:near:{np.asarray(signature, np.uint64).astype('>u8').tobytes().hex()}"


def read_known_bad(path: Path) -> KnownBad:
    """The entries of a list file (one a line; ``#`` comments and blank lines skipped), refused in one
    line naming the file and line for anything else, or an entry of another key version."""
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
    keys, near = set(), set()
    for n, line in enumerate(lines, 1):
        entry = line.split("#", 1)[0].strip().lower()
        if not entry:
            continue
        m = ENTRY.fullmatch(entry) or NEAR_ENTRY.fullmatch(entry)
        if m is None:
            raise UserError(
                f"known-bad list {path} line {n}: not a key VERSION:32-HEX-DIGITS or VERSION:near:SIGNATURE"
            )
        if m.group(1) != KEY_VERSION:
            raise UserError(
                f"known-bad list {path} line {n}: a key of version {m.group(1)}, this build's keys are "
                f"{KEY_VERSION}: make the list again (corpus known-bad-keys)"
            )
        (keys if m.re is ENTRY else near).add(bytes.fromhex(m.group(2)))
    signatures = np.array([np.frombuffer(r, ">u8") for r in sorted(near)], np.uint64).reshape(-1, NEAR_PERM)
    return KnownBad(frozenset(keys), signatures)
