"""Host opt-out lists: every entry a hostname, and a list file read only from an allowed root.

Why: a selection's hosts are recorded in the version's manifest (its id covers them), so whatever a
list holds is published with the version. Unchecked, ``exclude_hosts_file = "/etc/passwd"`` copied that
file into the manifest, and the ``build_version`` DAG lets whoever triggers a run write the selection. So
an entry is a hostname or an IP address (it is matched as the URL's host or a parent domain of it;
``*.`` is refused, a host covers its subdomains already), a bad one is an error naming where it is,
and a file must lie, symlinks resolved, under the selection's own directory or a root named in
``CORPUS_HOSTS_ROOTS`` (the deployment's ``hosts_roots`` for DAG runs). docs/versions.md ("Opt-out lists").
"""

from __future__ import annotations

import ipaddress
import os
import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from corpus.model.errors import UserError
from corpus.text.inputs import InputRefused, open_regular

#: the environment variable naming the directories (``os.pathsep``-separated, absolute) an opt-out list
#: file may lie under, besides the selection file's own directory
ROOTS_ENV = "CORPUS_HOSTS_ROOTS"
#: an ASCII label: letters, digits, hyphens inside (``_`` too: crawled hosts have it), at most 63
ASCII_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
MAX_HOST_LENGTH = 253


def _unicode_label_ok(label: str) -> bool:
    """A label with non-ASCII letters: letters, marks and digits (and ``-``/``_`` inside) that IDNA
    encodes to a valid ASCII label (what the URL's host would be in punycode)."""
    if any(not (c.isascii() or unicodedata.category(c)[0] in "LMN") for c in label):
        return False
    if any(c.isascii() and not re.fullmatch(r"[a-z0-9_-]", c) for c in label):
        return False
    try:
        encoded = label.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    return bool(ASCII_LABEL.fullmatch(encoded)) and not label.startswith("-") and not label.endswith("-")


def normalize_host(entry: str) -> str | None:
    """The entry as it is matched (stripped, lower-cased, without a final dot; what the code always
    did, so a valid list keeps its version id), or None when it is neither a hostname nor an IP address."""
    host = entry.strip().lower().rstrip(".")
    try:
        if "%" not in host:  # an IPv6 scope (``fe80::1%eth0``) may be any text
            ipaddress.ip_address(host)
            return host
    except ValueError:
        pass
    if not host or len(host) > MAX_HOST_LENGTH:
        return None
    for label in host.split("."):
        if not (ASCII_LABEL.fullmatch(label) if label.isascii() else _unicode_label_ok(label)):
            return None
    return host


def _why(entry: str) -> str:
    text = entry.strip()
    shown = repr(text if len(text) <= 80 else text[:80] + "…")
    if text.startswith("*."):
        return f"{shown} is not a hostname (a host covers its subdomains: leave out the '*.')"
    return f"{shown} is not a hostname"


def check_hosts(where: str, entries: Iterable[str]) -> tuple[str, ...]:
    """Inline ``exclude_hosts``, normalized; an empty entry is skipped, a bad one refused by its index."""
    return _hosts((entry, f"selection {where}: exclude_hosts[{i}]") for i, entry in enumerate(entries))


def _hosts(entries: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """Each (entry, where it stands) normalized; a blank one skipped, a bad one refused naming where."""
    out = []
    for entry, where in entries:
        if not entry.strip():
            continue
        host = normalize_host(entry)
        if host is None:
            raise UserError(f"{where}: {_why(entry)}")
        out.append(host)
    return tuple(out)


def allowed_roots(base_dir: Path | None, env: dict[str, str] | None = None) -> list[Path]:
    """Where a list file may lie: the selection file's directory (none for an inline selection), then
    each absolute directory in ``CORPUS_HOSTS_ROOTS``; all with symlinks resolved."""
    named = (os.environ if env is None else env).get(ROOTS_ENV, "")
    roots = [base_dir] if base_dir is not None else []
    roots += [Path(r) for r in named.split(os.pathsep) if r and os.path.isabs(r)]
    return [r.resolve() for r in roots]


def hosts_file_path(
    where: str, value: object, base_dir: Path | None, key: str = "exclude_hosts_file"
) -> Path:
    """The list file (or robots.txt snapshot: ``key``) a selection names: relative to the selection
    file; an inline selection has no directory, so its file is absolute."""
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"selection {where}: {key} must be a path")
    path = Path(value)
    if not path.is_absolute():
        if base_dir is None:
            raise UserError(f"selection {where}: {key} {value!r} must be absolute in an inline selection")
        path = base_dir / path
    return path


def checked_list_file(path: Path, roots: list[Path], key: str) -> BinaryIO:
    """``path`` opened for reading: refused (one line naming ``key``) unless it resolves to a regular
    file under one of ``roots`` (an opt-out list, a robots.txt snapshot's file, a blocklist)."""
    try:
        real = path.resolve()  # not strict: a missing file outside the roots is refused as outside
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise UserError(f"{key} {path}: {getattr(e, 'strerror', None) or e}") from None
    if not any(real.is_relative_to(root) for root in roots):
        allowed = ", ".join(map(str, roots)) or "none"
        raise UserError(
            f"{key} {path}: outside the allowed roots ({allowed}): put the list beside "
            f"the selection file or under a directory named in {ROOTS_ENV}"
        )
    try:
        return open_regular(real, follow=False)  # no link at the last step (it was resolved), no FIFO wait
    except InputRefused:
        raise UserError(f"{key} {path}: not a regular file") from None
    except OSError as e:
        raise UserError(f"{key} {path}: {e.strerror or e}") from None


def read_hosts_file(path: Path, roots: list[Path]) -> tuple[str, ...]:
    """An opt-out list: one host a line; blank lines and ``#`` comments are ignored. Refused (one line)
    unless it resolves to a regular file under one of ``roots``, or when a line is not a hostname."""
    with checked_list_file(path, roots, "exclude_hosts_file") as f:
        try:
            data = f.read()
        except OSError as e:
            raise UserError(f"exclude_hosts_file {path}: {e.strerror or e}") from None
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise UserError(f"exclude_hosts_file {path}: not UTF-8 (byte {e.start})") from None
    return _hosts(
        (line.split("#", 1)[0], f"exclude_hosts_file {path} line {n}") for n, line in enumerate(lines, 1)
    )
