"""Records a stage read that were not documents (ingest's requests, revisits, non-HTML and non-200
responses), by reason, as shares of every record it read.

They are outside the document counts (``in = out + filtered + quarantined``), so a crawl that turns
into 403 pages would only show as fewer documents; the data card and the yield alarms read them here.
"""

from __future__ import annotations

from typing import Any

from corpus.model import StageManifest
from corpus.model.facts import StageFacts


def skipped_records(m: StageManifest) -> dict[str, Any] | None:
    """``{"records_read", "documents", "skipped", "by_reason": {reason: {"records", "share"}}}`` for a
    stage that tallies skipped records (``extra.skipped_records``), else None; shares in percent of
    the records read (documents + skipped)."""
    tally = StageFacts.of(m).skipped_records
    if tally is None:
        return None
    documents = m.yield_counts().total().docs_in
    skipped = sum(tally.values())
    read = documents + skipped
    return {
        "records_read": read,
        "documents": documents,
        "skipped": skipped,
        "by_reason": {
            r: {"records": n, "share": round(100 * n / read, 3) if read else None}
            for r, n in sorted(tally.items())
        },
    }
