"""The eval holdout on the data card: how many pages were held out and stored, and how many candidates
copy one of them (exact or near, ``corpus.decont.holdout``) -- and how many of those the version
selects, which the default selection never does (``corpus.select.policy.HOLDOUT_CHECKS``).

Held-out counts come from the ingest and extract manifests; the copies from the metadata table (the
scores ``holdout_exact`` and ``holdout_near``; a build made before they existed has neither column and
counts no copy).
"""

from __future__ import annotations

from typing import Any

import duckdb

from corpus.decont.holdout import EXACT_SCORE, NEAR_SCORE
from corpus.model import StageManifest
from corpus.model.facts import HoldoutFacts

#: tagged candidates listed on the card, chosen by a hash of the doc_id
SAMPLE = 5


def holdout_copies(con: duckdb.DuckDBPyConnection, sample: int = SAMPLE) -> dict[str, Any]:
    """Over the table ``docs`` of ``con`` (corpus.version.query.connect): candidates tagged as exact copies
    of a held-out page, as near copies only, how many of them are selected (None without a
    ``selected`` column), and ``sample`` of them."""
    columns = {r[0] for r in con.execute("DESCRIBE docs").fetchall()}
    exact = f'coalesce("{EXACT_SCORE}" > 0, FALSE)' if EXACT_SCORE in columns else "FALSE"
    near = f'coalesce("{NEAR_SCORE}", 0)' if NEAR_SCORE in columns else "0.0"
    chosen = "selected" if "selected" in columns else "NULL"
    rows = con.execute(
        f"""
        SELECT doc_id, url, {exact} AS exact, {near} AS near, {chosen} AS chosen
        FROM docs WHERE {exact} OR {near} > 0
        ORDER BY md5(doc_id), doc_id
        """
    ).fetchall()
    return {
        "exact": sum(1 for r in rows if r[2]),
        "near": sum(1 for r in rows if not r[2]),
        "selected": None if chosen == "NULL" else sum(1 for r in rows if r[4]),
        "sample": [
            {"doc_id": d, "url": u, "copy": "exact" if e else "near", "similarity": round(float(n), 4)}
            for d, u, e, n, _ in rows[:sample]
        ],
    }


def holdout_counts(ingest: StageManifest | None, extract: StageManifest | None) -> dict[str, Any] | None:
    """Pages held out (ingest) and stored extracted and scrubbed (extract), pages extraction dropped by
    reason, and the carving rule's version; None when ingest did not record a holdout."""
    facts = HoldoutFacts.of(ingest, extract)
    if facts is None:
        return None
    return {
        "held_out": facts.held_out,
        "carving_version": facts.carving_version,
        "stored": facts.stored,
        "dropped": facts.dropped,
    }
