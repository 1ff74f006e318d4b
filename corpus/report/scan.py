"""One streaming pass over a stage's document shards, gathering what the manifests do not record.

Manifests carry counts; the distributions (length, language confidence, every score), the dedup
clusters and the quarantine samples come from the documents themselves. Each stage's shards are read
at most once, with every statistic the report wants from that stage collected in the same pass, and
memory stays bounded: sketches for distributions, a fixed-size list for the largest clusters, the
smallest few digests per quarantine reason.
"""

from __future__ import annotations

import heapq
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from corpus.formats.docshard import ShardCorrupt, iter_records
from corpus.formats.megatron import read_index
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
    """Duplicate clusters as a dedup stage decided them: every copy (dropped, or kept as a candidate
    and labelled) names its keeper in ``dup_of``, so a cluster is a keeper and the copies pointing at it."""

    stage: str
    copies: Counter = field(default_factory=Counter)  # keeper doc_id -> dropped copies
    example: dict[str, dict[str, str]] = field(default_factory=dict)  # keeper -> the first copy seen
    kept_copies: int = 0  # copies that are still in the stage's output (labelled candidates)
    #: keeper doc_id -> its url, for the keepers known when the stage's output is read (an exact copy of
    #: the same source shares its keeper's doc_id, a digest of text and source: the urls tell them apart)
    keepers: dict[str, str] = field(default_factory=dict)

    def add_copy(self, doc: dict[str, Any]) -> None:
        keeper = doc.get("dup_of")
        if not keeper:
            return
        self.copies[keeper] += 1
        seen = self.example.get(keeper)
        url = doc.get("url", "")
        if seen is None or (doc["doc_id"], url) < (seen["doc_id"], seen["url"]):
            self.example[keeper] = {
                "doc_id": doc["doc_id"],
                "source": doc.get("source", ""),
                "url": doc.get("url", ""),
                "cluster_id": doc.get("dup_cluster_id", ""),
            }

    def add_kept(self, doc: dict[str, Any]) -> None:
        """A document of the stage's output: when it keeps a cluster already seen, its url."""
        if doc.get("doc_id") in self.copies and not doc.get("dup_of"):
            self.keepers.setdefault(doc["doc_id"], doc.get("url", ""))

    def sizes(self, kept: int) -> dict[int, int]:
        """Cluster size -> how many clusters; the kept documents no copy points at are size 1."""
        sizes = Counter(n + 1 for n in self.copies.values())
        singles = kept - self.kept_copies - len(self.copies)
        if singles > 0:
            sizes[1] = singles
        return dict(sorted(sizes.items()))

    def largest(self, k: int = LARGEST_CLUSTERS) -> list[dict[str, Any]]:
        top = sorted(self.copies.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [
            {
                "size": n + 1,
                "keeper": keeper,
                "cluster_id": self.example[keeper]["cluster_id"],
                "keeper_url": self.keepers.get(keeper, ""),
                "copy_doc_id": self.example[keeper]["doc_id"],
                "source": self.example[keeper]["source"],
                "url": self.example[keeper]["url"],
            }
            for keeper, n in top
        ]


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


def scan_documents(stage_dir: Path, m: StageManifest) -> Distributions:
    dist = Distributions(m.stage)
    for path in _progress(shard_paths(stage_dir, m, "shards"), f"reading {m.stage}"):
        for rec in iter_records(path):
            dist.add(rec)
    return dist


def scan_clusters(stage_dir: Path, m: StageManifest) -> Clusters:
    """Copies a stage dropped (exact_dedup's ``filtered/``) and members it labelled and kept as
    candidates (minhash_dedup's documents with ``dup_of``), and the keepers' own urls."""
    clusters = Clusters(m.stage)
    for path in _progress(shard_paths(stage_dir, m, "filtered"), f"reading {m.stage} duplicates"):
        for rec in iter_records(path):
            clusters.add_copy(rec.get("doc", {}))
    for path in _progress(shard_paths(stage_dir, m, "shards"), f"reading {m.stage} labelled members"):
        for rec in iter_records(path):
            if rec.get("dup_of"):
                clusters.add_copy(rec)
                clusters.kept_copies += 1
            else:
                clusters.add_kept(rec)
    return clusters


def quarantine_samples(
    stage_dir: Path, m: StageManifest, k: int = SAMPLES_PER_REASON
) -> dict[str, list[dict]]:
    """Per reason, the ``k`` records with the smallest raw digests: a sample that is the same every time."""
    keep: dict[str, list] = {}
    for path in shard_paths(stage_dir, m, "quarantine"):
        for rec in iter_records(path):
            reason = rec.get("reason", "?")
            item = (
                rec.get("raw_digest", ""),
                {f: rec.get(f, "") for f in ("raw_digest", "source", "url", "detail")},
            )
            items = keep.setdefault(reason, [])
            items.append(item)
            if len(items) > 4 * k:
                items[:] = heapq.nsmallest(k, items, key=lambda t: t[0])
    return {
        r: [d for _, d in heapq.nsmallest(k, items, key=lambda t: t[0])] for r, items in sorted(keep.items())
    }


def snapshot_tokens(
    snapshot_dir: Path, shards: list[Any], selected: Callable[[str], np.ndarray | None] | None = None
) -> dict[str, dict[str, int]] | None:
    """Tokens per language, source and source tier of a snapshot, from its lineage and index files:
    each shard's lineage lists its documents in index order, so no token is read, only lengths.
    ``selected(shard name)``: a version's bits, counting only its selected documents."""
    tables: dict[str, Counter] = {"lang": Counter(), "source": Counter(), "source_tier": Counter()}
    for s in _progress(list(shards), "reading lineage"):
        lineage, idx = s.files.get("lineage"), s.files.get("idx")
        if not lineage or not idx or not (snapshot_dir / lineage).is_file():
            return None
        lengths = read_index(snapshot_dir / idx).lengths
        bits = selected(Path(s.path).name.removesuffix(".bin")) if selected else None
        with open(snapshot_dir / lineage, "rb") as f:
            for i, (n, line) in enumerate(zip(lengths.tolist(), f, strict=True)):
                if bits is not None and not bits[i]:
                    continue
                rec = json.loads(line)
                tables["lang"][rec.get("lang") or "und"] += n
                tables["source"][rec.get("source", "")] += n
                tables["source_tier"][rec.get("source_tier", "")] += n
    return {axis: dict(sorted(c.items())) for axis, c in tables.items()}
