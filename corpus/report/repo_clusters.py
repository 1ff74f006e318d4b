"""Repository clusters: which releases and forks of a project minhash_dedup put
together, how alike they are, and which one a version keeps.

One row per member repository of every repository cluster, from the metadata table alone: its
documents and tokens, its rank in the cluster (0 = the stage's representative), its estimated
similarity to the representative (``repo_similarity``: line sets) and the share of files they share
exactly (``repo_file_share``), and, on a version, whether it is kept. A large similarity with a small
file share is a release that touched many files a little; a cluster whose kept repository is not rank 0
is one where the version chose differently (a licence or host excluded the representative).
"""

from __future__ import annotations

from typing import Any

import duckdb

#: clusters listed on the card (the largest by tokens first, ties by cluster id)
TOP = 20


def repository_clusters(con: duckdb.DuckDBPyConnection, top: int = TOP) -> dict[str, Any] | None:
    """Over the table ``docs`` of ``con`` (corpus.version.query.connect): the number of repository clusters
    and of member repositories, and the members of the ``top`` largest clusters. None when the table has
    no repository cluster (no code, or an older build)."""
    columns = {r[0] for r in con.execute("DESCRIBE docs").fetchall()}
    if "repo_cluster_id" not in columns or "repo_similarity" not in columns:
        return None
    kept = "bool_or(selected)" if "selected" in columns else "NULL"
    rows = con.execute(
        f"""
        WITH members AS (
            SELECT repo_cluster_id AS cluster, regexp_replace(url, '#part=[0-9]+$', '') AS repository,
                   min(repo_rank) AS rank, count(*) AS documents, sum(tokens) AS tokens,
                   min(repo_similarity) AS similarity, min(repo_file_share) AS file_share, {kept} AS kept
            FROM docs WHERE repo_cluster_id IS NOT NULL GROUP BY 1, 2
        ),
        clusters AS (SELECT cluster, sum(tokens) AS cluster_tokens FROM members GROUP BY 1)
        SELECT m.*, c.cluster_tokens FROM members m JOIN clusters c USING (cluster)
        ORDER BY c.cluster_tokens DESC, m.cluster, m.rank
        """
    ).fetchall()
    if not rows:
        return None
    names = ("cluster", "repository", "rank", "documents", "tokens", "similarity", "file_share", "kept")
    listed: list[dict[str, Any]] = []
    clusters: list[str] = []
    for row in rows:
        if row[0] not in clusters:
            clusters.append(row[0])
        if len(clusters) <= top:
            listed.append(dict(zip(names, row[: len(names)], strict=True)))
    return {"clusters": len(clusters), "repositories": len(rows), "members": listed}
