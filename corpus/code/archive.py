"""Reading a repository: a tar (plain, gzip, bzip2 or xz), a zip, or a directory, one member at a time.

Archives are recognised by their bytes, not their names (:func:`sniff`); a member is never written to
disk, so a path with ``..`` or a link cannot reach outside anything. An archive's top folder is the
repository root when every member lies under one (``requests-2.31.0/``, npm's ``package/``). A
damaged archive raises :class:`ArchiveError` with its quarantine reason (``truncated_archive``,
``malformed_archive``). Known limit: an uncompressed tar cut exactly at a member boundary reads as a
shorter, whole archive. See docs/code.md ("Damaged archives").
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import os
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: names that say "repository archive" (content decides first; the name serves a file too damaged to sniff)
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_HEAD = 4096


class ArchiveError(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail[:300]


@dataclass(frozen=True)
class Member:
    """One entry of a repository. ``read`` is valid only while the iterator is on this member."""

    path: str  # from the repository root, "/"-separated; "" when unsafe (absolute, "..")
    raw_name: str  # as stored in the archive
    kind: str  # "file", "link" (symbolic or hard), "special" (device, fifo, ...)
    size: int
    read: Callable[[], bytes]


def has_archive_suffix(path: Path) -> bool:
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


def archive_stem(path: Path) -> str:
    """``requests-2.31.0`` of ``requests-2.31.0.tar.gz``; a directory's own name."""
    name = path.name
    for suffix in sorted(ARCHIVE_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)] or name
    return name


def _inner_head(head: bytes) -> bytes:
    """The first bytes of what a compressed head decompresses to (as far as they go)."""
    try:
        if head.startswith(b"\x1f\x8b"):
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, _HEAD)
        if head.startswith(b"BZh"):
            return bz2.BZ2Decompressor().decompress(head, _HEAD)
        if head.startswith(b"\xfd7zXZ\x00"):
            return lzma.LZMADecompressor().decompress(head, _HEAD)
    except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError):
        return b""
    return head


def is_tar_header(block: bytes) -> bool:
    """A 512-byte tar header: ``ustar`` magic (POSIX, GNU) or, for old V7 tars, a valid checksum."""
    if len(block) < 512 or not block[:100].strip(b"\0"):
        return False
    if block[257:262] == b"ustar":
        return True
    try:
        declared = int(block[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        return False
    return declared == sum(block[:148]) + 8 * 32 + sum(block[156:512])


def sniff(path: Path) -> str:
    """What a file's bytes are: ``"tar"`` (plain or gzip/bzip2/xz-wrapped), ``"zip"``, ``"warc"`` (a
    WARC/ARC head, gzip-wrapped or not), ``"gzip"`` (another gzip stream) or ``""``."""
    try:
        with open(path, "rb") as f:
            head = f.read(64 << 10)
            if head.startswith(b"BZh"):  # bzip2 gives nothing before its first whole block (<= 900 kB)
                head += f.read(1 << 20)
    except OSError:
        return ""
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    inner = _inner_head(head)
    if is_tar_header(inner[:512]):
        return "tar"
    if inner.startswith((b"WARC/", b"filedesc")):
        return "warc"
    return "gzip" if head.startswith(b"\x1f\x8b") else ""


def repository_kind(path: Path) -> str:
    """How to read a repository input: "dir", "tar", "zip", or "" (not an archive: malformed)."""
    if path.is_dir():
        return "dir"
    kind = sniff(path)
    if kind in ("tar", "zip"):
        return kind
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError:
        return ""
    # a compressed stream too short to show a tar header: the tar reader says what is wrong with it
    return "tar" if magic.startswith((b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")) else ""


# --- paths -----------------------------------------------------------------------------------------


def clean_path(name: str) -> str:
    """The member's path relative to the archive, or "" when it is absolute or climbs out (``..``)."""
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return ""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return ""
    return "/".join(parts)


def common_root(names: list[str]) -> str:
    """The one top folder every cleaned name lies under ("" when there is none)."""
    top = ""
    for n in names:
        if not n:
            continue
        first, sep, _ = n.partition("/")
        if not sep:  # a file (or a bare folder entry) at the top
            if n != top and top != "":
                return ""
            top = top or n
            continue
        if top and first != top:
            return ""
        top = first
    # a name without "/" equal to the top must have been the folder's own entry
    return top if top and all((n == top or n.startswith(top + "/")) for n in names if n) else ""


def _under(path: str, root: str) -> str:
    if not path or not root:
        return path
    return path[len(root) + 1 :] if path.startswith(root + "/") else ""


# --- members ---------------------------------------------------------------------------------------


def iter_members(path: Path, kind: str, strip_top: bool = True) -> Iterator[Member]:
    """Every file entry of the repository at ``path`` (``kind``: "tar", "zip" or "dir"), folders left
    out, in the archive's own order (a directory: sorted walk). Raises ArchiveError.

    A tar is read in one streaming pass whose top folder is proposed by its first entry; in the rare
    tar where a later entry lies elsewhere, :class:`NoCommonRoot` is raised and the caller reads it
    again with ``strip_top=False``."""
    if kind == "dir":
        yield from _dir_members(path)
    elif kind == "zip":
        yield from _zip_members(path)
    elif kind == "tar":
        yield from _tar_pass(path, None if strip_top else "")
    else:
        raise ArchiveError("malformed_archive", f"not a tar or zip archive ({_describe_head(path)})")


def _describe_head(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    return f"first bytes {head!r}" if head else "empty file"


def _open_stream(path: Path):
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.open(path, "rb")
    if magic.startswith(b"BZh"):
        return bz2.open(path, "rb")
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.open(path, "rb")
    return open(path, "rb")


def _tar_error(e: BaseException) -> ArchiveError:
    text = f"{type(e).__name__}: {e}"
    truncated = isinstance(e, EOFError) or "unexpected end" in str(e) or "end of data" in str(e)
    return ArchiveError("truncated_archive" if truncated else "malformed_archive", text)


class NoCommonRoot(Exception):
    """A tar entry lies outside the top folder its first entry proposed: read it again with
    ``strip_top=False`` (what was read so far is void)."""


def _tar_pass(path: Path, root: str | None) -> Iterator[Member]:
    stream = _open_stream(path)
    try:
        try:
            tar = tarfile.open(fileobj=stream, mode="r|")
        except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as e:
            raise _tar_error(e) from None
        tentative = root
        while True:
            try:
                info = tar.next()
            except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as e:
                raise _tar_error(e) from None
            if info is None:
                break
            name = clean_path(info.name)
            if tentative is None:  # the first entry proposes the top folder
                tentative = name.split("/", 1)[0] if (info.isdir() or "/" in name) else ""
            if tentative and name and name != tentative and not name.startswith(tentative + "/"):
                raise NoCommonRoot()
            if info.isdir() or (tentative and name == tentative):
                continue
            rel = _under(name, tentative) if tentative else name
            if info.issym() or info.islnk():
                kind = "link"
            elif info.isreg():
                kind = "file"
            else:
                kind = "special"

            def read(info: tarfile.TarInfo = info) -> bytes:
                try:
                    f = tar.extractfile(info)
                    data = f.read() if f is not None else b""
                except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as e:
                    raise _tar_error(e) from None
                if len(data) != info.size:
                    raise ArchiveError("truncated_archive", f"{info.name}: {len(data)} of {info.size} bytes")
                return data

            yield Member(rel if name else "", info.name, kind, info.size, read)
        try:  # the rest of the compressed stream: its end marker and checksum prove the archive whole
            while stream.read(1 << 20):
                pass
        except (OSError, EOFError, zlib.error, lzma.LZMAError) as e:
            raise _tar_error(e) from None
    finally:
        stream.close()


def _zip_members(path: Path) -> Iterator[Member]:
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise ArchiveError(_zip_reason(path), f"{type(e).__name__}: {e}") from None
    with zf:
        infos = zf.infolist()
        names = [clean_path(i.filename) for i in infos]
        root = common_root(names)
        for info, name in zip(infos, names, strict=True):
            if info.is_dir() or (root and name == root):
                continue
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                kind = "link"
            elif stat.S_IFMT(mode) and not stat.S_ISREG(mode):  # no type bits (most zip tools): a file
                kind = "special"
            else:
                kind = "file"

            def read(info: zipfile.ZipInfo = info) -> bytes:
                try:
                    return zf.read(info)
                except (zipfile.BadZipFile, OSError, EOFError, zlib.error, RuntimeError, ValueError) as e:
                    reason = "truncated_archive" if isinstance(e, EOFError) else "malformed_archive"
                    raise ArchiveError(reason, f"{info.filename}: {type(e).__name__}: {e}") from None

            yield Member(_under(name, root) if name else "", info.filename, kind, info.file_size, read)


def _zip_reason(path: Path) -> str:
    """A zip whose first bytes are a zip entry but whose end record (the central directory, written
    last) is missing was cut short; anything else is malformed."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(4)
            f.seek(max(0, size - (1 << 16) - 22))
            tail = f.read()
    except OSError:
        return "malformed_archive"
    return "truncated_archive" if head == b"PK\x03\x04" and b"PK\x05\x06" not in tail else "malformed_archive"


def _dir_members(root: Path) -> Iterator[Member]:
    def walk(d: Path, rel: str) -> Iterator[Member]:
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as e:
            raise ArchiveError("malformed_archive", f"{d}: {type(e).__name__}: {e}") from None
        for e in entries:
            p = f"{rel}{e.name}"
            if e.is_symlink():
                yield Member(p, p, "link", 0, lambda: b"")
            elif e.is_dir(follow_symlinks=False):
                yield from walk(Path(e.path), p + "/")
            elif e.is_file(follow_symlinks=False):

                def read(fp: str = e.path) -> bytes:
                    try:
                        with open(fp, "rb") as f:
                            return f.read()
                    except OSError as err:
                        raise ArchiveError(
                            "malformed_archive", f"{fp}: {type(err).__name__}: {err}"
                        ) from None

                yield Member(p, p, "file", e.stat(follow_symlinks=False).st_size, read)
            else:
                yield Member(p, p, "special", 0, lambda: b"")

    if not root.is_dir():
        raise ArchiveError("malformed_archive", f"{root} is not a directory")
    yield from walk(root, "")


def directory_digest(root: Path) -> str:
    """A content digest of a directory declared as a repository: every entry's path, kind and bytes (a
    link: its target), so the same tree has the same digest anywhere."""
    h = hashlib.sha256()

    def walk(d: Path, rel: str) -> None:
        for e in sorted(os.scandir(d), key=lambda e: e.name):
            p = f"{rel}{e.name}"
            if e.is_symlink():
                h.update(
                    b"L" + p.encode("utf-8", "surrogateescape") + b"\0" + os.readlink(e.path).encode() + b"\0"
                )
            elif e.is_dir(follow_symlinks=False):
                walk(Path(e.path), p + "/")
            elif e.is_file(follow_symlinks=False):
                fh = hashlib.sha256()
                with open(e.path, "rb") as f:
                    for block in iter(lambda f=f: f.read(1 << 20), b""):
                        fh.update(block)
                h.update(b"F" + p.encode("utf-8", "surrogateescape") + b"\0" + fh.digest())

    walk(root, "")
    return h.hexdigest()
