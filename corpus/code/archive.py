"""Reading a repository: a tar (plain, gzip, bzip2 or xz), a zip, or a directory, one member at a time.

Archives are recognised by their bytes, not their names (:func:`sniff`); a member is never written to
disk, so a path with ``..`` or a link cannot reach outside anything. An archive's top folder is the
repository root when every member lies under one (``requests-2.31.0/``, npm's ``package/``). A
damaged archive raises :class:`ArchiveError` with its quarantine reason (``truncated_archive``,
``malformed_archive``), and one over a bound (:class:`ArchiveLimits`, tar extended headers, a zip's
central directory) with ``archive_too_large``, ``too_many_members`` or ``header_too_large``. Known
limit: an uncompressed tar cut exactly at a member boundary reads as a shorter, whole archive. See
docs/code.md ("Damaged archives") and docs/ingest-and-filters.md ("ingest").
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import os
import re
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from corpus.text.inputs import InputRefused, open_regular

#: names that say "repository archive" (content decides first; the name serves a file too damaged to sniff)
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_HEAD = 4096
#: a tar's pax or GNU long-name header is read only up to this size, at most this many in a row,
#: and a pax header's digit runs up to this length (Python 3.11's pax parser is quadratic in them)
MAX_TAR_HEADER = 64 << 10
MAX_TAR_HEADER_CHAIN = 8
MAX_PAX_DIGITS = 256
#: a zip's central directory is read only up to this size (it is held whole, with a record per member)
MAX_CENTRAL_DIRECTORY = 64 << 20
#: decompressed bytes past which an archive's ratio to its stored size is checked
RATIO_FLOOR = 64 << 20
_DIGITS = re.compile(rb"[0-9]+")
_TAR_EXTENDED = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME)
_TAR_EXTENDED += (tarfile.GNUTYPE_LONGLINK,)


def display_name(name: str) -> str:
    """A name as text that can always be written: bytes that are not UTF-8 (a name read with
    ``surrogateescape``) shown as ``\\xNN``."""
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def is_utf8_name(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class ArchiveError(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        detail = display_name(detail)
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail[:300]


@dataclass(frozen=True)
class ArchiveLimits:
    """What one repository may cost: decompressed bytes (a tar: its whole stream; a zip or a directory:
    the members read), entries, and decompressed bytes per stored byte once past :data:`RATIO_FLOOR`."""

    max_bytes: int = 1 << 30
    max_members: int = 100_000
    max_ratio: int = 100


class _Budget:
    """An archive's spending against its :class:`ArchiveLimits` (``stored``: its size on disk, None
    for a directory)."""

    def __init__(self, limits: ArchiveLimits, stored: int | None) -> None:
        self.limits = limits
        self.stored = stored
        self.bytes = 0
        self.members = 0

    def spend(self, n: int) -> None:
        self.bytes += n
        lim = self.limits
        if self.bytes > lim.max_bytes:
            raise ArchiveError(
                "archive_too_large", f"more than max_archive_bytes {lim.max_bytes} decompressed"
            )
        if self.stored is not None and self.bytes > max(RATIO_FLOOR, lim.max_ratio * self.stored):
            raise ArchiveError(
                "archive_too_large",
                f"{self.bytes} bytes decompressed from {self.stored} stored: more than max_archive_ratio "
                f"{lim.max_ratio}",
            )

    def member(self) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise ArchiveError("too_many_members", f"more than max_archive_members {self.limits.max_members}")


class _CountedStream:
    """A decompressed stream whose every byte read is spent from a :class:`_Budget`."""

    def __init__(self, stream, budget: _Budget) -> None:
        self.stream = stream
        self.budget = budget

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        self.budget.spend(len(data))
        return data

    def close(self) -> None:
        self.stream.close()


class _BoundedTarInfo(tarfile.TarInfo):
    """A tar header whose pax / GNU long-name extension is refused over :data:`MAX_TAR_HEADER`
    before tarfile reads it, and a pax one with a digit run over :data:`MAX_PAX_DIGITS` or a GNU
    sparse map before tarfile parses it."""

    def _proc_member(self, tarfile):
        if self.type not in _TAR_EXTENDED:
            return super()._proc_member(tarfile)
        if self.size > MAX_TAR_HEADER:
            raise ArchiveError(
                "header_too_large", f"a {self.size}-byte tar extended header > {MAX_TAR_HEADER}"
            )
        depth = getattr(tarfile, "_extended_depth", 0)
        if depth >= MAX_TAR_HEADER_CHAIN:
            raise ArchiveError(
                "header_too_large", f"more than {MAX_TAR_HEADER_CHAIN} tar extended headers in a row"
            )
        tarfile._extended_depth = depth + 1
        try:
            return super()._proc_member(tarfile)
        finally:
            tarfile._extended_depth = depth

    def _proc_pax(self, tarfile):
        stream = tarfile.fileobj
        buf = stream.read(self._block(self.size))
        longest = max((len(m) for m in _DIGITS.findall(buf)), default=0)
        if longest > MAX_PAX_DIGITS or b"GNU.sparse" in buf:
            why = f"a run of {longest} digits" if longest > MAX_PAX_DIGITS else "a GNU sparse map"
            raise ArchiveError("header_too_large", f"a tar pax header with {why}")
        tarfile.fileobj = _Replay(buf, stream)
        try:
            return super()._proc_pax(tarfile)
        finally:
            tarfile.fileobj = stream


class _Replay:
    """A stream that gives back bytes already read from it before reading on."""

    def __init__(self, head: bytes, stream) -> None:
        self.head = head
        self.stream = stream

    def read(self, n: int) -> bytes:
        if self.head:
            data, self.head = self.head[:n], self.head[n:]
            return data if len(data) == n else data + self.stream.read(n - len(data))
        return self.stream.read(n)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


@dataclass(frozen=True)
class Member:
    """One entry of a repository. ``read`` is valid only while the iterator is on this member."""

    path: str  # from the repository root, "/"-separated; "" when unsafe (absolute, "..")
    raw_name: str  # as stored in the archive
    kind: str  # "file", "link" (symbolic or hard), "special" (device, fifo, ...)
    size: int
    read: Callable[[], bytes]

    def _replace_read(self, budget: _Budget) -> Member:
        """The member with its bytes spent from ``budget`` as they are read."""

        def read() -> bytes:
            data = self.read()
            budget.spend(len(data))
            return data

        return Member(self.path, self.raw_name, self.kind, self.size, read)


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
    WARC/ARC head, gzip-wrapped or not), ``"gzip"`` (another gzip stream) or ``""`` (also for what is
    not a regular file when opened: a FIFO is never waited on)."""
    try:
        with open_regular(path) as f:
            head = f.read(64 << 10)
            if head.startswith(b"BZh"):  # bzip2 gives nothing before its first whole block (<= 900 kB)
                head += f.read(1 << 20)
    except (OSError, InputRefused):
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


def iter_members(
    path: Path, kind: str, strip_top: bool = True, limits: ArchiveLimits | None = None
) -> Iterator[Member]:
    """Every file entry of the repository at ``path`` (``kind``: "tar", "zip" or "dir"), folders left
    out, in the archive's own order (a directory: sorted walk), within ``limits``. Raises ArchiveError.

    A tar is read in one streaming pass whose top folder is proposed by its first entry; in the rare
    tar where a later entry lies elsewhere, :class:`NoCommonRoot` is raised and the caller reads it
    again with ``strip_top=False``."""
    limits = limits or ArchiveLimits()
    if kind == "dir":
        budget = _Budget(limits, None)
        members = _dir_members(path)
    elif kind == "zip":
        budget = _Budget(limits, _stored_size(path))
        members = _zip_members(path, limits.max_members)
    elif kind == "tar":
        budget = _Budget(limits, _stored_size(path))
        members = _tar_pass(path, None if strip_top else "", budget)
    else:
        raise ArchiveError("malformed_archive", f"not a tar or zip archive ({_describe_head(path)})")
    if kind == "tar":  # the stream spends its bytes, every entry (folders too) its count
        yield from members
        return
    for m in members:
        budget.member()
        yield m._replace_read(budget)


def _stored_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


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


def _tar_pass(path: Path, root: str | None, budget: _Budget) -> Iterator[Member]:
    stream = _CountedStream(_open_stream(path), budget)
    try:
        try:
            tar = tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedTarInfo)
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
            del tar.members[:]  # a streamed tar's entries are not looked up again: held one at a time
            budget.member()
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


def _zip_members(path: Path, max_members: int) -> Iterator[Member]:
    _check_central_directory(path, max_members)
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, struct.error) as e:
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
                except _ZIP_READ_ERRORS as e:
                    reason = "truncated_archive" if isinstance(e, EOFError) else "malformed_archive"
                    raise ArchiveError(reason, f"{info.filename}: {type(e).__name__}: {e}") from None

            yield Member(_under(name, root) if name else "", info.filename, kind, info.file_size, read)


#: what reading a zip member raises on damaged bytes (LZMA and bzip2 members included)
_ZIP_READ_ERRORS = (
    zipfile.BadZipFile,
    OSError,
    EOFError,
    zlib.error,
    lzma.LZMAError,
    RuntimeError,
    ValueError,
    NotImplementedError,
    struct.error,
)


def _check_central_directory(path: Path, max_members: int) -> None:
    """Refuse a zip whose central directory (which zipfile reads whole, a record per entry) is over
    :data:`MAX_CENTRAL_DIRECTORY` or holds more than ``max_members`` entries, before zipfile reads it."""
    try:
        with open(path, "rb") as fp:
            end = zipfile._EndRecData(fp)
            if not end:
                return  # not a zip zipfile can read: it says why
            size = end[zipfile._ECD_SIZE]
            if size > MAX_CENTRAL_DIRECTORY:
                raise ArchiveError(
                    "header_too_large", f"a {size}-byte zip central directory > {MAX_CENTRAL_DIRECTORY}"
                )
            start = end[zipfile._ECD_LOCATION] - size  # where zipfile looks (data may precede the zip)
            if end[zipfile._ECD_SIGNATURE] == zipfile.stringEndArchive64:
                start -= zipfile.sizeEndCentDir64 + zipfile.sizeEndCentDir64Locator
            if start < 0:
                return
            fp.seek(start)
            entries = _count_entries(fp.read(size), max_members)
    except (OSError, struct.error, ValueError):
        return  # zipfile says what is wrong with it
    if entries > max_members:
        raise ArchiveError("too_many_members", f"more than max_archive_members {max_members} zip entries")


def _count_entries(cd: bytes, limit: int) -> int:
    """Central-directory records in ``cd`` as zipfile walks them, up to ``limit`` + 1."""
    n = pos = 0
    while pos + 46 <= len(cd) and cd[pos : pos + 4] == b"PK\x01\x02" and n <= limit:
        name, extra, comment = struct.unpack_from("<HHH", cd, pos + 28)
        pos += 46 + name + extra + comment
        n += 1
    return n


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
            if e.is_symlink():  # a target that is not UTF-8 is hashed as its bytes
                h.update(
                    b"L"
                    + p.encode("utf-8", "surrogateescape")
                    + b"\0"
                    + os.fsencode(os.readlink(e.path))
                    + b"\0"
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
