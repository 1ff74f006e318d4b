"""Recrawl collapse: the same URL fetched with the same bytes in several crawls counts once.

The ingest stage routes the small key of every record (URL, raw digest, fetch date, and where the
record sits) to the rank that owns its (URL, raw digest), with the spilling shuffle, so no rank ever
holds the whole crawl's keys. Each owner decides its groups with :func:`later_fetches`, a pure function
of one group, so the decision is the same whichever rank read which file: the earliest fetch is kept,
ties broken by input digest and position.

Across builds (``corpus build --base``) the kept fetches live in the build's persistent ``recrawl``
index (``corpus.formats.dedup_index``), keyed by :func:`recrawl_key` with the kept fetch's date as
value. A (URL, raw digest) a base build already kept is decided by :func:`base_fetches` instead:
keep-first, every fetch of this build repeats the base's.

The URL is the one the record carries, not ``corpus.decont.holdout.normalize_url``'s form: two fetches
whose URLs differ only by case of the host, a default port or a tracking parameter are two groups (on
the shared crawls every URL is already in normal form).
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
