"""Representatives you can check (the seeds' R2): how often the document a version keeps for a
near-duplicate cluster is much longer than the cluster's median member.

A representative far longer than its cluster is the usual sign of boilerplate or a footer that the
other copies lack (a page with its navigation, comments or a licence block still attached). The card
reports the share of such clusters and a deterministic sample to read. Lengths are token counts from
the metadata table; a cluster counts when the version selects exactly one of its members (the
default selection keeps one representative per cluster); without a version, the member no other
points at (``dup_of`` empty) is the representative. Clusters are the version's near-duplicate groups
(:data:`corpus.select.selection.GROUP_SQL`): a base singleton and the delta's documents tagged with
its doc_id are one cluster, though the base's row carries no cluster id.
"""

from __future__ import annotations

from typing import Any

import duckdb

from corpus.select.selection import GROUP_SQL

#: a representative more than this many times the cluster's median length is flagged
LONGER = 1.2
#: flagged clusters listed on the card, chosen by a hash of the cluster id (not by size or order)
SAMPLE = 5


def representative_lengths(
    con: duckdb.DuckDBPyConnection, longer: float = LONGER, sample: int = SAMPLE
) -> dict[str, Any] | None:
    """Over the table ``docs`` of ``con`` (corpus.version.query.connect): clusters of two or more members
    with one representative, how many have it more than ``longer`` times their median length, and
    ``sample`` of those. None when the table has no such cluster."""
    columns = {r[0] for r in con.execute("DESCRIBE docs").fetchall()}
    chosen = "selected" if "selected" in columns else "dup_of = ''"
    rows = con.execute(
        f"""
        WITH members AS (
            SELECT {GROUP_SQL} AS cluster, doc_id, url, tokens, {chosen} AS chosen FROM docs
        ),
        clusters AS (
            SELECT cluster, count(*) AS size, median(tokens) AS median_tokens,
                   count(*) FILTER (WHERE chosen) AS chosen_members
            FROM members GROUP BY cluster HAVING count(*) > 1
        )
        SELECT c.cluster, c.size, c.median_tokens, m.tokens, m.doc_id, m.url
        FROM clusters c JOIN members m USING (cluster)
        WHERE m.chosen AND c.chosen_members = 1
        ORDER BY md5(c.cluster), c.cluster
        """
    ).fetchall()
    if not rows:
        return None
    flagged = [r for r in rows if r[3] > longer * r[2]]
    return {
        "longer_than": longer,
        "clusters": len(rows),
        "longer": len(flagged),
        "share": round(len(flagged) / len(rows), 4),
        "sample": [
            {
                "cluster_id": cluster,
                "size": size,
                "median_tokens": float(median),
                "representative_tokens": tokens,
                "doc_id": doc_id,
                "url": url,
            }
            for cluster, size, median, tokens, doc_id, url in flagged[:sample]
        ],
    }
