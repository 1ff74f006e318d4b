"""The dedup index's keys and records: one numpy structured dtype per kind, the parameters that define
the keys, the codec, and the range partitioning of keys.

A record is ``key`` then ``value`` (V16; a line count: V8), packed; keys compare as bytes (memcmp order).
A key's partition is ``floor(u * P / 2^64)``, ``u`` the big-endian uint64 of its key bytes ``[o, o + 8)``
(``o`` = 0 for exact, recrawl and lines, 2 for band), so partitions are contiguous key ranges and ranks
own contiguous runs of them. A kind answers a key with its oldest value, or (lines) the sum of them. The recorded key names (``"key"`` in the params) are the names every existing index carries and
never change. Pure numpy. Layout, kinds and partitions: docs/incremental.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from corpus.dedup.order import doc_id_bytes
from corpus.dedup.recrawl import RECRAWL_KEY_VERSION
from corpus.formats.bloom import mix64
from corpus.text.normalize import KEY_VERSION, NORMALIZATION_VERSION

VALUE_BYTES = 16
EXACT_RECORD = np.dtype([("key", "V16"), ("value", f"V{VALUE_BYTES}")])
BAND_RECORD = np.dtype([("key", "V18"), ("value", f"V{VALUE_BYTES}")])
RECRAWL_RECORD = np.dtype([("key", "V16"), ("value", f"V{VALUE_BYTES}")])
#: a line key (``corpus.text.normalize.line_key``'s 8 bytes) and a build's count of documents holding it
#: (big-endian uint64: the counts of every generation holding the key are summed)
LINES_RECORD = np.dtype([("key", "V8"), ("value", "V8")])
_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_KEY_SEED = np.uint64(0xD6E8FEB86659FD93)


#: an exact or recrawl key's fields: ``head``, its first 8 hash bytes, chooses the partition
HASH_KEY = np.dtype([("head", ">u8"), ("tail", "V8")])
#: a band key's fields (``mpi_kernels.minhash``): the band number, then the band's 128-bit hash, whose
#: first 8 bytes (``head``, never the band number) choose the partition
BAND_KEY = np.dtype([("band", ">u2"), ("head", ">u8"), ("tail", "V8")])
#: a line key is all head
LINE_KEY = np.dtype([("head", ">u8")])


@dataclass(frozen=True)
class KeyKind:
    name: str
    record: np.dtype
    key: np.dtype  # the key's fields; ``head`` (big-endian uint64) chooses the partition
    #: a key's answer: its value in the oldest generation holding it ("first"), or the sum of its
    #: values (big-endian uint64) over every generation, and over a generation's inputs ("sum")
    combine: str = "first"

    @property
    def sums(self) -> bool:
        return self.combine == "sum"

    @property
    def value_bytes(self) -> int:
        return self.record["value"].itemsize

    @property
    def key_bytes(self) -> int:
        return self.record["key"].itemsize

    @property
    def partition_offset(self) -> int:
        """Where ``head`` starts in the key (recorded in each generation's manifest)."""
        return self.key.fields["head"][1]


KINDS = {
    "exact": KeyKind("exact", EXACT_RECORD, HASH_KEY),
    "band": KeyKind("band", BAND_RECORD, BAND_KEY),
    "recrawl": KeyKind("recrawl", RECRAWL_RECORD, HASH_KEY),
    "lines": KeyKind("lines", LINES_RECORD, LINE_KEY, combine="sum"),
}


# --- key parameters ----------------------------------------------------------------------------------


def exact_key_params() -> dict[str, Any]:
    """What defines an exact key: ``corpus.text.normalize.text_key`` at its key version. The recorded
    name is the one every existing index carries (a base's parameters must match), not a module path."""
    return {"key": "corpus.dedup.normalize.text_key", "key_version": KEY_VERSION}


def band_key_params(
    *,
    num_perm: int,
    bands: int,
    rows: int,
    seed: int,
    ngram: int,
    char_ngram: int,
    normalization_version: str = NORMALIZATION_VERSION,
) -> dict[str, Any]:
    """What defines a band key (``mpi_kernels.minhash.MinHashParams`` and the shingles' normalization)."""
    return {
        "key": "mpi_kernels.minhash.band_keys",
        "normalization_version": normalization_version,
        "num_perm": int(num_perm),
        "bands": int(bands),
        "rows": int(rows),
        "seed": int(seed),
        "ngram": int(ngram),
        "char_ngram": int(char_ngram),
    }


def recrawl_key_params() -> dict[str, Any]:
    """What defines a recrawl key: ``corpus.dedup.recrawl.recrawl_key`` at its key version (the recorded
    name, like the exact key's, is the one every existing index carries)."""
    return {"key": "corpus.ingest.recrawl.recrawl_key", "key_version": RECRAWL_KEY_VERSION}


def line_key_params() -> dict[str, Any]:
    """What defines a line key: ``corpus.text.normalize.line_key`` at its key version."""
    return {"key": "corpus.text.normalize.line_key", "key_version": KEY_VERSION}


# --- codec ---------------------------------------------------------------------------------------------


def as_void(x: Any, width: int) -> np.ndarray:
    """``x`` as a 1-D array of ``V{width}``: from such an array, from (n, width) uint8 rows, from a list
    of ``width``-byte strings."""
    if isinstance(x, np.ndarray):
        if x.dtype == np.dtype(f"V{width}"):
            return np.ascontiguousarray(x).reshape(-1)
        if x.dtype == np.uint8 and x.ndim == 2 and x.shape[1] == width:
            return np.ascontiguousarray(x).view(f"V{width}").reshape(-1)
        raise ValueError(f"expected V{width} or (n, {width}) uint8, got {x.dtype} {x.shape}")
    items = list(x)
    if any(len(b) != width for b in items):
        raise ValueError(f"every key or value must be {width} bytes")
    return np.frombuffer(b"".join(items), dtype=f"V{width}").copy() if items else np.zeros(0, f"V{width}")


def doc_id_values(doc_ids: Iterable[str]) -> np.ndarray:
    """doc_ids (32 hex characters) as V16 values."""
    return as_void([doc_id_bytes(d) for d in doc_ids], VALUE_BYTES)


def doc_ids(values: np.ndarray) -> list[str]:
    """V16 values back to doc_ids (32 hex characters)."""
    return [bytes(v).hex() for v in as_void(values, VALUE_BYTES)]


def date_values(dates: Iterable[str]) -> np.ndarray:
    """Fetch dates as the recrawl index's V16 values: UTF-8, NUL-padded, so they compare as the dates do
    (``YYYY-MM-DD``: the smallest value of a key, kept within a generation, is its earliest date)."""
    raw = [d.encode("utf-8") for d in dates]
    long = [d for d in raw if len(d) > VALUE_BYTES or b"\0" in d]
    if long:
        raise ValueError(
            f"a recrawl index stores dates of at most {VALUE_BYTES} bytes without NUL, got {long[0]!r}"
        )
    return as_void([d.ljust(VALUE_BYTES, b"\0") for d in raw], VALUE_BYTES)


def dates(values: np.ndarray) -> list[str]:
    """The recrawl index's V16 values back to dates."""
    return [bytes(v).rstrip(b"\0").decode("utf-8") for v in as_void(values, VALUE_BYTES)]


def count_values(counts: np.ndarray) -> np.ndarray:
    """Counts (non-negative integers) as the lines index's V8 values (big-endian uint64)."""
    return np.ascontiguousarray(np.asarray(counts, dtype=np.uint64).astype(">u8")).view("V8").reshape(-1)


def counts_of(values: np.ndarray) -> np.ndarray:
    """The lines index's V8 values back to counts (native uint64)."""
    return as_void(values, 8).view(">u8").astype(np.uint64)


def sum_values(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The V8 count values summed over each run beginning at ``starts`` (sorted positions, the first 0)."""
    return count_values(np.add.reduceat(counts_of(values), starts))


def records(kind: str, keys: Any, values: Any) -> np.ndarray:
    """Rows of the kind's record dtype; ``values`` may be V16 / (n, 16) uint8 / bytes or doc_id strings
    (a recrawl index's dates: :func:`date_values`)."""
    k = KINDS[kind]
    vals = list(values) if not isinstance(values, np.ndarray) else values
    if not isinstance(vals, np.ndarray) and vals and isinstance(vals[0], str):
        vals = doc_id_values(vals)
    key_arr, val_arr = as_void(keys, k.key_bytes), as_void(vals, k.value_bytes)
    if len(key_arr) != len(val_arr):
        raise ValueError(f"{len(key_arr)} keys but {len(val_arr)} values")
    rows = np.empty(len(key_arr), dtype=k.record)
    rows["key"], rows["value"] = key_arr, val_arr
    return rows


def sort_words(v: np.ndarray) -> np.ndarray:
    """(n, ceil(w / 8)) native uint64: the big-endian words of V{w} items, zero-padded (their order is
    the items' byte order)."""
    w = v.dtype.itemsize
    nw = -(-w // 8)
    raw = np.ascontiguousarray(v).view(np.uint8).reshape(-1, w)
    if w % 8:
        padded = np.zeros((raw.shape[0], nw * 8), dtype=np.uint8)
        padded[:, :w] = raw
        raw = padded
    return raw.view(">u8").astype(np.uint64)


def key_hash(words: np.ndarray) -> np.ndarray:
    """One mixed 64-bit hash per key (from all its words): what the Bloom filters hash."""
    h = mix64(words[:, 0] ^ _KEY_SEED)
    for i in range(1, words.shape[1]):
        h = mix64(h ^ words[:, i])
    return h


def _range_part(u: np.ndarray, partitions: int) -> np.ndarray:
    """floor(u * P / 2^64) for uint64 ``u``, exactly, without 128-bit integers (P < 2^31)."""
    hi, lo = u >> _S32, u & _M32
    p = np.uint64(partitions)
    return ((hi * p + ((lo * p) >> _S32)) >> _S32).astype(np.int64)


def partition_of(kind: str, keys: Any, partitions: int) -> np.ndarray:
    """The partition of each key (the module docstring): monotone in the key's partition bytes."""
    k = KINDS[kind]
    u = as_void(keys, k.key_bytes).view(k.key)["head"]
    return _range_part(u.astype(np.uint64), partitions)


def owned_partitions(rank: int, size: int, partitions: int) -> range:
    """The contiguous partitions ``[a, b)`` rank ``rank`` of ``size`` owns (blocks differing by <= 1)."""
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in [0, {size})")
    return range(rank * partitions // size, (rank + 1) * partitions // size)


def suggest_partitions(expected_records: int, per_partition: int = 1 << 22, ranks: int = 1) -> int:
    """A P for an index expected to grow to ``expected_records``: partitions of at most about
    ``per_partition`` records (what one probe maps at a time), at least one per rank."""
    return max(ranks, -(-max(1, expected_records) // per_partition))
