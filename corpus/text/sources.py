"""Which source and tier an input file belongs to: declared in the config, with sensible defaults.

A build config declares sources as ``[[ingest.sources]]`` tables (``match``, ``name``, ``tier``,
``license``, ``date``, ``kind``, ``url``); the first matching table wins. The data may also declare
itself where it lies, in a :data:`DECLARATION_FILE` (``[[sources]]`` tables, globs relative to its
directory; the nearest one above an input is read); the build config's tables come first: the
operator's word wins over the data's. Undeclared: WARC/ARC is ``web``, a repository archive ``code``,
a JSONL or text file ``<file stem>`` in the tier ``[ingest] undeclared_files`` names (or refused):
trust is declared, never inferred from a file format. See docs/ingest-and-filters.md ("Inputs, sources
and tiers").
"""

from __future__ import annotations

import fnmatch
import functools
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corpus.code.archive import ARCHIVE_SUFFIXES, archive_stem, sniff
from corpus.model.tiers import check_tier

WARC_SUFFIXES = (".warc", ".warc.gz", ".arc", ".arc.gz")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
TEXT_SUFFIXES = (".txt", ".txt.gz")
#: what ``[ingest] undeclared_files`` may say of a JSONL or text file no source table matches
UNDECLARED_CHOICES = ("web", "curated", "refuse")
#: the file of ``[[sources]]`` tables by which a directory of data declares its own files
DECLARATION_FILE = "corpus-sources.toml"
#: what a source table's ``kind`` may say: read by format (``auto``), or as a code repository
SOURCE_KINDS = ("auto", "repository")
REPOSITORY = "repository"


@dataclass(frozen=True)
class SourceSpec:
    name: str
    tier: str
    license: str = ""
    date: str = ""
    kind: str = "auto"
    url: str = ""  # repositories: the URL of their documents; "{name}" is the repository's name


def input_format(path: Path) -> str:
    """ "warc", "jsonl", "text" or "repository" by file name; "" when the name says nothing we read."""
    name = path.name.lower()
    for fmt, suffixes in (
        ("warc", WARC_SUFFIXES),
        ("jsonl", JSONL_SUFFIXES),
        ("text", TEXT_SUFFIXES),
        (REPOSITORY, ARCHIVE_SUFFIXES),
    ):
        if name.endswith(suffixes):
            return fmt
    return ""


def resolve_format(path: Path, declared: list[tuple[str, SourceSpec]]) -> str:
    """How an input is read: a declared repository (file or directory) is one; a WARC, JSONL or text
    name wins (a ``.warc.gz`` stays a WARC); else the bytes decide (a tar -- plain or gzip/bzip2/xz --
    or a zip is a repository, a WARC/ARC head a WARC, as is another gzip stream unless its name says
    repository archive); else a repository archive's name (a file too damaged to sniff, to be
    quarantined). "" when nothing says."""
    spec = declared_source(path, declared)
    if spec is not None and spec.kind == REPOSITORY:
        return REPOSITORY
    if path.is_dir():
        return ""
    by_name = input_format(path)
    if by_name in ("warc", "jsonl", "text"):
        return by_name
    sniffed = sniff(path)
    if sniffed in ("tar", "zip"):
        return REPOSITORY
    if sniffed == "warc" or (sniffed == "gzip" and by_name != REPOSITORY):
        return "warc"
    return by_name


def file_stem(path: Path) -> str:
    name = path.name
    if name.lower().endswith(ARCHIVE_SUFFIXES):
        return archive_stem(path)
    for suffix in sorted(WARC_SUFFIXES + JSONL_SUFFIXES + TEXT_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def parse_source_tables(tables: list[dict[str, Any]]) -> list[tuple[str, SourceSpec]]:
    """Validate ``[[ingest.sources]]`` tables into (glob, spec) pairs; raises ValueError naming the problem."""
    out = []
    for i, t in enumerate(tables):
        unknown = sorted(set(t) - {"match", "name", "tier", "license", "date", "kind", "url"})
        if unknown:
            raise ValueError(f"ingest.sources[{i}]: unknown keys {', '.join(unknown)}")
        if not t.get("match") or not t.get("name"):
            raise ValueError(f"ingest.sources[{i}]: needs 'match' (a glob) and 'name'")
        spec = SourceSpec(
            name=str(t["name"]),
            tier=check_tier(str(t.get("tier", "web"))),
            license=str(t.get("license", "")),
            date=str(t.get("date", "")),
            kind=str(t.get("kind", "auto")),
            url=str(t.get("url", "")),
        )
        if spec.kind not in SOURCE_KINDS:
            raise ValueError(f"ingest.sources[{i}]: kind must be one of {', '.join(SOURCE_KINDS)}")
        out.append((str(t["match"]), spec))
    return out


def _matching(whole: str, name: str, declared: list[tuple[str, SourceSpec]]) -> SourceSpec | None:
    for pattern, spec in declared:
        if fnmatch.fnmatch(whole, pattern.rstrip("/")) or fnmatch.fnmatch(name, pattern.rstrip("/")):
            return spec
    return None


@functools.lru_cache(maxsize=256)
def read_declaration(path: Path) -> list[tuple[str, SourceSpec]]:
    """The ``[[sources]]`` tables of a :data:`DECLARATION_FILE`; a ValueError names the file and problem."""
    try:
        tables = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{path}: not a readable TOML file ({e})") from e
    unknown = sorted(set(tables) - {"sources"})
    if unknown or not isinstance(tables.get("sources", []), list):
        raise ValueError(f"{path}: holds [[sources]] tables only (found {', '.join(unknown) or 'sources'})")
    try:
        return parse_source_tables(tables.get("sources", []))
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e


def nearest_declaration(path: Path) -> Path | None:
    """The :data:`DECLARATION_FILE` of the input's directory or of the nearest ancestor that has one."""
    for d in path.absolute().parents:
        candidate = d / DECLARATION_FILE
        if candidate.is_file():
            return candidate
    return None


def declared_source(path: Path, declared: list[tuple[str, SourceSpec]]) -> SourceSpec | None:
    """The first build-config table whose glob matches the path or the file name, else the first table
    of the nearest :data:`DECLARATION_FILE` whose glob matches the path relative to it or the file
    name; None if none does."""
    spec = _matching(str(path).rstrip("/"), path.name, declared)
    if spec is not None:
        return spec
    declaration = nearest_declaration(path)
    if declaration is None:
        return None
    relative = path.absolute().relative_to(declaration.parent).as_posix()
    return _matching(relative, path.name, read_declaration(declaration))


def source_for(
    path: Path, declared: list[tuple[str, SourceSpec]], fmt: str, undeclared_tier: str = "web"
) -> SourceSpec:
    """The declared source, else the default: ``web`` for a WARC/ARC file, ``code`` (tier ``code``) for
    a repository, ``<file stem>`` in ``undeclared_tier`` for a JSONL or text file
    (``[ingest] undeclared_files = "refuse"`` refuses those earlier)."""
    spec = declared_source(path, declared)
    if spec is not None:
        return spec
    if fmt == "warc":
        return SourceSpec(name="web", tier="web")
    if fmt == REPOSITORY:
        return SourceSpec(name="code", tier="code")
    return SourceSpec(name=file_stem(path), tier=undeclared_tier)


def expand_inputs(paths: list[Path], declared: list[tuple[str, SourceSpec]] | None = None) -> list[Path]:
    """Files named directly, a directory declared as a repository as itself, and under any other named
    directory every file whose name is a readable format (repository archives included) and every
    subdirectory declared as a repository (read whole, not searched further); sorted."""
    declared = declared or []

    def is_repo_dir(d: Path) -> bool:
        spec = declared_source(d, declared)
        return spec is not None and spec.kind == REPOSITORY

    files: list[Path] = []
    for p in paths:
        if p.is_dir() and is_repo_dir(p):
            files.append(p)
        elif p.is_dir():
            for root, dirs, names in os.walk(p):
                here = Path(root)
                dirs.sort()
                for d in list(dirs):
                    if is_repo_dir(here / d):
                        files.append(here / d)
                        dirs.remove(d)
                files.extend(here / n for n in names if (here / n).is_file() and input_format(here / n))
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"input not found: {p}")
    return sorted(set(files))
