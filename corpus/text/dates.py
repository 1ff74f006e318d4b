"""A record's date checked where it is read, so a bad one never reaches the recrawl index.

A WARC-Date or a JSONL ``date`` becomes a document's ``crawl_date`` (``YYYY-MM-DD``), which the recrawl
collapse orders by and a build's recrawl index stores as ASCII bytes. A date in other digits
(``２０２６-０１-０１``), with a NUL, or not on the calendar (``2026-13-45``) is refused here, inside a
build and outside it alike, and its record quarantined as ``invalid_date``. See
docs/ingest-and-filters.md ("ingest").
"""

from __future__ import annotations

import datetime as dt
import re

#: an ISO 8601 day, optionally followed by a time (``T`` or a space, then printable ASCII)
_DAY = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[T ][\x20-\x7e]*)?")


def record_day(value: str) -> str | None:
    """``YYYY-MM-DD`` of an ISO 8601 date or timestamp, or None when ``value`` is not one."""
    m = _DAY.fullmatch(value)
    if m is None:
        return None
    try:
        dt.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return None
    return value[:10]
