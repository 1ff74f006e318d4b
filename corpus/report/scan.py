"""One streaming pass over a stage's document shards, gathering what the manifests do not record.

Manifests carry counts; the distributions (length, language confidence, every score), the dedup
clusters and the quarantine samples come from the documents themselves. Each stage's shards are read
at most once, with every statistic the report wants from that stage collected in the same pass, and
memory stays bounded: sketches for distributions, a fixed-size list for the largest clusters, the
smallest few digests per quarantine reason.
"""

from __future__ import annotations

import heapq
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from corpus.docshard import ShardCorrupt, iter_records
from corpus.model import StageManifest
from corpus.report.sketch import Sketch

LARGEST_CLUSTERS = 10
SAMPLES_PER_REASON = 3
_DOC_KEYS = {"doc_id", "source", "text"}


@dataclass
class Distributions:
    """Distributions over one population of documents."""

    stage: str
    docs: int = 0
    length: Sketch = field(default_factory=Sketch)  # characters of text
    lang_confidence: Sketch = field(default_factory=Sketch)
    scores: dict[str, Sketch] = field(default_factory=dict)
    languages: Counter = field(default_factory=Counter)

    def add(self, rec: dict[str, Any]) -> None:
        self.docs += 1
        self.length.add(len(rec.get("text", "")))
        if rec.get("lang"):
            self.lang_confidence.add(rec.get("lang_confidence", 0.0))
        self.languages[rec.get("lang") or "und"] += 1
        for name, value in (rec.get("scores") or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self.scores.setdefault(name, Sketch()).add(value)


@dataclass
class Clusters:
    """Duplicate clusters as a dedup stage left them: each kept document stands for its cluster."""

    stage: str
    sizes: Counter = field(default_factory=Counter)  # cluster size -> how many clusters
    _largest: list = field(default_factory=list)  # heap of (size, cluster_id, doc summary)

    def add(self, rec: dict[str, Any]) -> None:
        size = int(rec.get("dup_cluster_size") or 1)
        self.sizes[size] += 1
        if size > 1:
            item = (size, rec.get("dup_cluster_id") or rec["doc_id"],
                    {"doc_id": rec["doc_id"], "source": rec.get("source", ""), "url": rec.get("url", "")})
            if len(self._largest) < LARGEST_CLUSTERS:
                heapq.heappush(self._largest, item)
            else:
                heapq.heappushpop(self._largest, item)

    def largest(self) -> list[dict[str, Any]]:
        return [{"size": s, "cluster_id": c, **doc} for s, c, doc in sorted(self._largest, key=lambda t: (-t[0], t[1]))]


def shard_paths(stage_dir: Path, m: StageManifest, kind: str) -> list[Path]:
    refs = m.outputs if kind == "shards" else [r for r in m.side_outputs if r.path.startswith(kind + "/")]
    return [stage_dir / r.path for r in refs if r.records]


def holds_documents(stage_dir: Path, m: StageManifest) -> bool:
    """Whether a stage's outputs are documents (tokenized or packed shards are not)."""
    for p in shard_paths(stage_dir, m, "shards"):
        try:
            first = next(iter_records(p, verify=False), None)
        except (OSError, ShardCorrupt):
            return False
        if first is not None:
            return isinstance(first, dict) and _DOC_KEYS <= first.keys()
    return False


def _progress(paths: list[Path], what: str):
    return tqdm(paths, desc=what, unit="shard", file=sys.stderr, disable=not sys.stderr.isatty(), leave=False)


def scan_documents(stage_dir: Path, m: StageManifest, *, distributions: bool, clusters: bool
                   ) -> tuple[Distributions | None, Clusters | None]:
    dist = Distributions(m.stage) if distributions else None
    clus = Clusters(m.stage) if clusters else None
    for path in _progress(shard_paths(stage_dir, m, "shards"), f"reading {m.stage}"):
        for rec in iter_records(path):
            if dist:
                dist.add(rec)
            if clus:
                clus.add(rec)
    return dist, clus


def quarantine_samples(stage_dir: Path, m: StageManifest, k: int = SAMPLES_PER_REASON) -> dict[str, list[dict]]:
    """Per reason, the ``k`` records with the smallest raw digests: a sample that is the same every time."""
    keep: dict[str, list] = {}
    for path in shard_paths(stage_dir, m, "quarantine"):
        for rec in iter_records(path):
            reason = rec.get("reason", "?")
            item = (rec.get("raw_digest", ""), {f: rec.get(f, "") for f in ("raw_digest", "source", "url", "detail")})
            items = keep.setdefault(reason, [])
            items.append(item)
            if len(items) > 4 * k:
                items[:] = heapq.nsmallest(k, items, key=lambda t: t[0])
    return {r: [d for _, d in heapq.nsmallest(k, items, key=lambda t: t[0])] for r, items in sorted(keep.items())}
