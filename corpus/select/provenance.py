"""A document's provenance: where it came from, as the selection's provenance rules read it.

Host opt-outs, source exclusions, knowledge cutoffs and licence classes judge a document by its
origin: url, host, source, tier, crawl date and licence. An exact copy is stored once, but every copy
keeps its own origin (exact_dedup's ``copies/`` records, :func:`copy_record`), so a version that
excludes the keeper's host, source, date or licence keeps the stored document when another copy
passes: the tokens are the same, only the origin differs. One definition, for the metadata table's
rows and the copies' records alike.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlsplit

from corpus.model import Document
from corpus.select.licences import licence_class

#: the columns of a copy record, in order (DuckDB reads them with these types)
COPY_COLUMNS = {
    "doc_id": "VARCHAR",  # the keeper's doc_id at exact dedup (the metadata's exact_keeper_id)
    "copy_doc_id": "VARCHAR",
    "url": "VARCHAR",
    "host": "VARCHAR",
    "source": "VARCHAR",
    "tier": "VARCHAR",
    "crawl_date": "DATE",
    "licence": "VARCHAR",
    "licence_class": "VARCHAR",
}


def host_of(url: str) -> str:
    """The URL's host, lower-cased, without port or credentials ("" for a URL without one): the unit of
    a host opt-out."""
    try:
        return (urlsplit(url).hostname or "").rstrip(".")
    except ValueError:
        return ""


def crawl_day(text: str) -> dt.date | None:
    """A crawl date as a date (None when the document has none or it is not YYYY-MM-DD)."""
    try:
        return dt.date.fromisoformat((text or "")[:10])
    except ValueError:
        return None


def copy_record(copy: Document, keeper_doc_id: str) -> dict[str, Any]:
    """The provenance of an exact copy that exact dedup did not store, pointing at the stored keeper."""
    return {
        "doc_id": keeper_doc_id,
        "copy_doc_id": copy.doc_id,
        "url": copy.url,
        "host": host_of(copy.url),
        "source": copy.source,
        "tier": copy.source_tier,
        "crawl_date": day.isoformat() if (day := crawl_day(copy.crawl_date)) else None,
        "licence": copy.license_hint,
        "licence_class": licence_class(copy.license_hint),
    }
