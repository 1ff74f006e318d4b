"""A snapshot's shard list kept beside its manifest (``corpus-snapshot/2``), so a loader rank reads O(its
shards) of it: a fixed-width row per shard for what every rank needs, a JSON line per shard for the rest.

``shards.keys``: one :data:`KEY` row per shard, in the manifest's order: the ``.bin``'s sha256, the
bucket's number in the manifest's bucket list, documents, tokens (what the sampler orders and sizes
shards by), and where the shard's line lies in ``shards.jsonl`` with that line's sha256.
``shards.jsonl``: each shard's entry (:meth:`SnapshotShard.to_dict`) as canonical JSON, one per line.
The manifest records the table's facts (:meth:`ShardTable.facts`: count, buckets, the keys file's
sha256), and the snapshot id digests them: the keys are checked whole when first read (96 bytes a
shard), a line against its key when its shard is opened. See docs/snapshot.md ("The shard table").
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from corpus.model.digest import canonical_json
from corpus.model.line_table import LineTable

KEYS, LINES = "shards.keys", "shards.jsonl"
#: the .bin's sha256 (raw), bucket number, docs, tokens, the line's offset and length, the line's
#: sha256. ``struct``, not numpy: every process imports the data model (an extract worker runs under a
#: data cap that numpy's import would eat into)
KEY = struct.Struct("<32sIQQQI32s")


class ShardKey(NamedTuple):
    """What every loader rank needs of every shard (to order and size the streams), never its files."""

    bucket: str
    sha256: str
    tokens: int
    docs: int


def table_bytes(shards: Sequence[Any]) -> tuple[bytes, bytes, dict[str, Any]]:
    """The keys file, the lines file and the facts a manifest records of ``shards`` (SnapshotShards)."""
    buckets = sorted({s.bucket for s in shards})
    number = {b: k for k, b in enumerate(buckets)}
    keys, lines = bytearray(), bytearray()
    for s in shards:
        line = canonical_json(s.to_dict()) + b"\n"
        digest = hashlib.sha256(line).digest()
        keys += KEY.pack(
            bytes.fromhex(s.sha256), number[s.bucket], s.docs, s.tokens, len(lines), len(line), digest
        )
        lines += line
    facts = {"count": len(shards), "buckets": buckets, "keys_sha256": hashlib.sha256(keys).hexdigest()}
    return bytes(keys), bytes(lines), facts


class ShardTable(LineTable[Any]):
    """The shards of a ``corpus-snapshot/2`` manifest, read as asked: :meth:`keys` reads the keys file
    (checked against the manifest), ``table[i]`` one line (checked against its key), iteration the
    lines file once. Shards are :class:`~corpus.model.SnapshotShard`."""

    def __init__(self, directory: Path, facts: dict[str, Any]) -> None:
        self.directory = Path(directory)
        self.facts = {
            "count": int(facts["count"]),
            "buckets": list(facts["buckets"]),
            "keys_sha256": facts["keys_sha256"],
        }
        super().__init__(self.directory / LINES, self.facts["count"])

    @cached_property
    def _data(self) -> bytes:
        """The keys file, checked; kept as bytes (a row is unpacked when asked: tuples of every row
        would hold 3.4 times its 96 bytes)."""
        path = self.directory / KEYS
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ValueError(f"{path} is missing (the manifest lists its shards there)") from None
        if hashlib.sha256(data).hexdigest() != self.facts["keys_sha256"] or len(data) != len(self) * KEY.size:
            raise ValueError(f"{path} does not match the manifest's keys_sha256")
        return data

    def where(self, i: int) -> tuple[int, int, bytes]:
        return KEY.unpack_from(self._data, i * KEY.size)[4:7]

    def keys(self) -> tuple[ShardKey, ...]:
        """Each shard's bucket, sha256, tokens and documents, from the keys file alone."""
        buckets = self.facts["buckets"]
        return tuple(
            ShardKey(buckets[b], sha.hex(), tokens, docs)
            for sha, b, docs, tokens, *_ in KEY.iter_unpack(self._data)
        )

    def parse(self, line: bytes) -> Any:
        from corpus.model.manifest import SnapshotShard  # the manifest module opens tables: import late

        return SnapshotShard(**json.loads(line))
