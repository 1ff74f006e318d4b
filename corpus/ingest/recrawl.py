"""Recrawl collapse: the same URL fetched with the same bytes in several crawls counts once.

The ingest stage routes the small key of every record (URL, raw digest, fetch date, and where the
record sits) to the rank that owns its (URL, raw digest), with the spilling shuffle, so no rank ever
holds the whole crawl's keys. Each owner decides its groups with :func:`later_fetches`, a pure function
of one group, so the decision is the same whichever rank read which file: the earliest fetch is kept,
ties broken by input digest and position.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class RecordKey:
    """Where a document-to-be sits and what identifies its content."""

    url: str
    raw_digest: str
    date: str
    input_sha256: str
    index: int


def later_fetches(fetches: Iterable[RecordKey]) -> Iterator[tuple[RecordKey, str]]:
    """For the fetches of one (url, raw digest): each one that repeats the earliest, with the date of
    the fetch that is kept. (A record listed twice, from two identical input files, is the kept one.)"""
    ordered = sorted(fetches, key=lambda k: (k.date, k.input_sha256, k.index))
    for k in ordered[1:]:
        if k != ordered[0]:
            yield k, ordered[0].date
