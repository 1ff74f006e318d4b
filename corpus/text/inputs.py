"""The input roots and what lies under them, found without following a link or opening a FIFO.

Each path given to ``--input`` is an input root. Under a directory root only regular files and
directories are taken: a symbolic link (to a file or a directory: it could reach any file of the host),
a FIFO (opening one waits for a writer, for ever), a socket or a device is never opened, only counted
as skipped with its reason. Named directly, a link is the operator's word and is followed; a FIFO,
socket or device is refused in one line before anything is read. An input is known by its path
relative to its root, what globs see; a name that is not UTF-8 is kept as the OS gave it (surrogate
escapes) to open the file and recorded in its display form, ``\\xNN`` for each such byte.
docs/ingest-and-filters.md ("Inputs, sources and tiers").
"""

from __future__ import annotations

import os
import re
import stat
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from corpus.model.errors import UserError

#: why an entry under a directory root was not taken, counted by these names
SKIP_REASONS = ("symlink", "fifo", "socket", "device", "unreadable")
_SURROGATE = re.compile("[\ud800-\udfff]")
_WORDS = {
    "dir": "a directory",
    "fifo": "a FIFO",
    "socket": "a socket",
    "device": "a device",
    "symlink": "a symbolic link",
}


class InputRefused(UserError):
    """An input named directly that is no regular file or directory (a FIFO, socket or device)."""


def display_name(text: str) -> str:
    """``text`` as it may be written down: each byte of a name that was not UTF-8 (a surrogate escape,
    as ``os.fsdecode`` gives it) as ``\\xNN``; any other lone surrogate as ``\\uNNNN``. Valid text is
    itself."""

    def shown(m: re.Match[str]) -> str:
        code = ord(m.group())
        return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"

    return _SURROGATE.sub(shown, text)


def _kind(mode: int) -> str:
    """``"dir"``, ``"file"`` or the reason a node of this mode is skipped."""
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device"  # character or block device (or a node type this system does not name)


#: the buffer of an input opened for reading (:func:`open_regular`)
READ_BUFFER = 1 << 16


def open_regular(path: Path, follow: bool = True) -> BinaryIO:
    """``path`` opened for reading if it is a regular file when opened; else :class:`InputRefused`.
    Opened non-blocking, so a FIFO put in a file's place after it was listed is refused at once
    instead of waiting for a writer; ``follow=False`` refuses a link at the last step too (OSError)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind != "file":
            raise InputRefused(
                f"input {display_name(str(path))} is {_WORDS[kind]}, not a regular file: not read"
            )
        os.set_blocking(fd, True)
        # a buffer of a fixed size: none chosen by a terminal check and a second fstat (two system
        # calls an input at 10^5 inputs), nor by a parallel filesystem's multi-MiB block size
        return os.fdopen(fd, "rb", buffering=READ_BUFFER)
    except BaseException:
        os.close(fd)
        raise


@dataclass(frozen=True)
class InputPath:
    """A file or directory to read, with the input root it was found under (itself when named)."""

    path: Path
    root: Path

    @property
    def named(self) -> bool:
        return self.path == self.root

    @property
    def rel(self) -> str:
        """The path relative to its input root, POSIX, no ``./``; the name of an input named directly
        (however it was spelled: ``x``, ``./x`` and ``/abs/x`` are all ``x``)."""
        if self.named:
            return Path(os.path.abspath(self.path)).name
        return self.path.relative_to(self.root).as_posix()


@dataclass
class Listing:
    """What the input roots hold: the inputs taken, sorted, and what was skipped (reason -> count)."""

    inputs: list[InputPath]
    skipped: Counter = field(default_factory=Counter)


def list_roots(
    roots: Iterable[Path], whole_dir: Callable[[InputPath], bool], wanted: Callable[[InputPath], bool]
) -> Listing:
    """Every input under ``roots``: a root named directly (a directory ``whole_dir`` takes as one unit
    or else walked), a directory ``whole_dir`` takes (not searched further), a regular file ``wanted``
    takes. A file reached from two roots belongs to the nearer (the shorter relative path)."""
    taken: dict[str, InputPath] = {}
    skipped: Counter = Counter()

    def take(ip: InputPath) -> None:
        key = os.path.abspath(ip.path)
        old = taken.get(key)
        if old is None or len(Path(ip.rel).parts) < len(Path(old.rel).parts):
            taken[key] = ip

    for given in roots:
        root = Path(given)
        try:
            kind = _kind(os.stat(root).st_mode)  # a link named directly is followed
        except FileNotFoundError:
            raise FileNotFoundError(f"input not found: {display_name(str(root))}") from None
        if kind not in ("dir", "file"):
            raise InputRefused(
                f"input {display_name(str(root))} is {_WORDS[kind]}, not a regular file or directory: "
                "refused before reading anything"
            )
        named = InputPath(root, root)
        if kind == "file" or whole_dir(named):
            take(named)
        else:
            for ip in _walk(root, whole_dir, wanted, skipped):
                take(ip)
    return Listing(sorted(taken.values(), key=lambda ip: ip.path), skipped)


def _walk(
    root: Path, whole_dir: Callable[[InputPath], bool], wanted: Callable[[InputPath], bool], skipped: Counter
) -> Iterable[InputPath]:
    """The inputs under a directory root, links and special files counted in ``skipped``."""
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            skipped["unreadable"] += 1
            continue
        for e in entries:
            try:
                kind = _kind(e.stat(follow_symlinks=False).st_mode)
            except OSError:  # gone since it was listed
                kind = "unreadable"
            here = InputPath(d / e.name, root)
            if kind == "dir" and whole_dir(here):
                yield here
            elif kind == "dir":
                stack.append(here.path)
            elif kind == "file":
                if wanted(here):
                    yield here
            else:
                skipped[kind] += 1
