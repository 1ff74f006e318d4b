"""The lines line_dedup removed most often, with their counts: what a reader checks first when a
build's text shrinks (a navigation bar is expected; a line of code or of prose is a bug signal).

Read with one DuckDB query over the stage's per-shard ``removed_lines/*.parquet`` artifacts (key,
documents that lost the line in that shard, its text as first seen), summed per key, so nothing the
size of the corpus is held in Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

#: lines listed on the card
TOP = 20
REMOVED_DIR = "removed_lines"  # hpc_jobs.line_dedup.stage.REMOVED (the library does not import the stages)


def most_removed_lines(stage_dir: Path, top: int = TOP) -> dict[str, Any] | None:
    """The ``top`` removed lines by documents that lost them (ties by key), with the number of distinct
    lines removed and of removals; None when the stage kept no such artifact (an older build)."""
    files = sorted(str(p) for p in (stage_dir / REMOVED_DIR).glob("*.parquet"))
    if not files:
        return None
    con = duckdb.connect()
    distinct, removals = con.execute(
        "SELECT count(DISTINCT key), coalesce(sum(docs), 0) FROM read_parquet(?)", [files]
    ).fetchone()
    rows = con.execute(
        "SELECT key, sum(docs) AS n, min(line) FROM read_parquet(?) GROUP BY key ORDER BY n DESC, key LIMIT ?",
        [files, top],
    ).fetchall()
    return {
        "distinct_lines": int(distinct),
        "removals": int(removals),
        "top": [{"key": f"{key:016x}", "docs": int(docs), "line": line} for key, docs, line in rows],
    }
