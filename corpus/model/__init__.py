"""The typed data model every stage shares: documents, stage outcomes, counts and manifests, and the
build's names (layout, stages, config, facts, digests). See docs/architecture.md."""

from corpus.model.counts import GroupCounts, YieldCounts
from corpus.model.document import Annotation, Document, QuarantineRecord, annotated_line
from corpus.model.manifest import ShardRef, SnapshotManifest, SnapshotShard, StageManifest
from corpus.model.outcomes import Filtered, Kept, Outcome, Passed, Quarantined

__all__ = [
    "Annotation",
    "Document",
    "Filtered",
    "GroupCounts",
    "Kept",
    "Outcome",
    "Passed",
    "QuarantineRecord",
    "Quarantined",
    "ShardRef",
    "SnapshotManifest",
    "SnapshotShard",
    "StageManifest",
    "YieldCounts",
    "annotated_line",
]
