"""Which source and tier an input file belongs to: declared in the config, with sensible defaults.

A build config declares sources as ``[[ingest.sources]]`` tables (``match``, ``name``, ``tier``,
``license``, ``date``, ``kind``, ``url``); the first matching table wins. The data may also declare
itself where it lies, in a :data:`DECLARATION_FILE` (``[[sources]]`` tables), searched from the input's
directory up to its input root and never above it (:mod:`corpus.text.inputs`); the build config's
tables come first: the operator's word wins over the data's. A glob sees the path relative to the input
root (or to the declaration) or the name, never how the root was spelled. Undeclared: WARC/ARC is
``web``, a repository archive ``code``, a JSONL or text file ``<file stem>`` in the tier ``[ingest]
undeclared_files`` names (or refused): trust is declared, never inferred from a file format. See
docs/ingest-and-filters.md ("Inputs, sources and tiers").
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corpus.code.archive import ARCHIVE_SUFFIXES, sniff
from corpus.model.errors import UserError
from corpus.model.tiers import check_tier
from corpus.text.inputs import InputPath, Listing, display_name, list_roots

WARC_SUFFIXES = (".warc", ".warc.gz", ".arc", ".arc.gz")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
TEXT_SUFFIXES = (".txt", ".txt.gz")
PARQUET_SUFFIXES = (".parquet",)
#: what ``[ingest] undeclared_files`` may say of a JSONL or text file no source table matches
UNDECLARED_CHOICES = ("web", "curated", "refuse")
#: the file of ``[[sources]]`` tables by which a directory of data declares its own files
DECLARATION_FILE = "corpus-sources.toml"
#: what a source table's ``kind`` may say: read by format (``auto``), as a code repository, or as a
#: Hugging Face dataset saved to disk (``Dataset.save_to_disk``: a directory of Arrow files)
SOURCE_KINDS = ("auto", "repository", "hf_dataset")
REPOSITORY = "repository"
HF_DATASET = "hf_dataset"
#: the record fields a source's ``fields`` table may map, each to a key path of the input's records
MAPPED_FIELDS = ("text", "url", "id", "date", "license", "source")
#: a glob's leading ``*/`` (or ``**/``, ``./``): any directories, none included
_ANY_DIRS = re.compile(r"^(?:\*+/|\./)+")


class DeclarationError(UserError, ValueError):
    """A :data:`DECLARATION_FILE` that cannot be read as ``[[sources]]`` tables; the message names it."""


@dataclass(frozen=True)
class SourceSpec:
    name: str
    tier: str
    license: str = ""
    date: str = ""
    kind: str = "auto"
    url: str = ""  # repositories: the URL of their documents; "{name}" is the repository's name
    #: (field, key path) pairs: where a record keeps each of :data:`MAPPED_FIELDS` (``metadata.url``: the
    #: key ``url`` of the object under ``metadata``); a field not mapped is read under its own name
    fields: tuple[tuple[str, str], ...] = ()


def input_format(path: Path) -> str:
    """ "warc", "jsonl", "text", "parquet" or "repository" by file name; "" when the name says nothing
    we read."""
    name = path.name.lower()
    for fmt, suffixes in (
        ("warc", WARC_SUFFIXES),
        ("jsonl", JSONL_SUFFIXES),
        ("text", TEXT_SUFFIXES),
        ("parquet", PARQUET_SUFFIXES),
        (REPOSITORY, ARCHIVE_SUFFIXES),
    ):
        if name.endswith(suffixes):
            return fmt
    return ""


def resolve_format(path: Path, declared: list[tuple[str, SourceSpec]], root: Path | None = None) -> str:
    """How an input is read: a declared repository (file or directory) is one; a WARC, JSONL or text
    name wins (a ``.warc.gz`` stays a WARC); else the bytes decide (a tar -- plain or gzip/bzip2/xz --
    or a zip is a repository, a WARC/ARC head a WARC, as is another gzip stream unless its name says
    repository archive); else a repository archive's name (a file too damaged to sniff, to be
    quarantined). "" when nothing says. ``root``: the input root it was found under (None: named)."""
    spec = declared_source(path, declared, root)
    if spec is not None and spec.kind in (REPOSITORY, HF_DATASET):
        return spec.kind
    if path.is_dir():
        return ""
    by_name = input_format(path)
    if by_name in ("warc", "jsonl", "text", "parquet"):
        return by_name
    sniffed = sniff(path)
    if sniffed in ("tar", "zip"):
        return REPOSITORY
    if sniffed == "warc" or (sniffed == "gzip" and by_name != REPOSITORY):
        return "warc"
    return by_name


def parse_source_tables(tables: list[dict[str, Any]]) -> list[tuple[str, SourceSpec]]:
    """Validate ``[[ingest.sources]]`` tables into (glob, spec) pairs; raises ValueError naming the problem."""
    out = []
    for i, t in enumerate(tables):
        unknown = sorted(set(t) - {"match", "name", "tier", "license", "date", "kind", "url", "fields"})
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
            fields=_field_map(t.get("fields", {}), f"ingest.sources[{i}]"),
        )
        if spec.kind not in SOURCE_KINDS:
            raise ValueError(f"ingest.sources[{i}]: kind must be one of {', '.join(SOURCE_KINDS)}")
        out.append((str(t["match"]), spec))
    return out


def _field_map(table: Any, where: str) -> tuple[tuple[str, str], ...]:
    """A ``fields`` table (``{url = "metadata.url", date = "created"}``) as sorted (field, path) pairs."""
    if not isinstance(table, dict):
        raise ValueError(f'{where}: fields must be a table of field = "key.path"')
    unknown = sorted(set(table) - set(MAPPED_FIELDS))
    if unknown:
        raise ValueError(f"{where}: fields: unknown {', '.join(unknown)} (known: {', '.join(MAPPED_FIELDS)})")
    for field, path in table.items():
        if not isinstance(path, str) or not path or any(not part for part in path.split(".")):
            raise ValueError(f'{where}: fields.{field} must be a key path like "metadata.url"')
    return tuple(sorted((str(f), str(p)) for f, p in table.items()))


def glob_matches(path: str, pattern: str) -> bool:
    """Whether a relative POSIX path (or a bare name) matches a source glob: ``fnmatch``, whose ``*``
    crosses ``/``, and a leading ``*/`` also matches no directory at all, so ``*/x.jsonl`` takes ``x.jsonl``
    at the input root as it takes ``a/x.jsonl`` (a trailing ``/`` is ignored)."""
    pattern = pattern.rstrip("/")
    return fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path, _ANY_DIRS.sub("", pattern))


def _matching(rel: str, name: str, declared: list[tuple[str, SourceSpec]]) -> SourceSpec | None:
    for pattern, spec in declared:
        if glob_matches(rel, pattern) or glob_matches(name, pattern):
            return spec
    return None


@functools.lru_cache(maxsize=256)
def read_declaration(path: Path) -> list[tuple[str, SourceSpec]]:
    """The ``[[sources]]`` tables of a :data:`DECLARATION_FILE`; a :class:`DeclarationError` (one line)
    names the file and the problem."""
    shown = display_name(str(path))
    try:
        tables = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise DeclarationError(f"{shown}: not a readable TOML file ({_one_line(e)})") from e
    unknown = sorted(set(tables) - {"sources"})
    if unknown or not isinstance(tables.get("sources", []), list):
        found = ", ".join(unknown) or "sources"
        raise DeclarationError(f"{shown}: holds [[sources]] tables only (found {found})")
    try:
        return parse_source_tables(tables.get("sources", []))
    except (ValueError, TypeError) as e:
        raise DeclarationError(f"{shown}: {_one_line(e)}") from e


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def declaration_dirs(path: Path, root: Path | None = None) -> list[Path]:
    """Where the declarations of an input are looked for, nearest first: its directory and each one
    above it up to its input ``root``, never above the root; named directly (``root`` None or the path),
    a file's own directory, and none for a directory (its own declaration speaks for what is in it)."""
    if root is None or path == root:
        return [] if path.is_dir() else [path.parent]
    return [root / d for d in path.relative_to(root).parents]


def nearest_declaration(path: Path, root: Path | None = None) -> Path | None:
    """The first :data:`DECLARATION_FILE` of :func:`declaration_dirs` that is a regular file (a link
    in that name is not followed)."""
    for d in declaration_dirs(path, root):
        candidate = d / DECLARATION_FILE
        try:
            if stat.S_ISREG(os.lstat(candidate).st_mode):
                return candidate
        except OSError:
            continue
    return None


def declared_source(
    path: Path, declared: list[tuple[str, SourceSpec]], root: Path | None = None
) -> SourceSpec | None:
    """The first build-config table whose glob matches the path relative to its input ``root`` (the
    name when named directly) or the file name, else the first table of the nearest
    :data:`DECLARATION_FILE` whose glob matches the path relative to it or the file name; None if none
    does. However the root was spelled, the answer is the same."""
    where = InputPath(path, path if root is None else root)
    spec = _matching(where.rel, path.name, declared)
    if spec is not None:
        return spec
    declaration = nearest_declaration(path, root)
    if declaration is None:
        return None
    relative = path.relative_to(declaration.parent).as_posix()
    return _matching(relative, path.name, read_declaration(declaration))


def source_for(
    path: Path,
    declared: list[tuple[str, SourceSpec]],
    fmt: str,
    undeclared_tier: str = "web",
    root: Path | None = None,
) -> SourceSpec:
    """The declared source, else the default: ``web`` for a WARC/ARC file, ``code`` (tier ``code``) for
    a repository, and for a JSONL, text or Parquet file the source named by ``undeclared_tier`` (``web``
    or ``curated``): a file name is not a source, so undeclared files of one tier are one source
    (``[ingest] undeclared_files = "refuse"`` refuses them earlier)."""
    spec = declared_source(path, declared, root)
    if spec is not None:
        return spec
    if fmt == "warc":
        return SourceSpec(name="web", tier="web")
    if fmt == REPOSITORY:
        return SourceSpec(name="code", tier="code")
    return SourceSpec(name=undeclared_tier, tier=undeclared_tier)


def expand_inputs(paths: list[Path], declared: list[tuple[str, SourceSpec]] | None = None) -> Listing:
    """The inputs under the input roots ``paths`` (:func:`corpus.text.inputs.list_roots`): files named
    directly, a directory declared as a repository as itself, and under any other root every regular
    file whose name is a readable format (repository archives included) and every subdirectory declared
    as a repository or a Hugging Face dataset (read whole, not searched further); links and special files skipped, counted."""
    declared = declared or []

    def is_repo_dir(ip: InputPath) -> bool:
        spec = declared_source(ip.path, declared, ip.root)
        return spec is not None and spec.kind in (REPOSITORY, HF_DATASET)

    return list_roots(paths, is_repo_dir, lambda ip: bool(input_format(ip.path)))
