"""Category blocklists (adult, malware, phishing, ...): lists of hosts and URLs an operator supplies,
which a selection excludes by category, matched at version time on the metadata's hosts and URLs.

Why at version time: a list changes weekly, and a document's host and URL are stored values (decide at
version time), so a list update is a version in seconds, not a rerun of annotate over the crawl. Why
resolved against the build: a category list holds millions of entries (UT1's adult list, what
datatrove's URL filter ships: 4.6 M domains) of which a build meets few; the files are streamed against
the build's own hosts, so memory is the build's distinct hosts, and the version records per category the
entries that matched (its id covers that answer, as for robots.txt opt-outs), never the whole list: no
line of a file that is not a host or URL of the build reaches a manifest. docs/versions.md ("Blocklists").
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import duckdb
import pyarrow as pa

from corpus.model.errors import UserError
from corpus.select.hosts import allowed_roots, checked_list_file, hosts_file_path

#: a category's name: a lower-case word (it names a column of the card and a key of the manifest)
CATEGORY = re.compile(r"[a-z][a-z0-9_]{0,39}")
#: the tables a connection holds while a selection with blocklists is judged: the build's hosts and URLs
#: that a category's entries cover (what the selection's SQL reads, :func:`excluded_sql`)
HOSTS_TABLE = "blocklisted_hosts"
URLS_TABLE = "blocklisted_urls"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Blocklist:
    """One category: the list files to read (a selection as written), or the entries of them that
    matched the build (``hosts``: each covers its subdomains; ``urls``: :func:`url_key`s) once resolved."""

    category: str
    files: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    #: where ``files`` may lie (:func:`corpus.select.hosts.allowed_roots` of the selection)
    roots: tuple[Path, ...] = field(default=(), compare=False)

    def canonical(self) -> dict[str, list[str]]:
        if self.files:
            raise ValueError(f"blocklist {self.category} is not resolved against a build yet")
        return {"hosts": sorted(set(self.hosts)), "urls": sorted(set(self.urls))}


def url_key(url: str) -> str | None:
    """What a URL entry and a document's URL are compared by: the host (lower-cased, no port, user or
    final dot) and the path without a final ``/``; scheme, query and fragment dropped. A list's URL
    entry may leave out the scheme (UT1's ``host/path``). None for a URL without a host."""
    try:
        parts = urlsplit(url if "://" in url else "http://" + url)
        host = (parts.hostname or "").rstrip(".")
    except ValueError:
        return None
    return host + parts.path.rstrip("/") if host else None


def parse_blocklists(
    where: str, table: Any, base_dir: Path | None, read_files: bool
) -> tuple[Blocklist, ...]:
    """``exclude_blocklists = { CATEGORY = ["FILE", ...] }``, each file relative to the selection file
    (absolute in an inline selection) and under an allowed root (checked now unless not ``read_files``);
    read only when the version is made (:func:`matched_entries`)."""
    roots = tuple(allowed_roots(base_dir))
    if not isinstance(table, dict):
        raise UserError(f"selection {where}: exclude_blocklists must be a table of category = [files]")
    out = []
    for category, files in sorted(table.items()):
        _check_category(where, "exclude_blocklists", category)
        if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
            raise UserError(f"selection {where}: exclude_blocklists.{category} must be a list of files")
        key = f"exclude_blocklists.{category}"
        paths = tuple(str(hosts_file_path(where, f, base_dir, key)) for f in files)
        if read_files:
            for path in paths:
                checked_list_file(Path(path), list(roots), key).close()
        out.append(Blocklist(category, paths, roots=roots))
    return tuple(out)


def recorded_blocklists(where: str, table: Any) -> tuple[Blocklist, ...]:
    """``blocklists``: a version's recorded answer (:meth:`Blocklist.canonical` by category), as data."""
    if not isinstance(table, dict):
        raise UserError(f"selection {where}: blocklists must be a table of category = {{hosts, urls}}")
    out = []
    for category, entry in sorted(table.items()):
        _check_category(where, "blocklists", category)
        if not isinstance(entry, dict) or set(entry) - {"hosts", "urls"}:
            raise UserError(
                f"selection {where}: blocklists.{category} must be {{ hosts = [...], urls = [...] }}"
            )
        lists = [entry.get(k, []) for k in ("hosts", "urls")]
        if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in lists):
            raise UserError(
                f"selection {where}: blocklists.{category} hosts and urls must be lists of strings"
            )
        out.append(Blocklist(category, (), tuple(lists[0]), tuple(lists[1])))
    return tuple(out)


def _check_category(where: str, key: str, category: Any) -> None:
    if not isinstance(category, str) or not CATEGORY.fullmatch(category):
        raise UserError(
            f"selection {where}: {key}: {category!r} is not a category name (a lower-case word, e.g. adult)"
        )


def _lines(path: str, roots: list[Path], digest: Any) -> Iterator[str]:
    """A list file's lines, stripped and lower-cased, comments and blank lines dropped, read in chunks
    (a list of millions of lines is never held), every byte fed to ``digest``."""
    with checked_list_file(Path(path), roots, "blocklist") as f:
        tail = b""
        while True:
            chunk = f.read(_CHUNK)
            digest.update(chunk)
            data = tail + chunk
            if not chunk:
                lines, tail = data.split(b"\n"), b""
            else:
                *lines, tail = data.split(b"\n")
            try:
                text = b"\n".join(lines).decode("utf-8")
            except UnicodeDecodeError:
                raise UserError(f"blocklist {path}: not UTF-8") from None
            for line in text.lower().split("\n"):
                line = line.split("#", 1)[0].strip()
                if line:
                    yield line
            if not chunk:
                return


@dataclass(frozen=True)
class FileFacts:
    """What was read of a list file (recorded in the version's ``run_info``, outside its id)."""

    category: str
    path: str
    sha256: str
    entries: int


def matched_entries(blocklist: Blocklist, hosts: set[str], urls_of: Any) -> tuple[Blocklist, list[FileFacts]]:
    """The entries of ``blocklist``'s files that match the build: a host entry that is one of
    ``hosts`` or a parent domain of one, a URL entry whose :func:`url_key` is a URL's of the build
    (``urls_of(hosts)``: the build's URLs on those hosts). Memory: the build's hosts and their parents."""
    suffixes = {h[i + 1 :] for h in hosts for i, c in enumerate(h) if c == "."} | hosts
    host_hits: set[str] = set()
    url_entries: set[str] = set()
    facts = []
    for path in blocklist.files:
        digest, n = hashlib.sha256(), 0
        for line in _lines(path, list(blocklist.roots), digest):
            n += 1
            if "/" in line:
                key = url_key(line)
                if key is not None and key.split("/", 1)[0] in hosts:
                    url_entries.add(key)
            elif line.rstrip(".") in suffixes:
                host_hits.add(line.rstrip("."))
        facts.append(FileFacts(blocklist.category, path, digest.hexdigest(), n))
    url_hits = {
        k
        for u in urls_of(sorted({k.split("/", 1)[0] for k in url_entries}))
        if (k := url_key(u)) in url_entries
    }
    return Blocklist(blocklist.category, (), tuple(sorted(host_hits)), tuple(sorted(url_hits))), facts


def union_blocklists(per_rank: list[list[Blocklist]]) -> list[Blocklist]:
    """Each category's matches on every rank as one (the same categories, in one order, on each)."""
    return [
        Blocklist(
            lists[0].category,
            (),
            tuple(sorted({h for b in lists for h in b.hosts})),
            tuple(sorted({u for b in lists for u in b.urls})),
        )
        for lists in zip(*per_rank, strict=True)
    ]


def covered_hosts(entries: Iterable[str], hosts: Iterable[str]) -> list[str]:
    """The ``hosts`` that one of ``entries`` names, itself or as a parent domain."""
    listed = set(entries)
    return sorted(
        h for h in hosts if h in listed or any(h[i + 1 :] in listed for i, c in enumerate(h) if c == ".")
    )


def build_hosts(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Every host of the table ``stored`` and of the exact copies' records (``copies``, where there is one)."""
    sql = "SELECT DISTINCT host FROM stored WHERE host IS NOT NULL"
    if _has_view(con, "copies"):
        sql += " UNION SELECT DISTINCT host FROM copies WHERE host IS NOT NULL"
    return {r[0] for r in con.execute(sql).fetchall()}


def build_urls(con: duckdb.DuckDBPyConnection, hosts: list[str]) -> list[str]:
    """The URLs of the documents (and exact copies) on ``hosts``."""
    if not hosts:
        return []
    sql = "SELECT DISTINCT url FROM stored WHERE host IN (SELECT unnest(?::VARCHAR[]))"
    params: list[Any] = [hosts]
    if _has_view(con, "copies"):
        sql += " UNION SELECT DISTINCT url FROM copies WHERE host IN (SELECT unnest(?::VARCHAR[]))"
        params.append(hosts)
    return [r[0] for r in con.execute(sql, params).fetchall() if r[0] is not None]


def _has_view(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute("SELECT 1 FROM duckdb_views() WHERE view_name = ?", [name]).fetchall())


def register(con: duckdb.DuckDBPyConnection, blocklists: tuple[Blocklist, ...]) -> None:
    """The tables :func:`excluded_sql` reads: the build's hosts and URLs each resolved category covers.
    A list still named by its files has no answer yet (:func:`corpus.version.query.resolve_blocklists`)."""
    unresolved = [b.category for b in blocklists if b.files]
    if unresolved:
        raise ValueError(f"blocklist {unresolved[0]} is not resolved against the build")
    hosts = build_hosts(con)
    host_rows = [(b.category, h) for b in blocklists for h in covered_hosts(b.hosts, hosts)]
    urls = {b.category: set(b.urls) for b in blocklists}
    on = sorted({k.split("/", 1)[0] for b in blocklists for k in b.urls})
    url_rows = [(c, u) for u in build_urls(con, on) for c in sorted(urls) if url_key(u) in urls[c]]
    for name, col, rows in ((HOSTS_TABLE, "host", host_rows), (URLS_TABLE, "url", url_rows)):
        table = pa.table(
            {
                "category": pa.array([r[0] for r in rows], pa.string()),
                col: pa.array([r[1] for r in rows], pa.string()),
            }
        )
        con.register(name, table)


def excluded_sql(alias: str) -> str:
    """Whether a row of ``alias`` (a document, ``""``, or an exact copy, ``"c."``) is on no list."""
    return (
        f"coalesce({alias}host, '') NOT IN (SELECT host FROM {HOSTS_TABLE}) "
        f"AND coalesce({alias}url, '') NOT IN (SELECT url FROM {URLS_TABLE})"
    )


def blocklisted_counts(con: duckdb.DuckDBPyConnection, blocklists: tuple[Blocklist, ...]) -> dict[str, int]:
    """Per category, the stored documents whose own host or URL it lists (registered first)."""
    counts = dict(
        con.execute(
            f'SELECT category, count(*) FROM (SELECT b.category, s.shard, s."index" FROM stored s '
            f'JOIN {HOSTS_TABLE} b USING (host) UNION SELECT b.category, s.shard, s."index" FROM stored s '
            f"JOIN {URLS_TABLE} b USING (url)) GROUP BY category"
        ).fetchall()
    )
    return {b.category: int(counts.get(b.category, 0)) for b in blocklists}
