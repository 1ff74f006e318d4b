"""The doc_index step of write_shards: doc_id -> (shard number, document number), range-partitioned.

An exchange step of fixed-width :data:`DOC_INDEX_ROW` rows: each shard's doc_ids go to the part of
their doc_id prefix (``2**bits`` parts of about ``doc_index_part_docs`` records, fixed by the data);
each part is written sorted (:mod:`corpus.formats.doc_index`). In a build with a base the shards are
counted after the base's. docs/snapshot.md, "write_shards".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from corpus.formats.doc_index import DOC_ID_CHARS, encode_doc_index, parts_of_doc_ids
from corpus.formats.partitions import map_records, prefix_bits
from corpus.model.layout import DOC_INDEX_SUFFIX
from hpc_jobs.write_shards.base_shards import BaseShards
from runtime.global_phase import GlobalPhase, Part, PartWriter

DOC_INDEX = "doc_index"
#: a doc index record on its way: the part of its doc_id prefix, then the record (sorted by doc_id, then
#: shard number and document number)
DOC_INDEX_ROW = np.dtype([("part", "<u4"), ("doc_id", f"S{DOC_ID_CHARS}"), ("shard", "<u4"), ("doc", "<u4")])
#: a part's doc_ids, in order: 32 ASCII hex characters each
DOC_IDS_RECORD = np.dtype(f"S{DOC_ID_CHARS}")


def index_names(bits: int) -> list[str]:
    return [f"d{p:05d}" for p in range(1 << bits)]


def write_doc_index(
    phase: GlobalPhase, shard_parts: list[Part], part_docs: int, base: BaseShards | None
) -> int:
    """Collective: the doc_index step over the shard parts (in shard order); returns its prefix bits."""
    # 1. the number of parts, from the number of documents
    bits = prefix_bits(sum(p.facts["docs"] for p in shard_parts), part_docs)
    # 2. the shards' numbers, counted after the base's (the base's shards come first in the candidates)
    first = base.shards if base is not None else 0
    shard_no = {p.name: first + i for i, p in enumerate(shard_parts)}
    # 3. every doc_id to the part of its prefix, written sorted
    phase.exchange_rows(
        DOC_INDEX,
        index_names(bits),
        shard_parts,
        lambda part: doc_index_rows(part, shard_no[part.name], bits),
        write_doc_index_part,
        dtype=DOC_INDEX_ROW,
        order_fields=("doc_id",),
    )
    return bits


def doc_index_rows(part: Part, shard_no: int, bits: int) -> Iterator[np.ndarray]:
    """Every doc_id of one token shard, with its place, to the doc index part of its prefix."""
    doc_ids = map_records(part.path(".doc_ids"), DOC_IDS_RECORD)
    rows = np.empty(len(doc_ids), dtype=DOC_INDEX_ROW)
    rows["part"] = parts_of_doc_ids(doc_ids, bits)
    rows["doc_id"] = doc_ids
    rows["shard"] = shard_no
    rows["doc"] = np.arange(len(doc_ids))
    yield rows


def write_doc_index_part(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
    """One doc index part: its rows arrive sorted by doc_id and are written batch by batch."""
    out = writer.open(DOC_INDEX_SUFFIX)
    n = 0
    for rows in batches:
        out.write(encode_doc_index(rows["doc_id"], rows["shard"], rows["doc"]))
        n += len(rows)
    return {"docs": n}
