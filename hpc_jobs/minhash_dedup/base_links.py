"""A build against a base whose band index has generations (``corpus build --base``), keep-first.

Bucket part ``p`` is the index's partition ``p`` and probes its distinct band keys there (one Bloom
filter, one mapped file; a hit is confirmed by lookup). A key the base holds links its documents to a
node standing for the base cluster it names (doc_id: the cluster's id, tagged :data:`BASE_NODE_TAG`,
never an input shard's tag); step ``base_links`` sends each component's base clusters to the
component's part. docs/dedup.md "Against a base", docs/incremental.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from corpus.dedup.candidates import part_of_hash
from corpus.dedup.records import BAND_KEY_BYTES, EDGE, LINK, LINK_ROUTE, NODE, shard_tag, unrouted
from corpus.formats.dedup_index import BaseGenerations
from corpus.formats.dedup_keys import partition_of
from hpc_jobs.minhash_dedup.phase import BASE_LINKS
from runtime.global_phase import GlobalPhase, PartWriter

BASE_NODE_NAME = "base/band_index"
BASE_NODE_TAG = shard_tag(BASE_NODE_NAME)
#: the keys a bucket part found in the base (``.base_keys``), the base clusters of each component
#: (``.links``: LINK rows at the component's part), the joined components with their sizes (``.linked``)
BASE_KEYS, LINKS, LINKED_ROWS = ".base_keys", ".links", ".linked"


def base_partition_of(base: BaseGenerations, keys: np.ndarray) -> np.ndarray:
    """The bucket part of band keys ((n, 18) bytes) against a base: their band index partition."""
    return partition_of("band", keys, base.partitions).astype(np.int64)


def base_edges(base: BaseGenerations, g: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bucket part ``g``'s band keys probed in the base's band index (partition ``g``: one Bloom
    filter and one mapped file; a Bloom hit is confirmed by lookup): an edge from every document with
    a key the base holds to the node of the base cluster it names (keep-first: the document joins that
    cluster, whose id and members stay as they are), and the keys found (sorted, each once)."""
    if not len(rows):
        return np.empty(0, EDGE), np.empty(0, f"V{BAND_KEY_BYTES}")
    key = np.ascontiguousarray(rows["key"]).view(f"V{BAND_KEY_BYTES}").reshape(-1)
    heads = np.flatnonzero(np.append(True, key[1:] != key[:-1]))  # rows are sorted by (key, node)
    found = base.index.probe_partition(g, key[heads])
    hit = np.repeat(found.found, np.diff(np.append(heads, len(rows))))
    edges = np.empty(int(hit.sum()), dtype=EDGE)
    edges["node"] = rows["node"][hit]
    cluster = np.repeat(found.values, np.diff(np.append(heads, len(rows))))[hit]
    edges["hub"] = base_nodes(cluster)
    return edges, key[heads][found.found]


def base_nodes(clusters: np.ndarray) -> np.ndarray:
    """The graph nodes standing for base clusters (their ids: V16 doc_ids), tagged
    :data:`BASE_NODE_TAG`: never an input shard's, so they are routed to no shard."""
    nodes = np.zeros(len(clusters), dtype=NODE)
    nodes["doc_id"] = np.ascontiguousarray(clusters).view(NODE["doc_id"]).reshape(-1)
    nodes["shard_tag"] = np.void(BASE_NODE_TAG)
    return nodes


def tagged(nodes: np.ndarray, tag: bytes) -> np.ndarray:
    """Whether each NODE carries shard tag ``tag``."""
    tags = np.ascontiguousarray(nodes["shard_tag"]).view(">u8").reshape(-1)
    return tags == np.frombuffer(tag, dtype=">u8")[0]


def send_base_links(phase: GlobalPhase, groups: list[str], links: np.ndarray) -> None:
    """Step ``base_links``: each component holding a base cluster's node (``links``: its labels,
    as connected components left them on this rank) to the part of its label, the part its members
    go to; a part writes its LINK rows sorted by (label, base cluster)."""
    rows = np.empty(len(links), dtype=LINK_ROUTE)
    if len(links):
        label = np.ascontiguousarray(links["v"])
        rows["part"] = part_of_hash(label.view(np.uint8).reshape(len(links), -1), len(groups))
        rows["label"] = label.view(LINK_ROUTE["label"]).reshape(-1)
        rows["base"] = np.ascontiguousarray(links["u"]).view(NODE)["doc_id"]

    def send(_: None) -> Iterator[np.ndarray]:
        yield rows

    def reduce(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
        out = writer.open(LINKS)
        for batch in batches:
            out.write(unrouted(batch, LINK_ROUTE, LINK).tobytes())
        return {}

    phase.exchange_rows(
        BASE_LINKS, groups, None, send, reduce, dtype=LINK_ROUTE, order_fields=("label", "base")
    )


def component_links(phase: GlobalPhase, group: str, probed: bool) -> np.ndarray:
    """A bucket part's components joined to the base: LINK rows, a label once (its smallest base
    cluster: a component that reaches two base clusters joins the one with the smaller id, and the
    base clusters stay apart), sorted by label. None against no base."""
    if not probed:
        return np.empty(0, LINK)
    rows = np.fromfile(phase.part(BASE_LINKS, group).path(LINKS), dtype=LINK)
    return (
        rows[np.flatnonzero(np.append(True, rows["label"][1:] != rows["label"][:-1]))] if len(rows) else rows
    )
