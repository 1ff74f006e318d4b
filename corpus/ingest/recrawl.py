"""Recrawl collapse: the same URL fetched with the same bytes in several crawls counts once.

A pure function of the small keys of every record (URL, raw digest, fetch date, and where the record
sits), so its decision is the same whichever rank read which file: the earliest fetch is kept, ties
broken by input digest and position.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class RecordKey:
    """Where a document-to-be sits and what identifies its content."""

    url: str
    raw_digest: str
    date: str
    input_sha256: str
    index: int


def recrawl_duplicates(keys: list[RecordKey]) -> dict[str, dict[int, str]]:
    """``{input_sha256: {index: date kept}}`` for every record that repeats an earlier (url, bytes) fetch."""
    first: dict[tuple[str, str], RecordKey] = {}
    for k in sorted(keys, key=lambda k: (k.date, k.input_sha256, k.index)):
        first.setdefault((k.url, k.raw_digest), k)
    dups: dict[str, dict[int, str]] = {}
    for k in keys:
        keep = first[(k.url, k.raw_digest)]
        if keep != k:
            dups.setdefault(k.input_sha256, {})[k.index] = keep.date
    return {sha: dict(sorted(d.items())) for sha, d in sorted(dups.items())}
