"""Candidate pairs from LSH buckets, with hot buckets capped.

A bucket is every document sharing one band key. Its members are linked as a star to the smallest
member (k-1 edges carry the same connectivity as the k(k-1)/2 pairs). A bucket larger than the cap --
boilerplate that many unrelated pages share -- is split by a secondary hash of (band key, doc_id) into
ceil(k / cap) sub-buckets, each its own star, so one hot band never ties more than about ``cap``
documents together on its own; true duplicates among them still meet in their other bands.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator


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
