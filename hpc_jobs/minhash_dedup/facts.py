"""The facts minhash_dedup's parts report, merged into the manifest: counts summed (zero included, so
the manifest has the same keys on any data), maxima, cluster sizes per size. docs/dedup.md "What the
manifest reports".
"""

from __future__ import annotations

from collections import Counter
from typing import Any

#: what a build's run reports about the band index (``extra.index``): band keys found in the base, this
#: build's documents joined to a base cluster, the records of this build's own generation, and the
#: edges to base clusters verified, rejected and left unverified against the base's signature stores
INDEX_FACTS = (
    "base_keys",
    "base_linked_docs",
    "index_records",
    "base_joins_verified",
    "base_joins_rejected",
    "base_joins_unverified",
)
#: the counts every run reports (zero included), so the manifest has the same keys on any data
COUNTS = (
    "docs",
    "docs_without_shingles",
    "shared_buckets",
    "hot_buckets",
    "largest_bucket",
    "candidate_edges",
    "clustered_docs",
    "verified_components",
    "distributed_components",
    "holdout_docs",
    "holdout_docs_without_shingles",
    "holdout_pairs",
    "holdout_near_docs",
    "code_docs",
    "repositories",
    "repo_shared_buckets",
    "repo_hot_buckets",
    "repo_largest_bucket",
    "repo_candidate_edges",
    "repo_clustered_docs",
    "repo_verified_components",
    "code_docs_in_repo_clusters",
)
#: facts that are a maximum over parts, not a sum
MAXIMA = ("largest_bucket", "repo_largest_bucket")


def size_histogram(sizes: dict[int, int]) -> dict[str, int]:
    """Clusters by size in powers of two: "2", "3-4", "5-8", ... (keys in increasing order)."""
    out: dict[str, int] = {}
    for size in sorted(sizes):
        hi = 2
        while hi < size:
            hi *= 2
        lo = hi // 2 + 1
        label = str(hi) if lo >= hi else f"{lo}-{hi}"
        out[label] = out.get(label, 0) + sizes[size]
    return out


def merge_facts(per_part: list[dict[str, Any]]) -> dict[str, Any]:
    """Every part's facts as the manifest reports them: counts summed (the largest bucket: maximum),
    cluster sizes summed per size."""
    counts = dict.fromkeys(COUNTS, 0)
    index: Counter = Counter()
    sizes: Counter = Counter()
    repo_sizes: Counter = Counter()
    for f in per_part:
        for k, v in f.items():
            if k in INDEX_FACTS:
                index[k] += v
            elif k == "cluster_sizes":
                sizes.update({int(s): n for s, n in v.items()})
            elif k == "repo_cluster_sizes":
                repo_sizes.update({int(s): n for s, n in v.items()})
            elif k in MAXIMA:
                counts[k] = max(counts[k], v)
            else:
                counts[k] += v
    return {
        "counts": counts,
        "cluster_sizes": {str(k): sizes[k] for k in sorted(sizes)},
        "repo_cluster_sizes": {str(k): repo_sizes[k] for k in sorted(repo_sizes)},
        "index": {k: index[k] for k in INDEX_FACTS if k in index},
    }
