"""Real WARC inputs for the stage tests, made in tmp_path from real pages of ../shared/data.

The pages are real HTML; only the damage is synthetic (a truncated gzip member, a lying
Content-Length, invalid UTF-8, a 50 MB page, deep nesting, an empty body).
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter


def real_pages(shared_data: Path, n: int, host_prefix: str = "", part: int = 0) -> list[tuple[str, bytes]]:
    """The first ``n`` HTML responses (url, payload) of a first-crawl file, optionally of one site."""
    out = []
    with open(shared_data / "warc" / f"crawl-2026-03-part{part}.warc.gz", "rb") as f:
        for rec in ArchiveIterator(f):
            if rec.rec_type != "response":
                continue
            url = rec.rec_headers.get_header("WARC-Target-URI")
            if host_prefix and not url.split("/")[2].startswith(host_prefix):
                continue
            out.append((url, rec.content_stream().read()))
            if len(out) == n:
                break
    return out


def warc_bytes(
    pages: list[tuple[str, bytes]],
    gz: bool = True,
    date: str = "2026-03-01T00:00:00Z",
    content_type: str = "text/html; charset=utf-8",
    status: str = "200 OK",
    headers: tuple[tuple[str, str], ...] = (),
    http_length: int | None = None,
) -> bytes:
    """A WARC of HTTP responses whose bodies are ``pages``' payloads as given (``headers`` are added,
    e.g. a Content-Encoding the payloads were encoded with; ``http_length``: the HTTP Content-Length
    every response declares, else its payload's length)."""
    buf = io.BytesIO()
    w = WARCWriter(buf, gzip=gz)
    for url, payload in pages:
        http = StatusAndHeaders(
            status,
            [("Content-Type", content_type), ("Content-Length", str(http_length or len(payload))), *headers],
            protocol="HTTP/1.1",
        )
        rec = w.create_warc_record(
            url,
            "response",
            payload=io.BytesIO(payload),
            http_headers=http,
            warc_headers_dict={"WARC-Date": date},
        )
        w.write_record(rec)
    return buf.getvalue()


def members(data: bytes) -> Iterator[bytes]:
    """The gzip members of a record-per-member WARC.gz, as bytes."""
    it = ArchiveIterator(io.BytesIO(data))
    for rec in it:
        rec.content_stream().read()
        it.read_to_end()
        off, n = it.get_record_offset(), it.get_record_length()
        yield data[off : off + n]


def truncated_gzip(pages: list[tuple[str, bytes]]) -> bytes:
    """A WARC.gz whose last gzip member is cut in half (a crawler killed mid-write)."""
    data = warc_bytes(pages)
    last = list(members(data))[-1]
    return data[: len(data) - len(last) // 2]


def lying_content_length(pages: list[tuple[str, bytes]], which: int, delta: int) -> bytes:
    """An uncompressed WARC where record ``which`` declares ``delta`` more bytes than it has."""
    data = warc_bytes(pages, gz=False)
    pos = -1
    for _ in range(which + 1):
        pos = data.index(b"WARC-Type: response", pos + 1)
    start = data.index(b"Content-Length: ", pos)
    end = data.index(b"\r\n", start)
    n = int(data[start + 16 : end])
    return data[:start] + f"Content-Length: {n + delta}".encode() + data[end:]


def invalid_utf8(payload: bytes, every: int) -> bytes:
    """The page with a stray 0xFF byte (never valid UTF-8) after every ``every``-th byte of its body."""
    body_at = payload.find(b"<body")
    head, body = payload[:body_at], payload[body_at:]
    return head + b"".join(body[i : i + every] + b"\xff" for i in range(0, len(body), every))


def huge_page(payload: bytes, size: int = 50 * 1024 * 1024) -> bytes:
    """A real page whose body is repeated until the page is ``size`` bytes."""
    start, end = payload.find(b"<body"), payload.rfind(b"</body>")
    body = payload[payload.index(b">", start) + 1 : end]
    reps = size // len(body) + 1
    return (payload[: payload.index(b">", start) + 1] + body * reps + payload[end:])[:size]


def deeply_nested(payload: bytes, depth: int = 20_000) -> bytes:
    start = payload.find(b"<body")
    inner = payload[payload.index(b">", start) + 1 :]
    return payload[: payload.index(b">", start) + 1] + b"<div>" * depth + inner + b"</div>" * depth


def write_jsonl_gz(path: Path, records: list[dict]) -> Path:
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode(), mtime=0))
    return path
