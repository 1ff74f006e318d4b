"""The fixed-width records of MinHash dedup's global phase, one codec each, fields named.

Every record a step writes to a part file or sends through a shuffle is a numpy structured dtype below,
so stage code reads ``rows["ordinal"]`` rather than slicing bytes at an offset. Integer fields that
take part in an order are big-endian, so the bytes of a record sort like its fields (a shuffle orders
records by their bytes); byte fields (``V``) compare bytewise. A ``*_ROUTE`` dtype is its record with
the part it goes to (and, for a member, its component's label) before it; :func:`unrouted` takes the
record back out. What each record is for: the comment above it, and docs/dedup.md "minhash_dedup's
global phase".
"""

from __future__ import annotations

import hashlib

import numpy as np

DOC_ID_BYTES = 16
SHARD_TAG_BYTES = 8
#: a representative key (``corpus.dedup.order.encode_representative_key``; a repository's,
#: ``corpus.code.repo_dedup.encode_repository_key``, puts its file count and release in ``score`` and
#: ``date`` and its id in ``doc_id``): its bytes sort like the representative order
REP_KEY = np.dtype([("tier", "u1"), ("score", ">u8"), ("date", "V10"), ("doc_id", f"V{DOC_ID_BYTES}")])
REP_KEY_BYTES = REP_KEY.itemsize

#: a document as a graph node: doc_id first, so the smallest node has the smallest doc_id; then where it
#: is (ordinal in its shard, a tag of the shard's name), so two copies with one doc_id are two nodes
NODE = np.dtype([("doc_id", f"V{DOC_ID_BYTES}"), ("ordinal", ">u4"), ("shard_tag", f"V{SHARD_TAG_BYTES}")])
#: a candidate edge of a bucket (member, hub): what the ``buckets`` step writes
EDGE = np.dtype([("node", NODE), ("hub", NODE)])
BAND_KEY_BYTES = 18  # mpi_kernels.minhash.BAND_KEY_BYTES: band index (u16), 128-bit hash
#: a band key of a document with the bucket part owning the key: the ``signatures`` step writes them
#: sorted, so that each bucket part reads one contiguous run per shard
BAND_ROW = np.dtype([("part", ">u4"), ("key", f"V{BAND_KEY_BYTES}"), ("node", NODE)])
#: a document of one shard (by ordinal) and the smallest node of its component (``labels`` step)
LABEL = np.dtype([("ordinal", ">u4"), ("label", NODE)])
LABEL_ROUTE = np.dtype([("part", ">u4"), ("ordinal", ">u4"), ("label", f"V{NODE.itemsize}")])
#: byte order of a record = (representative key, ordinal, shard tag), so the first record of a sorted
#: cluster is its representative; (ordinal, shard tag) also say where the member's signature is
MEMBER = np.dtype([("rep", f"V{REP_KEY_BYTES}"), ("ordinal", ">u4"), ("shard_tag", f"V{SHARD_TAG_BYTES}")])
#: a MEMBER with the part of its component and the component's label (a NODE's bytes) before it, so
#: that a shuffle orders members by (label, member record)
MEMBER_ROUTE = np.dtype([("part", ">u4"), ("label", f"V{NODE.itemsize}"), *MEMBER.descr])


#: a component verified across ranks: its label (a NODE's bytes) and member count; GIANT_ROUTE carries
#: a shard's count of one label to the part that sums them
GIANT = np.dtype([("label", f"V{NODE.itemsize}"), ("size", ">u8")])
GIANT_ROUTE = np.dtype([("part", ">u4"), *GIANT.descr])
#: a member of a distributed component at the rank owning its node: its component and representative key
MEMBER_AT = np.dtype(
    [("node", f"V{NODE.itemsize}"), ("label", f"V{NODE.itemsize}"), ("rep", f"V{REP_KEY_BYTES}")]
)
#: one rank's share of a cluster (of a distributed component): members here, the smallest MEMBER record,
#: and the rank, which gets the cluster's totals (CLUSTER_TOTAL) back
CLUSTER_PIECE = np.dtype(
    [
        ("cluster", f"V{NODE.itemsize}"),
        ("label", f"V{NODE.itemsize}"),
        ("count", ">u8"),
        ("best", f"V{MEMBER.itemsize}"),
        ("rank", ">u4"),
    ]
)
CLUSTER_TOTAL = np.dtype(
    [("rank", ">u4"), ("cluster", f"V{NODE.itemsize}"), ("size", ">u8"), ("best", f"V{MEMBER.itemsize}")]
)
#: a distributed component's verdict on one member, on its way to its shard's part (kind: DUP, KEPT), or
#: a fact about the component carried by its smallest node (kind SPLIT: verification cut it)
GIANT_VERDICT = np.dtype(
    [
        ("part", ">u4"),
        ("ordinal", ">u4"),
        ("kind", "u1"),
        ("cluster", f"V{DOC_ID_BYTES}"),
        ("size", ">u8"),
        ("rep", f"V{DOC_ID_BYTES}"),
    ]
)
DUP, KEPT, SPLIT = 0, 1, 2

#: a component (its label) that holds a base cluster's node: the base cluster's id (a doc_id of the base)
LINK = np.dtype([("label", f"V{NODE.itemsize}"), ("base", f"V{DOC_ID_BYTES}")])
LINK_ROUTE = np.dtype([("part", ">u4"), *LINK.descr])
#: a component joined to a base cluster, with its member count in this build
LINKED = np.dtype([("label", f"V{NODE.itemsize}"), ("base", f"V{DOC_ID_BYTES}"), ("size", ">u8")])
#: a band key of this build and its document's cluster id (the document's own doc_id outside a cluster),
#: on its way to the part that owns the key: the part writes one band index record per key
BAND_VALUE_ROUTE = np.dtype([("part", ">u4"), ("key", f"V{BAND_KEY_BYTES}"), ("value", f"V{DOC_ID_BYTES}")])


def band_member_dtype(rows: int) -> np.dtype:
    """A member of a distributed component in one band: (component label, band, the band's ``rows``
    signature values as big-endian bytes, node). Sorted, the members of a bucket -- one band value in one
    component -- are contiguous and in node order, which is what the leader rule walks."""
    return np.dtype(
        [
            ("label", f"V{NODE.itemsize}"),
            ("band", ">u2"),
            ("value", f"V{8 * rows}"),
            ("node", f"V{NODE.itemsize}"),
        ]
    )


def shard_tag(shard_name: str) -> bytes:
    """8 bytes naming a shard inside a node (a hash: nodes stay fixed-width whatever the names)."""
    return hashlib.blake2b(shard_name.encode(), digest_size=SHARD_TAG_BYTES).digest()


def shard_tags(shard_names: list[str]) -> dict[bytes, str]:
    """tag -> shard name for every input shard; two names with one tag would merge documents, so refuse."""
    tags = {shard_tag(n): n for n in shard_names}
    if len(tags) != len(set(shard_names)):
        raise ValueError("two input shard names share a shard tag (8-byte blake2b): rename one")
    return tags


def shard_numbers(tags: np.ndarray, shard_names: list[str]) -> np.ndarray:
    """The position in ``shard_names`` of the shard each tag names (``tags``: a NODE's ``shard_tag``
    field), found by one sorted search; a tag of no listed shard is an error, as a name lookup would be."""
    known = np.frombuffer(b"".join(shard_tag(n) for n in shard_names), dtype=">u8")
    order = np.argsort(known, kind="stable")
    wanted = np.ascontiguousarray(tags).view(">u8").reshape(-1)
    at = np.minimum(np.searchsorted(known[order], wanted), max(len(known) - 1, 0))
    if len(wanted) and not np.array_equal(known[order][at], wanted):
        raise KeyError("a node names a shard tag of no input shard")
    return order[at]


def graph_nodes(doc_ids: np.ndarray, ordinals: np.ndarray, shard_name: str) -> np.ndarray:
    """NODE rows of one shard's documents: ``doc_ids`` (n, 16) uint8, ``ordinals`` their positions."""
    nodes = np.empty(len(ordinals), dtype=NODE)
    nodes["doc_id"] = np.ascontiguousarray(doc_ids, dtype=np.uint8).view(f"V{DOC_ID_BYTES}").reshape(-1)
    nodes["ordinal"] = ordinals
    nodes["shard_tag"] = np.void(shard_tag(shard_name))
    return nodes


def graph_node(doc_id: bytes, ordinal: int, shard_name: str) -> bytes:
    """One NODE as bytes (the same bytes as a row of :func:`graph_nodes`)."""
    return graph_nodes(
        np.frombuffer(doc_id, np.uint8).reshape(1, -1), np.array([ordinal]), shard_name
    ).tobytes()


def decode_node(node: bytes) -> tuple[bytes, int, bytes]:
    """(doc_id, ordinal, shard tag) of a NODE's bytes."""
    row = np.frombuffer(node, dtype=NODE)[0]
    return row["doc_id"].tobytes(), int(row["ordinal"]), row["shard_tag"].tobytes()


def member_doc_id(rep: bytes) -> bytes:
    """The doc_id inside a representative key (:data:`REP_KEY`)."""
    return np.frombuffer(rep, dtype=REP_KEY, count=1)[0]["doc_id"].tobytes()


def unrouted(rows: np.ndarray, routed: np.ndarray | np.dtype, dtype: np.dtype) -> np.ndarray:
    """The records of ``dtype`` inside ``rows`` of the ``routed`` dtype: each row's last bytes. The rows
    are first given ``routed``'s exact layout again: a shuffle's merge concatenates batches, which may
    hand back its integer fields in native byte order (the same values, other bytes)."""
    routed = np.dtype(routed)
    raw = np.ascontiguousarray(rows.astype(routed, copy=False)).view(np.uint8).reshape(len(rows), -1)
    return np.ascontiguousarray(raw[:, routed.itemsize - dtype.itemsize :]).view(dtype).reshape(-1)
