"""Curated sources: JSONL (one ``{"text", "url"?, "id"?, "license"?, "date"?}`` per line) and plain text files.

A source may map the fields to other key paths once (``fields = { url = "metadata.url" }``: Dolma and
datatrove keep url, date and source under ``metadata``); :func:`record_from_dict` reads a record so, for
JSONL lines and for the rows of :mod:`corpus.text.tables` alike. Where the mapping names ``source``, a
record's own source names it within the declared tier.

A line (or a text file) is read to at most the ingest's ``max_record_bytes``: a longer one is
quarantined as ``record_too_large`` and the file goes on. A field of the wrong type (a licence object,
a date list, NaN) or a date that is not an ISO 8601 day is refused by name (``invalid_<field>``),
never turned into its ``str()``. See docs/ingest-and-filters.md ("ingest").
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

from corpus.text.dates import record_day
from corpus.text.inputs import open_regular

_SURROGATES = re.compile("[\ud800-\udfff]")
#: a record's own source name: it names files and tables downstream
_SOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_BLOCK = 1 << 20


@dataclass(frozen=True)
class CuratedRecord:
    index: int
    text: str
    url: str
    license: str
    date: str
    raw_digest: str
    replaced: int  # characters that were not valid Unicode text and became U+FFFD
    source: str = ""  # the record's own source name ("": the declared source's)


@dataclass(frozen=True)
class CuratedError:
    index: int
    reason: str
    detail: str
    raw_digest: str


@contextmanager
def _open(path: Path) -> Iterator[BinaryIO]:
    """The file's bytes, decompressed by its suffix. Opened once, as a regular file
    (:func:`corpus.text.inputs.open_regular`): a FIFO put in a listed file's place is refused, not
    waited on."""
    name = path.name.lower()
    with open_regular(path) as raw:
        if name.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="rb") as f:
                yield f
        elif name.endswith(".zst"):
            with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False) as f:
                yield f
        else:
            yield raw


def _clean(text: str) -> tuple[str, int]:
    """Lone surrogates (``"\\ud800"`` in JSON) cannot be stored as UTF-8: they become U+FFFD, counted."""
    fixed, n = _SURROGATES.subn("\ufffd", text)
    return fixed, n


def iter_jsonl(
    path: Path, url_prefix: str, max_line_bytes: int = 64 << 20, fields: Mapping[str, str] | None = None
) -> Iterator[CuratedRecord | CuratedError]:
    """Every line of a JSONL file; a line that is not a JSON object with a string ``text`` and optional
    fields of their types is an error, and so is a line over ``max_line_bytes`` (never held whole)."""
    index = -1
    try:
        with _open(path) as f:
            for index, (line, digest) in enumerate(_bounded_lines(_buffered(f), max_line_bytes)):
                if line is None:
                    detail = f"line longer than max_record_bytes {max_line_bytes}"
                    yield CuratedError(index, "record_too_large", detail, digest)
                else:
                    yield _record(index, line, digest, url_prefix, fields or {})
    except (OSError, EOFError, zlib.error, zstandard.ZstdError) as e:
        # a corrupt compressed file: what was read so far stands, the rest is one error
        yield CuratedError(index + 1, "unreadable_file", f"{type(e).__name__}: {e}"[:300], "")


def _buffered(f: BinaryIO) -> BinaryIO:
    """A reader that reads lines from a buffer: a gzip member and a plain file already do (a second
    buffer over them costs a layer of calls a line and one per file: ~25 µs a file, 10^5 files); a zstd
    stream is given one."""
    return f if isinstance(f, (io.BufferedReader, gzip.GzipFile)) else io.BufferedReader(f)


def _bounded_lines(f: BinaryIO, cap: int) -> Iterator[tuple[bytes | None, str]]:
    """(line without its line end, sha256 of it); a line over ``cap`` bytes is (None, its sha256),
    read block by block and hashed, never held."""
    while line := f.readline(cap + 2):
        if line.endswith(b"\n") or len(line) < cap + 2:  # the whole line (or the file's last)
            line = line.rstrip(b"\r\n")
            if len(line) <= cap:
                yield line, hashlib.sha256(line).hexdigest()
                continue
            yield None, hashlib.sha256(line).hexdigest()
            continue
        h = hashlib.sha256()
        tail = b""  # line-end bytes held back: only the line's last ones are left out of the digest
        while line:
            data = tail + line
            kept = data.rstrip(b"\r\n")
            h.update(kept)
            tail = data[len(kept) :]
            if line.endswith(b"\n"):
                break
            line = f.readline(_BLOCK)
        yield None, h.hexdigest()


def _record(
    index: int, line: bytes, digest: str, url_prefix: str, fields: Mapping[str, str]
) -> CuratedRecord | CuratedError:
    if not line.strip():
        return CuratedError(index, "empty_line", "blank line", digest)
    try:
        rec = json.loads(line)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        return CuratedError(index, "bad_json", f"{type(e).__name__}: {e}"[:200], digest)
    return record_from_dict(index, rec, digest, url_prefix, fields)


def _at(rec: Any, path: str) -> Any:
    """The value under a key path (``metadata.url``), None where any step is missing or not an object."""
    for key in path.split("."):
        if not isinstance(rec, dict):
            return None
        rec = rec.get(key)
    return rec


def mapped(rec: dict, fields: Mapping[str, str]) -> dict:
    """The record as the reader's flat fields: each mapped field from its key path, the others (and
    ``crawl_date``, the fallback of an unmapped ``date``) under their own names."""
    if not fields:
        return rec
    out = {k: rec.get(k) for k in ("text", "url", "id", "license", "date", "crawl_date", "source")}
    for field, path in fields.items():
        out[field] = _at(rec, path)
    if "date" in fields:
        out["crawl_date"] = None
    return out


def record_from_dict(
    index: int, rec: Any, digest: str, url_prefix: str, fields: Mapping[str, str]
) -> CuratedRecord | CuratedError:
    """One record (a parsed JSON line or a table row) read through the source's field mapping."""
    if isinstance(rec, dict):
        rec = mapped(rec, fields)
    if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
        where = fields.get("text", "text")
        return CuratedError(index, "missing_text", f"record has no string {where!r} field", digest)
    fields = _fields(rec, "source" in fields)
    if isinstance(fields, tuple):
        return CuratedError(index, fields[0], fields[1], digest)
    text, replaced = _clean(rec["text"])
    url = fields["url"] or f"{url_prefix}#{fields['id'] if fields['id'] is not None else index}"
    return CuratedRecord(
        index=index,
        text=text,
        url=_clean(url)[0],
        license=fields["license"],
        date=fields["date"],
        raw_digest=digest,
        replaced=replaced,
        source=fields["source"],
    )


def _fields(rec: dict, own_source: bool = False) -> dict[str, Any] | tuple[str, str]:
    """The optional fields of a record, or (reason, detail) for the first of the wrong type: each a
    string (``id``: or an integer); absent, null and "" mean not given. ``date`` (else ``crawl_date``)
    must be an ISO 8601 day or timestamp; ``source``, read only where the source maps it
    (``own_source``), a name of letters, digits, ``._-``."""
    date_key = "date" if rec.get("date") not in (None, "") else "crawl_date"
    got: dict[str, Any] = {"source": None}
    for key in ("id", "url", "license", *(["source"] if own_source else []), date_key):
        value = rec.get(key)
        if (
            value is not None
            and value != ""
            and not (isinstance(value, str) or (key == "id" and type(value) is int))
        ):
            return (
                f"invalid_{key.removeprefix('crawl_')}",
                f"field {key!r} is {_json_type(value)}, not a string",
            )
        got[key] = value if value != "" else None
    day = record_day(got[date_key]) if got[date_key] is not None else ""
    if day is None:
        return "invalid_date", f"field {date_key!r} is {got[date_key][:40]!r}, not an ISO 8601 date"
    source = got["source"] or ""
    if source and not _SOURCE_NAME.fullmatch(source):
        return "invalid_source", f"source {source[:40]!r} is not a name of letters, digits, '._-'"
    return {
        "id": got["id"],
        "url": got["url"] or "",
        "license": got["license"] or "",
        "date": day,
        "source": source,
    }


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return "a number" if value == value and abs(value) != float("inf") else f"the number {value}"
    return {dict: "an object", list: "an array", int: "a number"}.get(type(value), type(value).__name__)


def read_text_file(path: Path, url: str, max_bytes: int = 64 << 20) -> CuratedRecord | CuratedError:
    """A plain-text file is one document (UTF-8; undecodable bytes become U+FFFD and are counted); one
    over ``max_bytes`` is ``record_too_large``, hashed as it streams past."""
    try:
        with _open(path) as f:
            raw = f.read(max_bytes + 1)
            if len(raw) > max_bytes:
                h = hashlib.sha256(raw)
                del raw
                while block := f.read(_BLOCK):
                    h.update(block)
                detail = f"more than max_record_bytes {max_bytes} bytes"
                return CuratedError(0, "record_too_large", detail, h.hexdigest())
    except (OSError, EOFError, zlib.error, zstandard.ZstdError) as e:
        return CuratedError(0, "unreadable_file", f"{type(e).__name__}: {e}"[:300], "")
    text = raw.decode("utf-8", errors="replace")
    replaced = text.count("\ufffd") - raw.decode("utf-8", errors="ignore").count("\ufffd")
    return CuratedRecord(
        index=0,
        text=text,
        url=url,
        license="",
        date="",
        raw_digest=hashlib.sha256(raw).hexdigest(),
        replaced=replaced,
    )
