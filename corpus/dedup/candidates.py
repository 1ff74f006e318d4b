"""Candidate pairs from LSH buckets, with hot buckets capped.

A bucket is every document sharing one band key. Its members are linked as a star to the smallest
member (k-1 edges carry the same connectivity as the k(k-1)/2 pairs). A bucket larger than the cap --
boilerplate that many unrelated pages share -- is split by a secondary hash of (band key, doc_id) into
ceil(k / cap) sub-buckets, each its own star, so one hot band never ties more than about ``cap``
documents together on its own; true duplicates among them still meet in their other bands.

:func:`bucket_star_edges` does this for a whole bucket part at once (numpy rows of
``corpus.dedup.records``): buckets up to the cap vectorized, hot ones through :func:`bucket_edges`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np

from corpus.dedup.records import BAND_ROW, EDGE, NODE


def secondary_hash(band_key: bytes, member: bytes) -> int:
    return int.from_bytes(
        hashlib.blake2b(band_key + member, digest_size=8, person=b"lsh-split").digest(), "big"
    )


def bucket_edges(band_key: bytes, members: list[bytes], cap: int) -> Iterator[tuple[bytes, bytes]]:
    """Star edges (member, smallest member) of one bucket; ``members`` sorted and distinct."""
    if len(members) <= cap:
        parts = [members]
    else:
        n_parts = -(-len(members) // cap)
        split: list[list[bytes]] = [[] for _ in range(n_parts)]
        for m in members:
            split[secondary_hash(band_key, m) % n_parts].append(m)
        parts = split
    for part in parts:
        for m in part[1:]:
            yield m, part[0]


def concat(arrays: list[np.ndarray], dtype: np.dtype) -> np.ndarray:
    """Rows of ``dtype`` one after another, byte order kept (``np.concatenate`` turns big-endian fields
    of a nested structured dtype into native ones, and the bytes are what is written)."""
    out = np.empty(sum(len(a) for a in arrays), dtype=dtype)
    at = 0
    for a in arrays:
        out[at : at + len(a)] = a
        at += len(a)
    return out


def bucket_star_edges(rows: np.ndarray, cap: int) -> tuple[np.ndarray, dict[str, int]]:
    """Candidate edges of one bucket part's band rows (any order): rows sorted by (key, node), a bucket
    per key; a bucket of at most ``cap`` members links every member to its smallest (vectorized), a
    larger one goes through ``corpus.dedup.candidates.bucket_edges`` (split by a secondary hash).
    Edges come bucket by bucket, in key order."""
    facts = dict.fromkeys(("shared_buckets", "hot_buckets", "largest_bucket", "candidate_edges"), 0)
    if not len(rows):
        return np.empty(0, EDGE), facts
    keyed = np.empty(len(rows), dtype=[("key", BAND_ROW["key"]), ("node", NODE)])
    keyed["key"], keyed["node"] = rows["key"], rows["node"]
    keyed = np.sort(keyed.view(f"V{keyed.dtype.itemsize}").reshape(-1)).view(keyed.dtype)
    key_bytes = np.ascontiguousarray(keyed["key"]).view(np.uint8).reshape(len(keyed), -1)
    new = np.ones(len(keyed), dtype=bool)
    new[1:] = np.any(key_bytes[1:] != key_bytes[:-1], axis=1)
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, len(keyed)))
    bucket = np.cumsum(new) - 1
    shared = sizes >= 2
    facts["shared_buckets"] = int(shared.sum())
    facts["hot_buckets"] = int((sizes > cap).sum())
    facts["largest_bucket"] = int(sizes[shared].max()) if shared.any() else 0
    star = (sizes[bucket] >= 2) & (sizes[bucket] <= cap) & ~new
    edges = np.empty(int(star.sum()), dtype=EDGE)
    edges["node"] = keyed["node"][star]
    edges["hub"] = keyed["node"][starts[bucket[star]]]
    order_of = [bucket[star]]
    pieces = [edges]
    for b in np.flatnonzero(sizes > cap).tolist():
        raw = keyed["node"][starts[b] : starts[b] + sizes[b]].tobytes()
        members = [raw[i : i + NODE.itemsize] for i in range(0, len(raw), NODE.itemsize)]
        hot = np.frombuffer(
            b"".join(m + hub for m, hub in bucket_edges(keyed["key"][starts[b]].tobytes(), members, cap)),
            EDGE,
        )
        pieces.append(hot)
        order_of.append(np.full(len(hot), b))
    edges = concat(pieces, EDGE)[np.argsort(np.concatenate(order_of), kind="stable")]
    facts["candidate_edges"] = len(edges)
    return edges, facts


def part_names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:05d}" for i in range(n)]


def part_of_hash(keys: np.ndarray, parts: int) -> np.ndarray:
    """The part of each key (rows of uint8, at least 8 bytes of hash from byte ``0``): its first 8 bytes
    as a big-endian integer mod ``parts``; a pure function of the key, never of the rank count."""
    head = np.ascontiguousarray(keys[:, :8]).view(">u8").reshape(-1)
    return (head % np.uint64(parts)).astype(np.int64)
