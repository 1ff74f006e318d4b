"""Cutting a large gzipped WARC file into units of work, so that a one-file crawl uses every rank.

A crawl comes as few large files as often as many small ones; a file read whole by one rank leaves the
others waiting. A unit is the bytes [start, end) of the file, both ends record starts, found from the
content alone: the first gzip member at or after each multiple of ``unit_bytes`` that inflates to a
``WARC/1.`` line. The units, and so the outputs, are the same on any rank count. Only gzipped WARC is
cut (crawlers write one member per record); an uncompressed WARC's record start cannot be told from a
payload line for certain, and a single-stream gzip has no boundary. docs/ingest-and-filters.md
("Large files").
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from corpus.text.inputs import open_regular
from corpus.text.warc import next_boundary

#: the bytes inflated to check that a gzip member is a record's start
_PROBE_BYTES = 4096


def warc_units(path: Path, unit_bytes: int) -> list[tuple[int, int]]:
    """The units of ``path``: one ``(0, size)`` for a file of at most ``unit_bytes`` or one that is not
    gzipped, else spans that tile the file, each starting at a record."""
    with open_regular(path) as f:  # a FIFO put in a listed file's place is refused, not waited on
        size = os.fstat(f.fileno()).st_size
        if unit_bytes <= 0 or size <= unit_bytes or f.read(2) != b"\x1f\x8b":
            return [(0, size)]
        starts = [0]
        for target in range(unit_bytes, size, unit_bytes):
            if target <= starts[-1]:  # one record longer than a unit
                continue
            found = _record_start(f, target)
            if found is None:
                break
            if found > starts[-1]:
                starts.append(found)
    return list(zip(starts, [*starts[1:], size], strict=True))


def _record_start(f, pos: int) -> int | None:
    """The first offset at or after ``pos`` where a gzip member holding a WARC record begins."""
    while True:
        at = next_boundary(f, pos, gz=True)
        if at is None:
            return None
        if _is_record(f, at):
            return at
        pos = at + 1


def _is_record(f, at: int) -> bool:
    f.seek(at)
    try:
        head = zlib.decompressobj(wbits=31).decompress(f.read(_PROBE_BYTES), 16)
    except zlib.error:
        return False
    return head.startswith(b"WARC/1.")
