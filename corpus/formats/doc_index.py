"""The doc_id index of a snapshot: doc_id -> (shard number, document number), range-partitioned.

``corpus trace --doc-id`` must find a document among 10⁹ without a scan and without one process
holding every doc_id. write_shards builds the index in parts during its global phase: part ``p`` of
``2**prefix_bits`` holds the documents whose doc_id (32 hex digits) starts with the ``prefix_bits``-bit
prefix ``p``, as fixed-width records sorted by doc_id (:data:`DOC_INDEX_RECORD`, raw bytes, no header).
The parts in order are one sorted table; a lookup maps the one part a doc_id falls in and binary
searches it (:class:`PartitionedDocIndex`). The number of parts is fixed by the number of documents
(about ``part_docs`` each), never by the rank count, so the files are the same on any number of ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from corpus.formats.partitions import map_records

#: one record: the doc_id's 32 hex characters, the shard's number in the snapshot's shard list and the
#: document's number in that shard (little-endian; 40 bytes)
DOC_INDEX_RECORD = np.dtype([("doc_id", "S32"), ("shard", "<u4"), ("doc", "<u4")])
DOC_ID_CHARS = 32


def part_of_doc_id(doc_id: str | bytes, bits: int) -> int:
    """The part a doc_id belongs to: the top ``bits`` bits of its leading 16 hex digits."""
    if bits == 0:
        return 0
    head = doc_id[:16].decode() if isinstance(doc_id, bytes) else doc_id[:16]
    return int(head, 16) >> (64 - bits)


#: the value of each byte as a hex digit (16: not one)
_HEX_VALUE = np.full(256, 16, dtype=np.uint64)
_HEX_VALUE[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16)
_HEX_VALUE[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16)


def parts_of_doc_ids(doc_ids: np.ndarray, bits: int) -> np.ndarray:
    """:func:`part_of_doc_id` of every doc_id of an ``S32`` array (uint32): write_shards routes a whole
    token shard's doc_ids at once, with no Python work per doc_id."""
    raw = np.ascontiguousarray(doc_ids, dtype=f"S{DOC_ID_CHARS}").view(np.uint8).reshape(-1, DOC_ID_CHARS)
    digits = _HEX_VALUE[raw[:, :16]]
    if (digits == 16).any():
        raise ValueError("a doc_id's leading 16 characters must be hex digits")
    if bits == 0:
        return np.zeros(len(raw), dtype=np.uint32)
    value = np.zeros(len(raw), dtype=np.uint64)
    for column in digits.T:
        value = (value << np.uint64(4)) | column
    return (value >> np.uint64(64 - bits)).astype(np.uint32)


def encode_doc_index(doc_ids: Sequence[bytes], shards: Sequence[int], docs: Sequence[int]) -> bytes:
    rec = np.empty(len(doc_ids), dtype=DOC_INDEX_RECORD)
    rec["doc_id"] = doc_ids
    rec["shard"] = shards
    rec["doc"] = docs
    return rec.tobytes()


def decode_doc_index(data: bytes | memoryview) -> np.ndarray:
    if len(data) % DOC_INDEX_RECORD.itemsize:
        raise ValueError(
            f"a doc index part holds whole {DOC_INDEX_RECORD.itemsize}-byte records, got {len(data)} bytes"
        )
    return np.frombuffer(data, dtype=DOC_INDEX_RECORD)


class PartitionedDocIndex:
    """The doc_id index as its parts (``paths[p]`` holds prefix ``p``), read by memory map."""

    def __init__(self, paths: Sequence[Path], bits: int) -> None:
        if len(paths) != 1 << bits:
            raise ValueError(f"a {bits}-bit partitioned index has {1 << bits} parts, got {len(paths)}")
        self.paths = [Path(p) for p in paths]
        self.bits = bits

    def locate(self, doc_id: str) -> tuple[int, int] | None:
        """(shard number, document number) of ``doc_id``, or None when the snapshot does not hold it."""
        if len(doc_id) != DOC_ID_CHARS or any(c not in "0123456789abcdef" for c in doc_id):
            return None
        part = map_records(self.paths[part_of_doc_id(doc_id, self.bits)], DOC_INDEX_RECORD)
        key = doc_id.encode()
        pos = int(np.searchsorted(part["doc_id"], key))
        if pos < part.shape[0] and part["doc_id"][pos] == key:
            return int(part["shard"][pos]), int(part["doc"][pos])
        return None

    def __len__(self) -> int:
        return sum(p.stat().st_size // DOC_INDEX_RECORD.itemsize for p in self.paths)
