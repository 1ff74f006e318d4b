"""A snapshot's shard list kept beside its manifest (``corpus-snapshot/2``), so a loader rank reads O(its
shards) of it: a fixed-width row per shard for what every rank needs, a JSON line per shard for the rest.

``shards.keys``: one :data:`KEY` row per shard, in the manifest's order: the ``.bin``'s sha256, the
bucket's number in the manifest's bucket list, documents, tokens (what the sampler orders and sizes
shards by), and where the shard's line lies in ``shards.jsonl`` with that line's sha256.
``shards.jsonl``: each shard's entry (:meth:`SnapshotShard.to_dict`) as canonical JSON, one per line.
The manifest records the table's facts (:meth:`ShardTable.facts`: count, buckets, the keys file's
sha256), and the snapshot id digests them: the keys are checked whole when first read (96 bytes a
shard), a line against its key when its shard is opened. See docs/snapshot.md ("The manifest").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple, overload

import numpy as np

from corpus.model.digest import canonical_json

KEYS, LINES = "shards.keys", "shards.jsonl"
KEY = np.dtype(
    [
        ("sha256", "u1", (32,)),  # raw bytes ("S32" would drop trailing zero bytes)
        ("bucket", "<u4"),
        ("docs", "<u8"),
        ("tokens", "<u8"),
        ("offset", "<u8"),
        ("length", "<u4"),
        ("line_sha256", "u1", (32,)),
    ]
)


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
    keys = np.zeros(len(shards), dtype=KEY)
    lines = bytearray()
    for i, s in enumerate(shards):
        line = canonical_json(s.to_dict()) + b"\n"
        keys[i] = (
            np.frombuffer(bytes.fromhex(s.sha256), np.uint8),
            number[s.bucket],
            s.docs,
            s.tokens,
            len(lines),
            len(line),
            np.frombuffer(hashlib.sha256(line).digest(), np.uint8),
        )
        lines += line
    data = keys.tobytes()
    facts = {"count": len(shards), "buckets": buckets, "keys_sha256": hashlib.sha256(data).hexdigest()}
    return data, bytes(lines), facts


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
    def _rows(self) -> np.ndarray:
        path = self.directory / KEYS
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ValueError(f"{path} is missing (the manifest lists its shards there)") from None
        if (
            hashlib.sha256(data).hexdigest() != self.facts["keys_sha256"]
            or len(data) != len(self) * KEY.itemsize
        ):
            raise ValueError(f"{path} does not match the manifest's keys_sha256")
        return np.frombuffer(data, dtype=KEY)

    def keys(self) -> tuple[ShardKey, ...]:
        """Each shard's bucket, sha256, tokens and documents, from the keys file alone."""
        rows, buckets = self._rows, self.facts["buckets"]
        digests = rows["sha256"].tobytes()
        return tuple(
            ShardKey(buckets[b], digests[32 * i : 32 * i + 32].hex(), t, d)
            for i, b, t, d in zip(
                range(len(rows)),
                rows["bucket"].tolist(),
                rows["tokens"].tolist(),
                rows["docs"].tolist(),
                strict=True,
            )
        )

    def _shard(self, i: int, line: bytes) -> Any:
        from corpus.model.manifest import SnapshotShard  # the manifest module opens tables: import late

        if hashlib.sha256(line).digest() != self._rows[i]["line_sha256"].tobytes():
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
            row = self._rows[i]
            with open(self.directory / LINES, "rb") as f:
                f.seek(int(row["offset"]))
                self._shard(i, f.read(int(row["length"])))
        return self._parsed[i]

    def __iter__(self) -> Iterator[Any]:
        with open(self.directory / LINES, "rb") as f:
            for i in range(len(self)):
                line = f.readline()
                yield self._parsed[i] if i in self._parsed else self._shard(i, line)
