"""Curated sources: JSONL (one ``{"text", "url"?, "id"?, "license"?, "date"?}`` per line) and plain text files."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import zstandard

_SURROGATES = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class CuratedRecord:
    index: int
    text: str
    url: str
    license: str
    date: str
    raw_digest: str
    replaced: int  # characters that were not valid Unicode text and became U+FFFD


@dataclass(frozen=True)
class CuratedError:
    index: int
    reason: str
    detail: str
    raw_digest: str


def _open(path: Path) -> io.BufferedIOBase:
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".zst"):
        return zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), read_across_frames=True)
    return open(path, "rb")


def _clean(text: str) -> tuple[str, int]:
    """Lone surrogates (``"\\ud800"`` in JSON) cannot be stored as UTF-8: they become U+FFFD, counted."""
    fixed, n = _SURROGATES.subn("\ufffd", text)
    return fixed, n


def iter_jsonl(path: Path, url_prefix: str) -> Iterator[CuratedRecord | CuratedError]:
    """Every line of a JSONL file; a line that is not a JSON object with a string ``text`` is an error."""
    index = -1
    try:
        with _open(path) as f:
            for index, line in enumerate(io.BufferedReader(f)):
                line = line.rstrip(b"\r\n")
                digest = hashlib.sha256(line).hexdigest()
                if not line.strip():
                    yield CuratedError(index, "empty_line", "blank line", digest)
                    continue
                try:
                    rec = json.loads(line)
                except (UnicodeDecodeError, ValueError) as e:
                    yield CuratedError(index, "bad_json", str(e)[:200], digest)
                    continue
                if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
                    yield CuratedError(index, "missing_text", "record has no string 'text' field", digest)
                    continue
                text, replaced = _clean(rec["text"])
                ident = rec.get("id", index)
                url = str(rec.get("url") or f"{url_prefix}#{ident}")
                yield CuratedRecord(
                    index=index,
                    text=text,
                    url=_clean(url)[0],
                    license=str(rec.get("license") or ""),
                    date=str(rec.get("date") or rec.get("crawl_date") or "")[:10],
                    raw_digest=digest,
                    replaced=replaced,
                )
    except (OSError, EOFError, zstandard.ZstdError) as e:
        # a corrupt compressed file: what was read so far stands, the rest is one error
        yield CuratedError(index + 1, "unreadable_file", f"{type(e).__name__}: {e}"[:300], "")


def read_text_file(path: Path, url: str) -> CuratedRecord | CuratedError:
    """A plain-text file is one document (UTF-8; undecodable bytes become U+FFFD and are counted)."""
    try:
        with _open(path) as f:
            raw = f.read()
    except (OSError, EOFError) as e:
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
