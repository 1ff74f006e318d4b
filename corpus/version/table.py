"""A version's shard list kept beside its manifest (``corpus-version/2``), so a loader rank reads
O(its shards) of it: a fixed-width row per shard for what every rank needs, a JSON line per shard for
the rest, as the snapshot's shard table (:mod:`corpus.model.shard_table`) does.

``shards.keys``: one :func:`key_dtype` row per shard, in the build's order: where the shard's line lies in
``shards.jsonl`` and that line's sha256, the ``.bin``'s sha256 it was selected from, whether it is
tombstoned, and the documents and tokens it selects, in all and per bucket by predicate (what the sampler
sizes streams by). ``shards.jsonl``: each entry as canonical JSON. The manifest records the table's facts
(count, the keys file's sha256) and the id digests them. See docs/versions.md ("The version's shard table").
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from corpus.model.digest import canonical_json
from corpus.model.line_table import LineTable
from corpus.model.shard_table import KEYS, LINES


def key_struct(buckets: int) -> struct.Struct:
    """A row of the keys file of a version with ``buckets`` buckets by predicate, as written: the line's
    offset, length and sha256, the shard's sha256, tombstoned, selected documents and tokens, then the
    documents of each bucket and the tokens of each."""
    return struct.Struct(f"<QI32s32sBQQ{buckets}Q{buckets}Q")


def key_dtype(buckets: int) -> np.dtype:
    """The same row as read: one structured array over the whole file (packed, little-endian)."""
    fields: list[tuple[Any, ...]] = [
        ("offset", "<u8"),
        ("length", "<u4"),
        ("line_sha256", "u1", (32,)),
        ("sha256", "u1", (32,)),
        ("tombstoned", "u1"),
        ("selected_docs", "<u8"),
        ("selected_tokens", "<u8"),
        ("bucket_docs", "<u8", (buckets,)),
        ("bucket_tokens", "<u8", (buckets,)),
    ]
    return np.dtype(fields)


def table_bytes(
    entries: Sequence[dict[str, Any]], buckets: Sequence[str], tombstoned: set[str]
) -> tuple[bytes, bytes, dict[str, Any]]:
    """The keys file, the lines file and the facts a manifest records of ``entries`` (a version's shard
    entries, in the build's order; ``buckets``: its buckets by predicate, in order)."""
    key = key_struct(len(buckets))
    keys, lines = bytearray(), bytearray()
    for e in entries:
        line = canonical_json(e) + b"\n"
        per_bucket = [e["buckets"][b] for b in buckets]
        keys += key.pack(
            len(lines),
            len(line),
            hashlib.sha256(line).digest(),
            bytes.fromhex(e["sha256"]),
            e["name"] in tombstoned,
            e["selected_docs"],
            e["selected_tokens"],
            *(c["docs"] for c in per_bucket),
            *(c["tokens"] for c in per_bucket),
        )
        lines += line
    return bytes(keys), bytes(lines), {"count": len(entries), "keys_sha256": hashlib.sha256(keys).hexdigest()}


class VersionTable(LineTable[dict[str, Any]]):
    """The shard entries of a ``corpus-version/2`` manifest, read as asked: :attr:`columns` the keys file
    (checked against the manifest), ``table[i]`` one entry (its line checked against its key), iteration
    the lines file once."""

    def __init__(self, directory: Path, facts: dict[str, Any], buckets: Sequence[str]) -> None:
        self.directory = Path(directory)
        self.keys_sha256 = facts["keys_sha256"]
        self.dtype = key_dtype(len(buckets))
        super().__init__(self.directory / LINES, int(facts["count"]))

    @cached_property
    def columns(self) -> np.ndarray:
        """The keys file, checked, as one structured array (a row per shard)."""
        path = self.directory / KEYS
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ValueError(f"{path} is missing (the version lists its shards there)") from None
        if (
            hashlib.sha256(data).hexdigest() != self.keys_sha256
            or len(data) != len(self) * self.dtype.itemsize
        ):
            raise ValueError(f"{path} does not match the manifest's keys_sha256")
        return np.frombuffer(data, dtype=self.dtype)

    def where(self, i: int) -> tuple[int, int, bytes]:
        row = self.columns[i]
        return int(row["offset"]), int(row["length"]), row["line_sha256"].tobytes()

    def parse(self, line: bytes) -> dict[str, Any]:
        return json.loads(line)
