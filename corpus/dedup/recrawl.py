"""Recrawl collapse: the same URL fetched with the same bytes in several crawls counts once.

Ingest routes each record's small key (URL, raw digest, fetch date, where it sits) to the owner of its
(URL, raw digest); :func:`later_fetches` decides a group, a pure function of it, so the decision is the
same whichever rank read which file: the earliest fetch is kept, ties broken by input digest and
position. Across builds the kept fetches live in the persistent ``recrawl`` index, keyed by
:func:`recrawl_key`, and :func:`base_fetches` decides keep-first. The URL is the record's, not
``normalize_url``'s form. docs/incremental.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from corpus.model.digest import canonical_json

#: bump when the same (URL, raw digest) would give another recrawl key (a base with another version is
#: refused: its keys are not this build's keys)
RECRAWL_KEY_VERSION = "1"


@dataclass(frozen=True, order=True)
class RecordKey:
    """Where a document-to-be sits and what identifies its content."""

    url: str
    raw_digest: str
    date: str
    input_sha256: str
    index: int


def recrawl_key(url: str, raw_digest: str) -> bytes:
    """The recrawl index's key of a (URL, raw digest): blake2b-128 of what the collapse groups by."""
    return hashlib.blake2b(canonical_json([url, raw_digest]), digest_size=16).digest()


def kept_fetch(fetches: Iterable[RecordKey]) -> RecordKey:
    """The fetch of one (url, raw digest) a build keeps: the earliest (ties: input digest, position)."""
    return min(fetches, key=lambda k: (k.date, k.input_sha256, k.index))


def later_fetches(fetches: Iterable[RecordKey]) -> Iterator[tuple[RecordKey, str]]:
    """For the fetches of one (url, raw digest): each one that repeats the earliest, with the date of
    the fetch that is kept. (A record listed twice, from two identical input files, is the kept one.)"""
    fetches = list(fetches)
    kept = kept_fetch(fetches)
    for k in sorted(fetches, key=lambda k: (k.date, k.input_sha256, k.index)):
        if k != kept:
            yield k, kept.date


def base_fetches(fetches: Iterable[RecordKey], base_date: str) -> Iterator[tuple[RecordKey, str]]:
    """For the fetches of one (url, raw digest) a base build already kept (fetched on ``base_date``):
    each one, once, with that date. Keep-first: the base's fetch stays the kept one."""
    for k in sorted(set(fetches)):
        yield k, base_date
