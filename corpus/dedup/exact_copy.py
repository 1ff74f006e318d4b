"""The record exact dedup sends for every document: one codec, named fields, byte order = keeper order.

A text's copies meet at the owner of the text's key sorted by these bytes, so the first record of a group
is the keeper: most trusted source tier, then earliest crawl date, then smallest doc_id
(:func:`corpus.dedup.order.exact_keeper_key`); where the copy lives (its position in its input shard and
the shard's name) follows, for the verdict's way back.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from corpus.dedup.order import doc_id_bytes, exact_keeper_key
from corpus.model import Document

_FIXED = struct.Struct(">B10s16sI")  # tier rank, date, raw doc_id, ordinal; then the shard name


@dataclass(frozen=True)
class ExactCopy:
    tier_rank: int
    date: str  # YYYY-MM-DD, or the undated marker that sorts last
    doc_id: str  # 32 hex characters
    ordinal: int  # the document's position in its input shard
    shard: str  # the input shard's name

    @classmethod
    def of(cls, doc: Document, ordinal: int, shard: str) -> ExactCopy:
        rank, date, doc_id = exact_keeper_key(doc)
        return cls(
            rank, date.encode("ascii", "replace").ljust(10, b"9")[:10].decode(), doc_id, ordinal, shard
        )

    def encode(self) -> bytes:
        return _FIXED.pack(
            self.tier_rank, self.date.encode("ascii"), doc_id_bytes(self.doc_id), self.ordinal
        ) + (self.shard.encode())

    @classmethod
    def decode(cls, data: bytes) -> ExactCopy:
        rank, date, doc_id, ordinal = _FIXED.unpack_from(data)
        return cls(rank, date.decode("ascii"), doc_id.hex(), ordinal, data[_FIXED.size :].decode())
