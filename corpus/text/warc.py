"""Reading WARC / ARC files record by record, so that one bad record never costs the rest of the file.

``warcio`` parses the records; this module adds what a crawl at scale needs around it: a truncated
record, or an unparseable span after which the reader resynchronises at the next record boundary, is
a :class:`BadRecord` (with the sha256 of its bytes), never a silently shortened page; records that are
not documents come out as :class:`SkippedRecord` to be counted; a page's ``Content-Encoding`` is
undone as a capped stream (:mod:`corpus.text.content_encoding`); warcio's header lines are read
through a bound (:class:`_BoundedLines`), so a gzip of zeros is one ``header_too_large`` span, not
gigabytes of one line; :func:`decode_page` decodes in the WHATWG order. Every item carries ``index``,
its position in the file, stable across readers and ranks. See docs/ingest-and-filters.md ("ingest").
"""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from charset_normalizer import from_bytes
from charset_normalizer.md import mess_ratio
from warcio.archiveiterator import ArchiveIterator
from warcio.bufferedreaders import ChunkedDataReader
from warcio.exceptions import ArchiveLoadFailed

from corpus.text.content_encoding import DecodedBody, decode_body
from corpus.text.dates import record_day
from corpus.text.inputs import open_regular

_SCAN_BLOCK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b\x08"
_WARC_LINE = re.compile(rb"(?:^|\r?\n)(WARC/1\.[01]\r?\n)")
_HTML_TYPES = ("text/html", "application/xhtml+xml")
#: the longest header line (WARC, ARC or HTTP) read, and the most header and blank-line bytes read
#: between two record bodies: warcio reads a line whole, however long (docs/ingest-and-filters.md)
MAX_HEADER_LINE = 64 << 10
MAX_HEADER_BLOCK = 1 << 20


#: what warcio raises on bytes it cannot parse (a record without a target URI, a header it cannot split:
#: AttributeError, TypeError), besides our own bounds (ValueError)
_WARCIO_ERRORS = (
    ArchiveLoadFailed,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    LookupError,
    AttributeError,
    TypeError,
)


class HeaderTooLarge(ValueError):
    """A header line or header block over its cap: the span is quarantined as ``header_too_large``."""


class RecordWithoutLength(ValueError):
    """A record without a Content-Length: warcio would read to the end of the stream as its body."""


class _BoundedLines:
    """warcio's reader with every ``readline`` bounded by :data:`MAX_HEADER_LINE` and the lines read
    since the last body read (headers, blank lines) by :data:`MAX_HEADER_BLOCK`."""

    def __init__(self, reader) -> None:
        self._reader = reader
        self.header_bytes = 0

    def __getattr__(self, name: str):
        return getattr(self._reader, name)

    def readline(self, length: int | None = None) -> bytes:
        bound = MAX_HEADER_LINE + 1 if length is None else min(length, MAX_HEADER_LINE + 1)
        line = self._reader.readline(bound)
        if len(line) > MAX_HEADER_LINE:
            raise HeaderTooLarge(f"a header line longer than {MAX_HEADER_LINE} bytes")
        self.header_bytes += len(line)
        if self.header_bytes > MAX_HEADER_BLOCK:
            raise HeaderTooLarge(f"more than {MAX_HEADER_BLOCK} bytes of headers and blank lines in a row")
        return line

    def read(self, length: int | None = None) -> bytes:
        self.header_bytes = 0
        return self._reader.read(length)


@dataclass(frozen=True)
class RawRecord:
    """An HTML response: the payload bytes as fetched (HTTP transfer and content encodings undone)."""

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


@dataclass(frozen=True)
class RobotsRecord:
    """A 200 response for a host's ``/robots.txt``: not a document, kept as the crawl's opt-out answer."""

    index: int
    url: str
    date: str
    text: str


#: how much of one robots.txt is kept (Google reads 500 KiB)
MAX_ROBOTS_BYTES = 512 << 10

WarcItem = RawRecord | BadRecord | SkippedRecord | RobotsRecord


def iter_warc(
    path: Path,
    max_record_bytes: int = 64 << 20,
    max_decoded_bytes: int = 64 << 20,
    span: tuple[int, int] | None = None,
) -> Iterator[WarcItem]:
    """Every record of a WARC/ARC file (gzipped or not) as a RawRecord, BadRecord or SkippedRecord;
    with ``span``, the records that start in its bytes [start, end) (a unit of a file cut at record
    boundaries, :mod:`corpus.text.warc_units`), numbered from 0.

    An HTML body with a Content-Encoding is decoded to at most ``max_decoded_bytes``
    (:mod:`corpus.text.content_encoding`); a record declaring more than ``max_record_bytes`` is
    digested as it streams past, never held."""
    with open_regular(path) as f:  # a FIFO put in a listed file's place is refused, not waited on
        first, end = span or (0, os.fstat(f.fileno()).st_size)
        gz = f.read(2) == b"\x1f\x8b"
        start: int | None = first
        index = 0
        bad_since: int | None = None  # start offset of an unreadable span not reported yet
        bad_error = ""
        bad_reason = ""
        while start is not None:
            f.seek(start)
            it = ArchiveIterator(f, arc2warc=True, ensure_http_headers=False)
            it.reader = lines = _BoundedLines(it.reader)
            resume_at: int | None = None
            try:
                for rec in it:
                    if it.offset >= end:  # the next unit's first record
                        break
                    _check_length(rec)
                    if bad_since is not None:  # the span before this record was unreadable
                        yield _bad_span(path, index, bad_since, it.offset, bad_reason, bad_error)
                        index += 1
                        bad_since = None
                    yield _classify(rec, index, max_record_bytes, max_decoded_bytes)
                    lines.header_bytes = 0
                    index += 1
            except _WARCIO_ERRORS as e:
                failed_at = it.offset if it.offset >= start else start
                if span is not None and failed_at >= end:  # the next unit's first record: its own
                    break
                if bad_since is None:
                    bad_since, bad_reason, bad_error = failed_at, _span_reason(e), _first_line(e)
                resume_at = next_boundary(f, failed_at + 1, gz)
                if resume_at is not None and resume_at >= end:  # the unreadable bytes end the unit
                    resume_at = None
            finally:  # the iterator and its generator refer to each other: free its buffers now
                it.the_iter.close()
                it.close()
            start = resume_at
        if bad_since is not None:
            yield _bad_span(path, index, bad_since, end, bad_reason, bad_error)


def _check_length(rec) -> None:
    """Refuse a record whose length is not stated: its bytes are an unreadable span (read as they are
    stored, to the next record boundary), never decompressed to the end of the stream."""
    length = rec.rec_headers.get_header("Content-Length")
    stated = (length or "").strip()
    if not (stated.isascii() and stated.isdigit()):
        raise RecordWithoutLength(
            f"a {rec.rec_type or 'record'} without a Content-Length: {str(length)[:40]!r}"
        )


def _span_reason(e: BaseException) -> str:
    return "header_too_large" if isinstance(e, HeaderTooLarge) else "malformed_warc"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:200] if text else ''}"


def _classify(rec, index: int, max_record_bytes: int, max_decoded_bytes: int) -> WarcItem:
    rec_type = rec.rec_type or "unknown"
    if rec_type not in ("response", "resource"):
        return SkippedRecord(index, rec_type)
    url = rec.rec_headers.get_header("WARC-Target-URI") or ""
    warc_date = rec.rec_headers.get_header("WARC-Date") or ""
    date = record_day(warc_date) if warc_date else ""
    declared = int(rec.rec_headers.get_header("Content-Length") or 0)
    if declared > max_record_bytes or date is None:
        reason, detail = (
            ("record_too_large", f"{declared} bytes > max_record_bytes {max_record_bytes}")
            if declared > max_record_bytes
            else ("invalid_date", f"WARC-Date {warc_date[:40]!r} is not an ISO 8601 date")
        )
        return BadRecord(index, reason, detail, _stream_digest(rec.raw_stream), url)
    http = rec.http_headers
    status = http.get_statuscode() if http is not None and rec_type == "response" else "200"
    ctype = (
        (http.get_header("Content-Type") if http is not None else None)
        or rec.rec_headers.get_header("Content-Type")
        or ""
    )
    mime = ctype.split(";")[0].strip().lower()
    robots = status == "200" and urlsplit(url).path == "/robots.txt"
    maybe_page = status == "200" and (mime in _HTML_TYPES or mime == "" or robots)
    encoding = http.get_header("Content-Encoding") if http is not None else None
    try:
        body = decode_body(_dechunked(rec), encoding if maybe_page else None, max_decoded_bytes)
    except (zlib.error, ValueError, OSError, EOFError) as e:  # a broken chunked transfer encoding
        return BadRecord(
            index, "unreadable_payload", f"{type(e).__name__}: {e}"[:300], _stream_digest(rec.raw_stream), url
        )
    if rec.raw_stream.limit > 0:  # fewer bytes than the record declared: cut off
        return BadRecord(
            index,
            "truncated_record",
            f"record ends {rec.raw_stream.limit} bytes before its Content-Length {declared}",
            _digest(body),
            url,
        )
    if http is not None and _shorter_than_http_length(http, body.encoded_bytes):
        return BadRecord(
            index,
            "truncated_record",
            f"body is shorter than its HTTP Content-Length {http.get_header('Content-Length')}",
            _digest(body),
            url,
        )
    if status != "200":
        return SkippedRecord(index, f"response_status_{status or 'missing'}")
    if robots and body.payload is not None:
        return RobotsRecord(index, url, date, body.payload[:MAX_ROBOTS_BYTES].decode("utf-8", "replace"))
    if mime not in _HTML_TYPES and mime != "":
        return SkippedRecord(index, "response_non_html")
    if body.payload is None:
        return BadRecord(index, body.reason, body.detail, body.encoded_digest, url)
    if mime == "" and not _looks_like_html(body.payload):
        return SkippedRecord(index, "response_non_html")
    return RawRecord(index=index, url=url, date=date, payload=body.payload, content_type=ctype)


def _dechunked(rec) -> BinaryIO:
    """The HTTP body with a chunked transfer encoding undone (its content encoding is left alone)."""
    chunked = rec.http_headers is not None and rec.http_headers.get_header("Transfer-Encoding") == "chunked"
    return ChunkedDataReader(rec.raw_stream) if chunked else rec.raw_stream


def _digest(body: DecodedBody) -> str:
    """A page's raw digest: of its decoded bytes, else of its body as stored."""
    return hashlib.sha256(body.payload).hexdigest() if body.payload is not None else body.encoded_digest


def _stream_digest(stream: BinaryIO) -> str:
    """sha256 of what is left of a stream, read block by block (never held whole)."""
    h = hashlib.sha256()
    while block := stream.read(_SCAN_BLOCK):
        h.update(block)
    return h.hexdigest()


def _shorter_than_http_length(http, body_bytes: int) -> bool:
    """A body shorter than the HTTP Content-Length it was sent with. The length counts the body as
    encoded (RFC 9110 8.6), which is what ``body_bytes`` counts; a transfer coding changes it."""
    declared = http.get_header("Content-Length")
    if not declared or http.get_header("Transfer-Encoding"):
        return False
    try:
        return body_bytes < int(declared)
    except ValueError:
        return False


def _looks_like_html(payload: bytes) -> bool:
    head = payload[:1024].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<html" in head


def next_boundary(f: BinaryIO, pos: int, gz: bool) -> int | None:
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


def _bad_span(path: Path, index: int, begin: int, end: int, reason: str, error: str) -> BadRecord:
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
    return BadRecord(index, reason, f"unreadable bytes {begin}..{end}: {error}", h.hexdigest())


# --- decoding a page: the WHATWG encoding sniffing order, with the declaration checked against the bytes

#: WHATWG encoding name -> (Python codec, its labels) (https://encoding.spec.whatwg.org/#names-and-labels).
#: ISO-8859-1, ASCII and latin1 are labels of windows-1252, as in every browser; GBK's labels decode
#: with gb18030 (its superset), Shift_JIS's with cp932 and EUC-KR's with cp949, the Windows supersets
#: the standard specifies. The "replacement" and x-user-defined labels are left out: such a page is
#: treated as undeclared and detected.
_WHATWG_ENCODINGS: dict[str, tuple[str, str]] = {
    "utf-8": ("utf-8", "unicode-1-1-utf-8 unicode11utf8 unicode20utf8 utf-8 utf8 x-unicode20utf8"),
    "ibm866": ("cp866", "866 cp866 csibm866 ibm866"),
    "iso-8859-2": (
        "iso8859_2",
        "csisolatin2 iso-8859-2 iso-ir-101 iso8859-2 iso88592 iso_8859-2 iso_8859-2:1987 l2 latin2",
    ),
    "iso-8859-3": (
        "iso8859_3",
        "csisolatin3 iso-8859-3 iso-ir-109 iso8859-3 iso88593 iso_8859-3 iso_8859-3:1988 l3 latin3",
    ),
    "iso-8859-4": (
        "iso8859_4",
        "csisolatin4 iso-8859-4 iso-ir-110 iso8859-4 iso88594 iso_8859-4 iso_8859-4:1988 l4 latin4",
    ),
    "iso-8859-5": (
        "iso8859_5",
        "csisolatincyrillic cyrillic iso-8859-5 iso-ir-144 iso8859-5 iso88595 iso_8859-5 iso_8859-5:1988",
    ),
    "iso-8859-6": (
        "iso8859_6",
        "arabic asmo-708 csiso88596e csiso88596i csisolatinarabic ecma-114 iso-8859-6 iso-8859-6-e "
        "iso-8859-6-i iso-ir-127 iso8859-6 iso88596 iso_8859-6 iso_8859-6:1987",
    ),
    "iso-8859-7": (
        "iso8859_7",
        "csisolatingreek ecma-118 elot_928 greek greek8 iso-8859-7 iso-ir-126 iso8859-7 iso88597 "
        "iso_8859-7 iso_8859-7:1987 sun_eu_greek",
    ),
    "iso-8859-8": (
        "iso8859_8",
        "csiso88598e csisolatinhebrew hebrew iso-8859-8 iso-8859-8-e iso-ir-138 iso8859-8 iso88598 "
        "iso_8859-8 iso_8859-8:1988 visual",
    ),
    "iso-8859-8-i": ("iso8859_8", "csiso88598i iso-8859-8-i logical"),
    "iso-8859-10": ("iso8859_10", "csisolatin6 iso-8859-10 iso-ir-157 iso8859-10 iso885910 l6 latin6"),
    "iso-8859-13": ("iso8859_13", "iso-8859-13 iso8859-13 iso885913"),
    "iso-8859-14": ("iso8859_14", "iso-8859-14 iso8859-14 iso885914"),
    "iso-8859-15": ("iso8859_15", "csisolatin9 iso-8859-15 iso8859-15 iso885915 iso_8859-15 l9"),
    "iso-8859-16": ("iso8859_16", "iso-8859-16"),
    "koi8-r": ("koi8_r", "cskoi8r koi koi8 koi8-r koi8_r"),
    "koi8-u": ("koi8_u", "koi8-ru koi8-u"),
    "macintosh": ("mac_roman", "csmacintosh mac macintosh x-mac-roman"),
    "windows-874": ("cp874", "dos-874 iso-8859-11 iso8859-11 iso885911 tis-620 windows-874"),
    "windows-1250": ("cp1250", "cp1250 windows-1250 x-cp1250"),
    "windows-1251": ("cp1251", "cp1251 windows-1251 x-cp1251"),
    "windows-1252": (
        "cp1252",
        "ansi_x3.4-1968 ascii cp1252 cp819 csisolatin1 ibm819 iso-8859-1 iso-ir-100 iso8859-1 iso88591 "
        "iso_8859-1 iso_8859-1:1987 l1 latin1 us-ascii windows-1252 x-cp1252",
    ),
    "windows-1253": ("cp1253", "cp1253 windows-1253 x-cp1253"),
    "windows-1254": (
        "cp1254",
        "cp1254 csisolatin5 iso-8859-9 iso-ir-148 iso8859-9 iso88599 iso_8859-9 iso_8859-9:1989 l5 "
        "latin5 windows-1254 x-cp1254",
    ),
    "windows-1255": ("cp1255", "cp1255 windows-1255 x-cp1255"),
    "windows-1256": ("cp1256", "cp1256 windows-1256 x-cp1256"),
    "windows-1257": ("cp1257", "cp1257 windows-1257 x-cp1257"),
    "windows-1258": ("cp1258", "cp1258 windows-1258 x-cp1258"),
    "x-mac-cyrillic": ("mac_cyrillic", "x-mac-cyrillic x-mac-ukrainian"),
    "gbk": ("gb18030", "chinese csgb2312 csiso58gb231280 gb2312 gb_2312 gb_2312-80 gbk iso-ir-58 x-gbk"),
    "gb18030": ("gb18030", "gb18030"),
    "big5": ("big5hkscs", "big5 big5-hkscs cn-big5 csbig5 x-x-big5"),
    "euc-jp": ("euc_jp", "cseucpkdfmtjapanese euc-jp x-euc-jp"),
    "iso-2022-jp": ("iso2022_jp", "csiso2022jp iso-2022-jp"),
    "shift_jis": ("cp932", "csshiftjis ms932 ms_kanji shift-jis shift_jis sjis windows-31j x-sjis"),
    "euc-kr": (
        "cp949",
        "cseuckr csksc56011987 euc-kr iso-ir-149 korean ks_c_5601-1987 ks_c_5601-1989 ksc5601 ksc_5601 windows-949",
    ),
    "utf-16be": ("utf-16-be", "unicodefffe utf-16be"),
    "utf-16le": ("utf-16-le", "csunicode iso-10646-ucs-2 ucs-2 unicode unicodefeff utf-16 utf-16le"),
}
_LABELS = {label: name for name, (_, labels) in _WHATWG_ENCODINGS.items() for label in labels.split()}
#: the names charset-normalizer gives its guesses (Python codec names) that are not WHATWG labels
_DETECTOR_NAMES = {
    "latin_1": "windows-1252",
    "cp932": "shift_jis",
    "cp949": "euc-kr",
    "cp874": "windows-874",
    "mac_roman": "macintosh",
    "mac_cyrillic": "x-mac-cyrillic",
    "big5hkscs": "big5",
}
#: the detector chooses among the encodings a browser knows (not DOS code pages such as cp850)
_DETECTABLE = sorted({codec for codec, _ in _WHATWG_ENCODINGS.values()} - {"utf-16-be", "utf-16-le"})
_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xfe\xff", "utf-16be"), (b"\xff\xfe", "utf-16le"))
#: WHATWG's windows-1252 maps the five bytes cp1252 leaves undefined to the C1 controls, like latin-1
_CP1252_HIGH = {i: bytes([i]).decode("cp1252", errors="ignore") or chr(i) for i in range(0x80, 0xA0)}
_PRESCAN_BYTES = 1024
_COMMENT = re.compile(rb"<!--.*?(?:-->|\Z)", re.S)
_META_TAG = re.compile(rb"<meta[\s/]([^>]*)", re.I)
_ATTRIBUTE = re.compile(rb"""([^\s/>=]+)\s*(?:=\s*("[^"]*"|'[^']*'|[^\s>]*))?""")
_CHARSET_PARAM = re.compile(r"""charset\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s;"']+))""", re.I)
#: charset-normalizer's mess ratio (0 = clean text) of the decodings measured on the shared crawls'
#: pages: right encodings 0.000-0.020, wrong ones 0.003-1.3 (a few accents of Dutch read as KOI8-R
#: are the low end: little text is damaged, and none can be proven so). A declaration is overridden
#: only by a guess whose text is this clean, and, when the declared encoding decodes, this much cleaner.
_CLEAN_MESS = 0.025
_MOJIBAKE_MARGIN = 0.02
#: detector matches this close to the best are ties, broken by ``_PREVALENCE``
_TIE_CHAOS = 0.005
_TIE_COHERENCE = 0.05
#: legacy encodings roughly by their share of web pages (W3Techs' character-encoding survey), commonest first
_PREVALENCE = (
    "windows-1252",
    "windows-1251",
    "shift_jis",
    "euc-jp",
    "euc-kr",
    "gbk",
    "gb18030",
    "windows-1250",
    "big5",
    "iso-8859-2",
    "windows-1256",
    "windows-874",
    "iso-8859-15",
    "windows-1254",
    "koi8-r",
)
_UTF8_SEQUENCE = re.compile(
    rb"[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]"
    rb"|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}"
)


@dataclass(frozen=True)
class DecodedPage:
    """A page as text, with the encoding it was read in and the one it declared.

    ``declared`` is the WHATWG name the page declared (by BOM, HTTP header or ``<meta>``), "" if none;
    ``encoding`` is the one used. They differ when the declaration contradicted the bytes.
    """

    text: str
    encoding: str
    declared: str
    undecodable: int  # bytes replaced by U+FFFD

    @property
    def corrected(self) -> bool:
        return bool(self.declared) and self.encoding != self.declared


def encoding_for_label(label: str) -> str:
    """The WHATWG encoding name of a charset label ("" for a label the standard does not know)."""
    return _LABELS.get(label.strip("\t\n\f\r ").lower(), "")


def decode_page(payload: bytes, content_type: str) -> DecodedPage:
    """The page decoded as a browser would (BOM, HTTP charset, ``<meta>`` prescan, then detection),
    except that a declared charset the bytes contradict is corrected (see ``_check_declared``)."""
    for bom, name in _BOMS:
        if payload.startswith(bom):  # a byte order mark wins over every declaration
            text, bad = _decode(payload[len(bom) :], name)
            return DecodedPage(text, name, name, bad)
    declared = _http_charset(content_type) or _prescan_meta(payload[:_PRESCAN_BYTES])
    if declared:
        encoding = _check_declared(payload, declared)
    elif _is_utf8(payload) or _damaged_utf8(payload):
        encoding = "utf-8"
    else:
        encoding = _detect(payload) or "utf-8"
    text, bad = _decode(payload, encoding)
    return DecodedPage(text, encoding, declared, bad)


def decode_html(payload: bytes, content_type: str) -> tuple[str, int]:
    """The page as text, and how many bytes could not be decoded (replaced by U+FFFD)."""
    page = decode_page(payload, content_type)
    return page.text, page.undecodable


def _charset_label(content_type: str) -> str:
    """The ``charset=`` parameter of a Content-Type value (quoted or not), "" if none."""
    m = _CHARSET_PARAM.search(content_type or "")
    return next((g for g in m.groups() if g is not None), "") if m else ""


def _http_charset(content_type: str) -> str:
    return encoding_for_label(_charset_label(content_type))


def _prescan_meta(head: bytes) -> str:
    """The charset of the first ``<meta charset>`` / ``<meta http-equiv=content-type content=...>`` in the
    first 1024 bytes, comments skipped (WHATWG "prescan a byte stream"). A UTF-16 label there means
    UTF-8: the bytes were readable as ASCII to find it, so they are not UTF-16."""
    head = _COMMENT.sub(b"", head)
    for tag in _META_TAG.finditer(head):
        attrs: dict[bytes, bytes] = {}
        for m in _ATTRIBUTE.finditer(tag.group(1)):
            attrs.setdefault(m.group(1).lower(), (m.group(2) or b"").strip(b"\"'"))
        label = ""
        if b"charset" in attrs:
            label = attrs[b"charset"].decode("ascii", "replace")
        elif attrs.get(b"http-equiv", b"").lower() == b"content-type":
            label = _charset_label(attrs.get(b"content", b"").decode("ascii", "replace"))
        name = encoding_for_label(label)
        if name:
            return "utf-8" if name in ("utf-16be", "utf-16le") else name
    return ""


def _check_declared(payload: bytes, declared: str) -> str:
    """The declared encoding, unless the bytes contradict it.

    * A UTF-16 label on bytes without zero bytes is UTF-8 (as WHATWG does for ``<meta>``).
    * Non-ASCII bytes that are valid UTF-8 under a legacy label are UTF-8: text in a legacy encoding
      practically never forms valid multi-byte UTF-8 sequences, while "UTF-8 served as ISO-8859-1" is
      the commonest wrong label on the web (it turns "café" into "cafÃ©").
    * Bytes the declared encoding cannot decode are read in the detector's guess when that reads as
      clean text, except UTF-8 damaged by a few stray bytes (it stays UTF-8; extract repairs it).
    * Bytes whose declared decoding reads like mojibake (charset-normalizer's mess ratio) are read in
      the detector's guess when that is clearly cleaner.
    """
    if declared in ("utf-16be", "utf-16le") and b"\x00" not in payload[:_PRESCAN_BYTES]:
        declared = "utf-8"  # HTML in UTF-16 has a zero byte in every ASCII character
    if payload.isascii():
        return declared
    if declared != "utf-8" and _is_utf8(payload):
        return "utf-8"
    try:
        text = _strict(payload, declared)
    except UnicodeDecodeError:
        if declared == "utf-8" and _damaged_utf8(payload):
            return declared
        guess = _detect(payload)
        clean = guess and mess_ratio(_strict(payload, guess), maximum_threshold=1.0) <= _CLEAN_MESS
        return guess if clean else declared
    if declared == "utf-8":  # valid UTF-8 (any mojibake in it was there before it was encoded)
        return declared
    declared_mess = mess_ratio(text, maximum_threshold=1.0)
    if declared_mess <= _MOJIBAKE_MARGIN:
        return declared
    guess = _detect(payload)
    if not guess or guess == declared:
        return declared
    guessed_mess = mess_ratio(_strict(payload, guess), maximum_threshold=1.0)
    return guess if guessed_mess + _MOJIBAKE_MARGIN < declared_mess else declared


def _damaged_utf8(payload: bytes) -> bool:
    """UTF-8 with some bad bytes rather than another encoding: more valid multi-byte sequences than
    invalid ones (a legacy encoding's text forms few valid sequences and many invalid ones)."""
    invalid = payload.decode("utf-8", errors="replace").count("\ufffd")
    return len(_UTF8_SEQUENCE.findall(payload)) >= invalid


def _detect(payload: bytes) -> str:
    """charset-normalizer's guess as a WHATWG name, "" when it finds none that decodes cleanly.

    On Latin text with few accents the detector cannot tell the single-byte encodings apart (a French
    page in windows-1252 scores 0.80 coherence as windows-1250 and 0.76 as itself); its near-ties
    (``_TIE_CHAOS`` / ``_TIE_COHERENCE``) are broken by how common each encoding is on the web.
    """
    matches = list(from_bytes(payload, preemptive_behaviour=False, cp_isolation=_DETECTABLE))
    if not matches:
        return ""
    best = max(matches, key=lambda m: (-m.chaos, m.coherence))
    ties = [
        name
        for m in matches
        if m.chaos <= best.chaos + _TIE_CHAOS and m.coherence >= best.coherence - _TIE_COHERENCE
        for name in map(_whatwg_name, [m.encoding, *m.could_be_from_charset])
        if name
    ]
    for name in sorted(ties, key=lambda n: _PREVALENCE.index(n) if n in _PREVALENCE else len(_PREVALENCE)):
        try:
            _strict(payload, name)
        except UnicodeDecodeError:
            continue
        return name
    return ""


def _whatwg_name(codec: str) -> str:
    """The WHATWG name of a Python codec name ("" if none)."""
    return (
        encoding_for_label(codec)
        or encoding_for_label(codec.replace("_", "-"))
        or _DETECTOR_NAMES.get(codec, "")
    )


def _is_utf8(payload: bytes) -> bool:
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _strict(payload: bytes, name: str) -> str:
    if name == "windows-1252":
        return payload.decode("latin-1").translate(_CP1252_HIGH)
    return payload.decode(_WHATWG_ENCODINGS[name][0])


def _decode(payload: bytes, name: str) -> tuple[str, int]:
    """The bytes decoded, undecodable ones replaced by U+FFFD, and how many were."""
    try:
        return _strict(payload, name), 0
    except UnicodeDecodeError:
        codec = _WHATWG_ENCODINGS[name][0]
        text = payload.decode(codec, errors="replace")
        return text, text.count("\ufffd") - payload.decode(codec, errors="ignore").count("\ufffd")
