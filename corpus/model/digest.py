"""Canonical bytes and digests: the only way anything in the pipeline gets an identity.

Everything reproducible is a pure function of content: canonical JSON (sorted keys, no NaN, UTF-8,
compact separators) hashed with sha256, printed as ``sha256:<hex>`` where a digest names an artifact.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20


def canonical_json(value: Any) -> bytes:
    """Bytes that depend only on the value, never on dict insertion order or platform."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def json_digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value``."""
    return "sha256:" + sha256_hex(canonical_json(value))


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def text_digest(text: str) -> str:
    return sha256_hex(text)


def doc_id_for(text_digest_hex: str, source: str) -> str:
    """doc_id = H(text_digest, source): content-derived, so the same document gets the same id anywhere.

    32 hex characters (128 bits) keep ids short in indices while collisions stay out of reach.
    """
    return sha256_hex(f"{source}\x00{text_digest_hex}")[:32]


def _framed(part: str | bytes | int) -> bytes:
    """A part as it enters a stable hash: its length (8 bytes, little-endian), then its UTF-8 bytes."""
    if isinstance(part, int):
        part = str(part)
    if isinstance(part, str):
        part = part.encode("utf-8")
    return len(part).to_bytes(8, "little") + part


def stable_hash64(*parts: str | bytes | int) -> int:
    """A 64-bit unsigned hash of the parts, independent of PYTHONHASHSEED (unlike ``hash``)."""
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(_framed(part))
    return int.from_bytes(h.digest(), "little")


def stable_hash64_each(prefix: Sequence[str | bytes | int], lasts: Iterable[str | bytes | int]) -> list[int]:
    """``stable_hash64(*prefix, last)`` for each of ``lasts``: the prefix hashed once and its state
    copied per item (a loader rank orders every shard of a bucket at each start: 10^5 of them)."""
    head = hashlib.blake2b(digest_size=8)
    for part in prefix:
        head.update(_framed(part))
    out = []
    for last in lasts:
        h = head.copy()
        h.update(_framed(last))
        out.append(int.from_bytes(h.digest(), "little"))
    return out
