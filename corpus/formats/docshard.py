"""Intermediate document shards: zstd-compressed JSONL, one record per line, written atomically.

A shard ``NAME.jsonl.zst`` is complete only when its sidecar ``NAME.jsonl.zst.json`` exists; the
sidecar records the record count, the file's sha256 and whatever the writer adds (the input digest and
config hash it was made from, which is what makes a finished shard skippable on a rerun). Both files
are written to a temporary name and renamed, so a killed writer leaves no half-shard behind.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import zstandard

from corpus.model import Document
from corpus.model.layout import fsync_dir

SUFFIX = ".jsonl.zst"
ZSTD_LEVEL = 3
_BLOCK = 1 << 20


class ShardCorrupt(ValueError):
    """A shard's bytes do not match its sidecar."""


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """``data`` under a temporary name, fsynced, renamed to ``path``, the directory fsynced: a kill or a
    crash leaves the old file or the new one (and, after a crash, the name as renamed). A file renamed
    into the same directory just before (a shard before its sidecar) is made durable with it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_bytes(
        path, (json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()
    )


class RecordsFile:
    """A part's fixed-width records (a stage's ``index_records`` artifact): written under a temporary
    name, hashed as written, renamed into place, then its sidecar (sha256, records); a part redone after
    a kill replaces it. The stage encodes each row (its index kind's codec)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.tmp, "wb")
        self.sha = hashlib.sha256()
        self.records = 0

    def write(self, row: bytes) -> None:
        self.file.write(row)
        self.sha.update(row)
        self.records += 1

    def write_rows(self, rows: Any) -> None:
        """Many records at once: a structured array of the index kind's record dtype."""
        data = rows.tobytes()
        self.file.write(data)
        self.sha.update(data)
        self.records += len(rows)

    def close(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        os.replace(self.tmp, self.path)  # made durable with its sidecar (the same directory)
        atomic_write_json(sidecar_path(self.path), {"records": self.records, "sha256": self.sha.hexdigest()})

    def abort(self) -> None:
        """A failed part: the temporary file goes (the file in place, an earlier run's, is replaced by the
        part's redo)."""
        self.file.close()
        self.tmp.unlink(missing_ok=True)


class _HashingFile(io.RawIOBase):
    """Counts and hashes the compressed bytes as they are written, so the file is read only once."""

    def __init__(self, f: io.BufferedWriter) -> None:
        self._f = f
        self.sha = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.sha.update(b)
        return self._f.write(b)


class ShardWriter:
    """Writes records to ``path`` and, on :meth:`close`, renames it into place and writes the sidecar.

    Input is fed to the compressor in fixed 1 MiB blocks so the compressed bytes depend only on the
    records, never on how callers batched their writes.
    """

    def __init__(self, path: Path, sidecar_extra: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(f".{self.path.name}.tmp.{os.getpid()}")
        self._raw = open(self._tmp, "wb")
        self._hashing = _HashingFile(self._raw)
        self._zw = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True).stream_writer(
            self._hashing, closefd=False
        )
        self._buf = bytearray()
        self.records = 0
        self.sidecar_extra = dict(sidecar_extra or {})
        self._closed = False

    def write_line(self, line: bytes) -> None:
        self._buf += line
        self._buf += b"\n"
        self.records += 1
        while len(self._buf) >= _BLOCK:
            self._zw.write(bytes(self._buf[:_BLOCK]))
            del self._buf[:_BLOCK]

    def write_doc(self, doc: Document) -> None:
        self.write_line(doc.to_json_bytes())

    def close(self) -> dict[str, Any]:
        """Finish the shard; returns the sidecar it wrote."""
        if self._closed:
            raise RuntimeError(f"shard {self.path} already closed")
        if self._buf:
            self._zw.write(bytes(self._buf))
            self._buf.clear()
        self._zw.flush(zstandard.FLUSH_FRAME)
        self._zw.close()
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._raw.close()
        os.replace(self._tmp, self.path)
        sidecar = {"records": self.records, "sha256": self._hashing.sha.hexdigest(), **self.sidecar_extra}
        atomic_write_json(sidecar_path(self.path), sidecar)
        self._closed = True
        return sidecar

    def abort(self) -> None:
        if not self._closed:
            self._raw.close()
            self._tmp.unlink(missing_ok=True)
            self._closed = True

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_shard(path: Path, lines: Iterable[bytes], sidecar_extra: dict[str, Any] | None = None) -> dict:
    """Write a whole shard from an iterable of JSON lines; returns its sidecar."""
    w = ShardWriter(path, sidecar_extra)
    try:
        for line in lines:
            w.write_line(line)
    except BaseException:
        w.abort()
        raise
    return w.close()


def read_sidecar(path: Path) -> dict[str, Any] | None:
    sc = sidecar_path(Path(path))
    if not sc.exists():
        return None
    return json.loads(sc.read_text())


def is_complete(path: Path, **expect: Any) -> bool:
    """True when the shard and its sidecar exist and the sidecar records ``expect`` (e.g. input digest)."""
    path = Path(path)
    sc = read_sidecar(path)
    if sc is None or not path.exists():
        return False
    return all(sc.get(k) == v for k, v in expect.items())


def iter_lines(path: Path, verify: bool = True) -> Iterator[bytes]:
    """Yield the raw JSON lines of a shard; with ``verify``, check the sha256 and count once read."""
    path = Path(path)
    expected = read_sidecar(path) if verify else None
    if verify and expected is None:
        raise ShardCorrupt(f"{path}: no sidecar, the shard was never completed")
    sha = hashlib.sha256()
    n = 0
    with open(path, "rb") as raw:

        class _Tee(io.RawIOBase):
            def readable(self) -> bool:
                return True

            def readinto(self, b) -> int:  # type: ignore[override]
                data = raw.read(len(b))
                sha.update(data)
                b[: len(data)] = data
                return len(data)

        reader = zstandard.ZstdDecompressor().stream_reader(_Tee(), read_across_frames=True)
        text = io.BufferedReader(reader, buffer_size=_BLOCK)
        try:
            for line in text:
                n += 1
                yield line.rstrip(b"\n")
        except zstandard.ZstdError as e:
            raise ShardCorrupt(f"{path}: not a valid zstd stream after {n} records ({e})") from e
    if expected is not None and (sha.hexdigest() != expected["sha256"] or n != expected["records"]):
        raise ShardCorrupt(
            f"{path}: content does not match its sidecar (sha256 {sha.hexdigest()[:12]}… vs "
            f"{expected['sha256'][:12]}…, {n} vs {expected['records']} records)"
        )


def iter_records(path: Path, verify: bool = True) -> Iterator[dict[str, Any]]:
    for i, line in enumerate(iter_lines(path, verify=verify)):
        try:
            yield json.loads(line)
        except ValueError as e:
            raise ShardCorrupt(f"{path}: record {i} is not JSON ({e})") from e


def iter_docs(path: Path, verify: bool = True) -> Iterator[Document]:
    for record in iter_records(path, verify=verify):
        yield Document.from_dict(record)
