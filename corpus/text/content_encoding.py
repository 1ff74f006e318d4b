"""An HTTP body's ``Content-Encoding`` undone as a stream, with a cap on what it may decode to.

A WARC stores a response as the server sent it. The body is read in blocks, each decoded with a bound
on its output, and decoding stops once the output passes ``max_decoded_bytes``, so a compression bomb
costs the cap, not its size; the rest is still read, so the digest covers every byte. A stream that
stops before its end marker, or a zstd frame shorter than its header states, is ``truncated_record``,
never half a page. A body labelled but not compressed is read as it is, as browsers do; brotli and
unknown codings are reported, never passed on as text. See docs/ingest-and-filters.md ("ingest").
"""

from __future__ import annotations

import hashlib
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import zstandard

_BLOCK = 1 << 16
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: a zstd frame header's largest size (magic, descriptor, window, dictionary id, content size)
_ZSTD_HEADER_MAX = 18
#: encodings that change nothing (RFC 9110 "identity"; an empty list item)
_IDENTITY = ("", "identity")
#: Content-Encoding values read here, by what they are
_GZIP = ("gzip", "x-gzip")
_DEFLATE = ("deflate",)
_ZSTD = ("zstd",)


@dataclass(frozen=True)
class DecodedBody:
    """A body with its content encoding undone, or why it could not be.

    ``payload`` is None when ``reason`` is set (``decoded_too_large``, ``unsupported_content_encoding``,
    ``unreadable_payload``); ``encoded_digest`` and ``encoded_bytes`` cover the whole body as stored
    (``encoded_digest`` is "" for a body without a coding: the payload is that body, whose digest its
    reader takes anyway).
    """

    payload: bytes | None
    encoded_digest: str
    encoded_bytes: int
    reason: str = ""
    detail: str = ""


class _Truncated(Exception):
    """An encoded body that ends before its coding says it does."""


class _HashingReader(io.RawIOBase):
    """A stream read once, every byte hashed and counted on the way through."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.sha = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.stream.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.sha.update(data)
        self.size += n
        return n


def content_encodings(header: str | None) -> list[str]:
    """The codings of a ``Content-Encoding`` value in the order they were applied, identity left out."""
    return [c for c in (part.strip().lower() for part in (header or "").split(",")) if c not in _IDENTITY]


def decode_body(body: BinaryIO, content_encoding: str | None, max_decoded_bytes: int) -> DecodedBody:
    """The body with its content encoding undone, holding at most ``max_decoded_bytes`` of output
    (plus one block) in memory; the encoded body is read to its end whatever happens."""
    codings = content_encodings(content_encoding)
    if not codings:  # most pages: read as they are, hashed once, by whoever keeps them
        payload = body.read()
        return DecodedBody(payload, "", len(payload))
    raw = _HashingReader(body)
    stream = io.BufferedReader(raw, buffer_size=_BLOCK)
    reason, detail, payload = "", "", None
    if len(codings) > 1:
        reason, detail = (
            "unsupported_content_encoding",
            f"Content-Encoding {', '.join(codings)}: one coding at most",
        )
    elif codings[0] not in (*_GZIP, *_DEFLATE, *_ZSTD):
        why = "no brotli decoder is installed" if codings[0] == "br" else "an unknown coding"
        reason, detail = "unsupported_content_encoding", f"Content-Encoding {codings[0]}: {why}"
    elif (blocks := _decoded_blocks(stream, codings[0])) is None:
        payload = stream.read()  # labelled, not encoded: as large as its record (max_record_bytes) allows
    else:
        out = bytearray()
        try:
            for block in blocks:
                out += block
                if len(out) > max_decoded_bytes:
                    reason = "decoded_too_large"
                    detail = (
                        f"Content-Encoding {codings[0]} body decodes to more than max_decoded_bytes "
                        f"{max_decoded_bytes}; decoding stopped there"
                    )
                    break
            else:
                payload = bytes(out)
        except _Truncated as e:
            reason, detail = "truncated_record", f"Content-Encoding {codings[0]}: {e}"
        except (zlib.error, zstandard.ZstdError) as e:
            reason, detail = (
                "unreadable_payload",
                f"Content-Encoding {codings[0]}: {type(e).__name__}: {e}"[:300],
            )
        del out
    while stream.read(_BLOCK):  # the rest of the body, for the digest and the reader's position
        pass
    return DecodedBody(payload, raw.sha.hexdigest(), raw.size, reason, detail)


def _decoded_blocks(stream: io.BufferedReader, coding: str) -> Iterator[bytes] | None:
    """The decoded body in blocks of at most ``_BLOCK`` bytes each; None when the bytes do not bear
    out their label (the body is read as it is)."""
    head = stream.peek(4)[:4]
    if coding in _GZIP and head.startswith(_GZIP_MAGIC):
        return _inflate(stream, 16 + zlib.MAX_WBITS)
    if coding in _DEFLATE and not head.lstrip().startswith(b"<"):
        zlib_header = len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0
        return _inflate(stream, zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
    if coding in _ZSTD and head.startswith(_ZSTD_MAGIC):
        return _unzstd(stream)
    return None


def _unzstd(stream: io.BufferedReader) -> Iterator[bytes]:
    """Every frame, bounded per read; a first frame that states its content size must decode to it
    (the stream reader itself stops quietly where a cut body stops)."""
    declared = zstandard.get_frame_parameters(stream.peek(_ZSTD_HEADER_MAX)[:_ZSTD_HEADER_MAX]).content_size
    reader = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True, closefd=False)
    decoded = 0
    while block := reader.read(_BLOCK):
        decoded += len(block)
        yield block
    if declared != zstandard.CONTENTSIZE_UNKNOWN and decoded < declared:
        raise _Truncated(f"decodes to {decoded} bytes, its frame states {declared}: the body is cut short")


def _inflate(stream: io.BufferedReader, wbits: int) -> Iterator[bytes]:
    """zlib / raw deflate / gzip (every member of a multi-member body), bounded per call. Bytes after
    the last member that do not start another one are ignored, as browsers do."""
    d = zlib.decompressobj(wbits)
    while chunk := stream.read(_BLOCK):
        data = chunk
        while data:
            yield d.decompress(data, _BLOCK)
            data = d.unconsumed_tail
            if d.eof:
                rest = d.unused_data + data
                if wbits > 16 and rest.startswith(_GZIP_MAGIC):
                    d, data = zlib.decompressobj(wbits), rest
                else:
                    return
    while not d.eof and (block := d.decompress(b"", _BLOCK)):  # what zlib still holds back
        yield block
    if not d.eof:
        raise _Truncated("the stream ends before its end marker: the body is cut short")
