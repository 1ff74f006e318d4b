"""Step ``band_records`` (only inside a build that keeps indexes): the build's own generation of the
band index, ``index_records/PART.band.rec``, one record per band key with the smallest cluster id of
the documents sharing it, written at the key's bucket part; a key the base already holds is left to
the base (keep-first). The build's last step commits it. docs/incremental.md "Near duplicates across
builds".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from corpus.dedup.records import BAND_KEY_BYTES, BAND_ROW, BAND_VALUE_ROUTE
from corpus.formats.dedup_keys import BAND_RECORD
from hpc_jobs.minhash_dedup.base_links import BASE_KEYS
from hpc_jobs.minhash_dedup.phase import (
    BAND_RECORDS,
    BANDS,
    BUCKETS,
    SIG_FILES,
    SIGNATURES,
    Run,
    among,
    cluster_ids,
)
from runtime.global_phase import PartWriter
from runtime.input_shard import InputShard


def band_records(run: Run) -> None:
    """Step ``band_records``: every band key of every document, with the document's cluster id (its
    ``dup_cluster_id`` as the verdicts set it, a base cluster's included; its own doc_id outside a
    cluster), to the bucket part owning the key, which writes one record per key (the smallest
    cluster id of the documents sharing it) as the artifact ``index_records/PART.band.rec``. A later
    build probing the key finds the cluster, and its document joins it."""
    phase, groups = run.phase, run.text.groups

    def send(shard: InputShard) -> Iterator[np.ndarray]:
        part = phase.part(SIGNATURES, shard.name)
        bands = np.fromfile(part.path(BANDS), dtype=BAND_ROW)
        if not len(bands):
            return
        clusters = cluster_ids(phase, shard.name, np.load(part.path(SIG_FILES[0]), allow_pickle=False))
        rows = np.empty(len(bands), dtype=BAND_VALUE_ROUTE)
        rows["part"], rows["key"] = bands["part"], bands["key"]
        ordinals = bands["node"]["ordinal"].astype(np.int64)
        rows["value"] = np.ascontiguousarray(clusters[ordinals]).view(BAND_VALUE_ROUTE["value"]).reshape(-1)
        yield rows

    def reduce(g: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
        found = np.empty(0, f"V{BAND_KEY_BYTES}")
        if run.probed:
            found = np.fromfile(phase.part(BUCKETS, groups[g]).path(BASE_KEYS), dtype=found.dtype)
        own = run.index.records(writer)
        last = None  # the previous batch's last key: its records are written
        for batch in batches:  # sorted by (key, value): a key's first row has its smallest value
            key = np.ascontiguousarray(batch["key"]).view(f"V{BAND_KEY_BYTES}").reshape(-1)
            first = np.append(True, key[1:] != key[:-1])
            if last is not None:
                first[0] = key[0] != last
            last = key[-1]
            first &= ~among(key, found)
            rows = np.empty(int(first.sum()), dtype=BAND_RECORD)
            rows["key"], rows["value"] = key[first], batch["value"][first]
            own.write_rows(rows)
        return {"index_records": own.records}

    phase.exchange_rows(
        BAND_RECORDS, groups, run.inputs, send, reduce, dtype=BAND_VALUE_ROUTE, order_fields=("key", "value")
    )
