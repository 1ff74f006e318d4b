"""What an export writes: one unit per (bucket, stored shard) that the version selects documents from.

A unit is the export's part: its output files are named by the unit alone and hold its documents in
stored order, so the same version gives the same files on any number of ranks, and a rank's memory is
bounded by one stored shard's metadata, never by the version's size. The units and their counts come
from the version's manifest (no data is read to plan); tombstoned shards have no unit, so their files
are never opened. A version with buckets by predicate has a unit per (predicate bucket, shard), else
per (the shard's physical bucket, shard).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corpus.model.deal import largest_first
from corpus.version.open import StoredShard, Version


@dataclass(frozen=True)
class ExportUnit:
    """The selected documents of one stored shard in one bucket."""

    bucket: str
    shard: StoredShard
    docs: int
    tokens: int
    #: whether the bucket is one of the version's buckets by predicate (else the shard's physical one)
    by_predicate: bool = False

    @property
    def name(self) -> str:
        """The unit's file stem, unique in the export: ``BUCKET__SHARD`` (no dot: Megatron and pathlib
        take what follows a dot for a suffix)."""
        return f"{self.bucket}__{self.shard.name}"

    def selected(self, version: Version) -> np.ndarray:
        """One bool per stored document of the shard: exported in this unit."""
        if self.by_predicate:
            return version.bucket_selected(self.shard, self.bucket)
        return version.selected(self.shard)


def export_units(version: Version) -> list[ExportUnit]:
    """The non-empty units of a version, shard-major (buckets in the order the version defines)."""
    live = {s.name for s in version.live_shards}
    if version.bucket_names:
        return [
            ExportUnit(bucket, shard, docs, tokens, by_predicate=True)
            for shard, bucket, docs, tokens in version.bucket_counts()
            if shard.name in live and docs
        ]
    return [
        ExportUnit(shard.bucket, shard, docs, tokens)
        for shard, docs, tokens in version.selected_counts()
        if shard.name in live and docs
    ]


def assign_units(units: list[ExportUnit], ranks: int) -> list[list[int]]:
    """Unit numbers per rank, ascending: each unit, largest first, to the rank with the fewest tokens so
    far (ties to the lower rank). Only who writes a unit depends on the rank count, never what it writes."""
    return [sorted(o) for o in largest_first([u.tokens for u in units], ranks)]
