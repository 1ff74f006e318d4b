"""Reading WARC / ARC files record by record, so that one bad record never costs the rest of the file.

``warcio`` parses the records; this module adds what a crawl at scale needs around it:

* a record whose bytes end before its declared ``Content-Length`` (a truncated gzip member, a lying
  length) is reported as :class:`BadRecord`, not passed on as a silently shortened page;
* when ``warcio`` cannot parse on, the reader resynchronises at the next record boundary (the next
  gzip member, or the next ``WARC/1.x`` line) and reports the unreadable span as one :class:`BadRecord`
  with the sha256 of its bytes;
* records that are not documents (requests, metadata, revisits, non-HTML responses, non-200 statuses)
  come out as :class:`SkippedRecord` so a caller can count them.

Every item carries ``index``, its position in the file, which is stable across readers and ranks.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

_SCAN_BLOCK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b\x08"
_WARC_LINE = re.compile(rb"(?:^|\r?\n)(WARC/1\.[01]\r?\n)")
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


@dataclass(frozen=True)
class RawRecord:
    """An HTML response: the payload bytes as fetched (HTTP transfer encoding undone)."""

    index: int
    url: str
    date: str  # YYYY-MM-DD of WARC-Date
    payload: bytes
    content_type: str

    @property
    def raw_digest(self) -> str:
        return hashlib.sha256(self.payload).hexdigest()


@dataclass(frozen=True)
class BadRecord:
    """A record (or an unreadable span of the file) that could not be read."""

    index: int
    reason: str
    detail: str
    raw_digest: str
    url: str = ""


@dataclass(frozen=True)
class SkippedRecord:
    """A record that is not a document (kind says what it was: "request", "response_non_html", ...)."""

    index: int
    kind: str


WarcItem = RawRecord | BadRecord | SkippedRecord


def iter_warc(path: Path, max_record_bytes: int = 64 << 20) -> Iterator[WarcItem]:
    """Every record of a WARC/ARC file (gzipped or not) as a RawRecord, BadRecord or SkippedRecord."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
        start: int | None = 0
        index = 0
        bad_since: int | None = None  # start offset of an unreadable span not reported yet
        bad_error = ""
        while start is not None:
            f.seek(start)
            it = ArchiveIterator(f, arc2warc=True, ensure_http_headers=False)
            resume_at: int | None = None
            try:
                for rec in it:
                    if bad_since is not None:  # the span before this record was unreadable
                        yield _bad_span(path, index, bad_since, it.offset, bad_error)
                        index += 1
                        bad_since = None
                    yield _classify(rec, index, max_record_bytes)
                    index += 1
            except (ArchiveLoadFailed, zlib.error, EOFError, OSError, ValueError, IndexError, KeyError) as e:
                failed_at = it.offset if it.offset >= start else start
                if bad_since is None:
                    bad_since, bad_error = (
                        failed_at,
                        f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}",
                    )
                resume_at = _next_boundary(f, failed_at + 1, gz)
            start = resume_at
        if bad_since is not None:
            yield _bad_span(path, index, bad_since, path.stat().st_size, bad_error)


def _classify(rec, index: int, max_record_bytes: int) -> WarcItem:
    rec_type = rec.rec_type or "unknown"
    if rec_type not in ("response", "resource"):
        return SkippedRecord(index, rec_type)
    url = rec.rec_headers.get_header("WARC-Target-URI") or ""
    date = (rec.rec_headers.get_header("WARC-Date") or "")[:10]
    declared = int(rec.rec_headers.get_header("Content-Length") or 0)
    if declared > max_record_bytes:
        digest = hashlib.sha256(rec.raw_stream.read(1 << 20)).hexdigest()
        return BadRecord(
            index, "record_too_large", f"{declared} bytes > max_record_bytes {max_record_bytes}", digest, url
        )
    http = rec.http_headers
    status = http.get_statuscode() if http is not None and rec_type == "response" else "200"
    ctype = (
        (http.get_header("Content-Type") if http is not None else None)
        or rec.rec_headers.get_header("Content-Type")
        or ""
    )
    try:
        payload = rec.content_stream().read()
    except (zlib.error, ValueError, OSError, EOFError) as e:
        return BadRecord(
            index,
            "unreadable_payload",
            f"{type(e).__name__}: {e}"[:300],
            hashlib.sha256(b"").hexdigest(),
            url,
        )
    if rec.raw_stream.limit > 0:  # fewer bytes than the record declared: cut off
        return BadRecord(
            index,
            "truncated_record",
            f"record ends {rec.raw_stream.limit} bytes before its Content-Length {declared}",
            hashlib.sha256(payload).hexdigest(),
            url,
        )
    if http is not None and _shorter_than_http_length(http, len(payload)):
        return BadRecord(
            index,
            "truncated_record",
            f"body is shorter than its HTTP Content-Length {http.get_header('Content-Length')}",
            hashlib.sha256(payload).hexdigest(),
            url,
        )
    if status != "200":
        return SkippedRecord(index, f"response_status_{status or 'missing'}")
    mime = ctype.split(";")[0].strip().lower()
    if mime not in _HTML_TYPES and not (mime == "" and _looks_like_html(payload)):
        return SkippedRecord(index, "response_non_html")
    return RawRecord(index=index, url=url, date=date, payload=payload, content_type=ctype)


def _shorter_than_http_length(http, body_bytes: int) -> bool:
    """A body shorter than the HTTP Content-Length it was sent with (when no encoding changes its size)."""
    declared = http.get_header("Content-Length")
    if not declared or http.get_header("Transfer-Encoding") or http.get_header("Content-Encoding"):
        return False
    try:
        return body_bytes < int(declared)
    except ValueError:
        return False


def _looks_like_html(payload: bytes) -> bool:
    head = payload[:1024].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<html" in head


def _next_boundary(f: BinaryIO, pos: int, gz: bool) -> int | None:
    """The offset of the next place a record may start at or after ``pos``, or None at the end."""
    f.seek(pos)
    carry = b""
    base = pos
    while True:
        block = f.read(_SCAN_BLOCK)
        if not block:
            return None
        buf = carry + block
        if gz:
            i = buf.find(_GZIP_MAGIC)
            if i >= 0:
                return base - len(carry) + i
        else:
            m = _WARC_LINE.search(buf)
            if m:
                return base - len(carry) + m.start(1)
        carry = buf[-16:]
        base += len(block)


def _bad_span(path: Path, index: int, begin: int, end: int, error: str) -> BadRecord:
    """The unreadable bytes [begin, end) as one record (read through a second handle, so the
    iterator's buffered position on the first is left alone)."""
    h = hashlib.sha256()
    with open(path, "rb") as g:
        g.seek(begin)
        left = end - begin
        while left > 0:
            chunk = g.read(min(left, _SCAN_BLOCK))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    return BadRecord(index, "malformed_warc", f"unreadable bytes {begin}..{end}: {error}", h.hexdigest())


def decode_html(payload: bytes, content_type: str) -> tuple[str, int]:
    """The page as text, and how many bytes could not be decoded (replaced by U+FFFD).

    The charset comes from the HTTP header, else a ``<meta charset>``, else UTF-8; a page that does not
    decode in its declared charset is tried as UTF-8 before anything is replaced.
    """
    candidates = []
    m = re.search(r"charset\s*=\s*[\"']?([A-Za-z0-9_.:-]+)", content_type or "", re.I)
    if m:
        candidates.append(m.group(1))
    mm = _META_CHARSET.search(payload[:4096])
    if mm:
        candidates.append(mm.group(1).decode("ascii", "replace"))
    candidates.append("utf-8")
    usable = []
    for cs in candidates:
        try:
            "".encode(cs)
        except LookupError:
            continue
        usable.append(cs)
        try:
            return payload.decode(cs), 0
        except UnicodeDecodeError:
            continue
    text = payload.decode(usable[0], errors="replace")
    return text, text.count("\ufffd") - payload.decode(usable[0], errors="ignore").count("\ufffd")
