"""Who wins when documents collide: the keeper of an exact-duplicate group, the representative of a
near-duplicate cluster. Both are lexicographic keys, so the winner is the same on any rank count.

The keys are also encoded as bytes whose byte order is the key order, so a shuffle that sorts
(key, payload) hands the winner over first.
"""

from __future__ import annotations

import struct

from corpus.model import Document
from corpus.model.tiers import source_rank

#: documents without a crawl date lose to any dated copy
UNDATED = "9999-99-99"


def crawl_date_of(doc: Document) -> str:
    return doc.crawl_date[:10] if doc.crawl_date else UNDATED


def exact_keeper_key(doc: Document) -> tuple[int, str, str]:
    """Exact duplicates: most trusted source tier (``corpus.model.tiers``: the curated original beats an
    earlier web copy of it, and its tokens stay in the curated bucket), then earliest crawl date, then
    doc_id."""
    return (source_rank(doc.source_tier), crawl_date_of(doc), doc.doc_id)


def representative_fields(
    tier: str, quality: float, crawl_date: str, doc_id: str
) -> tuple[int, float, str, str]:
    """Near duplicates: most trusted tier, then highest quality score, then earliest crawl date, then
    doc_id; from the fields alone, so a table row (``corpus.formats.metadata``) has the same key."""
    return (source_rank(tier), -float(quality), crawl_date[:10] if crawl_date else UNDATED, doc_id)


def representative_key(doc: Document) -> tuple[int, float, str, str]:
    """:func:`representative_fields` of a document."""
    return representative_fields(doc.source_tier, doc.scores.get("quality", 0.0), doc.crawl_date, doc.doc_id)


def doc_id_bytes(doc_id: str) -> bytes:
    """The 16 raw bytes of a doc_id (``corpus.model.digest.doc_id_for``: 32 hex characters)."""
    try:
        raw = bytes.fromhex(doc_id)
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise ValueError(f"doc_id {doc_id!r} is not 32 hex characters (corpus.model.digest.doc_id_for)")
    return raw


def encode_exact_keeper_key(doc: Document) -> bytes:
    """``exact_keeper_key`` as 1 + 10 + 16 bytes (tier rank, date, raw doc_id); byte order = key order."""
    rank, date, doc_id = exact_keeper_key(doc)
    return bytes([rank]) + date.encode("ascii", "replace").ljust(10, b"9")[:10] + doc_id_bytes(doc_id)


_QUALITY = struct.Struct(">Q")


def _sortable_float(x: float) -> bytes:
    """8 bytes whose unsigned big-endian order is the float order (the usual sign-flip trick)."""
    (bits,) = struct.unpack(">Q", struct.pack(">d", x))
    bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | (1 << 63)
    return _QUALITY.pack(bits)


def encode_representative_key(doc: Document) -> bytes:
    """``representative_key`` as 1 + 8 + 10 + 16 bytes; byte order = key order."""
    return encode_representative(representative_key(doc))


def encode_representative(key: tuple[int, float, str, str]) -> bytes:
    """A representative key (:func:`representative_fields`) as 1 + 8 + 10 + 16 bytes; byte order = key order."""
    rank, neg_quality, date, doc_id = key
    return (
        bytes([rank])
        + _sortable_float(neg_quality)
        + date.encode("ascii", "replace").ljust(10, b"9")[:10]
        + doc_id_bytes(doc_id)
    )
