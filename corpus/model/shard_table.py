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
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple, overload

from corpus.model.digest import canonical_json

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


class ShardTable(Sequence[Any]):
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
        self._parsed: dict[int, Any] = {}

    def __len__(self) -> int:
        return self.facts["count"]

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

    def _row(self, i: int) -> tuple[Any, ...]:
        return KEY.unpack_from(self._data, i * KEY.size)

    def keys(self) -> tuple[ShardKey, ...]:
        """Each shard's bucket, sha256, tokens and documents, from the keys file alone."""
        buckets = self.facts["buckets"]
        return tuple(
            ShardKey(buckets[b], sha.hex(), tokens, docs)
            for sha, b, docs, tokens, *_ in KEY.iter_unpack(self._data)
        )

    def _shard(self, i: int, line: bytes) -> Any:
        from corpus.model.manifest import SnapshotShard  # the manifest module opens tables: import late

        if hashlib.sha256(line).digest() != self._row(i)[6]:
            raise ValueError(f"{self.directory / LINES}: shard {i}'s line does not match its key")
        shard = SnapshotShard(**json.loads(line))
        self._parsed[i] = shard
        return shard

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"shard {i} of {n}")
        i %= n
        if i not in self._parsed:
            offset, length = self._row(i)[4:6]
            with open(self.directory / LINES, "rb") as f:
                f.seek(offset)
                self._shard(i, f.read(length))
        return self._parsed[i]

    def __iter__(self) -> Iterator[Any]:
        with open(self.directory / LINES, "rb") as f:
            for i in range(len(self)):
                line = f.readline()
                yield self._parsed[i] if i in self._parsed else self._shard(i, line)
