"""Which source and tier an input file belongs to: declared in the config, with sensible defaults.

A build config may declare sources as a list of tables::

    [[ingest.sources]]
    match = "*/perl-doc.jsonl.gz"   # fnmatch glob against the input path (or its file name)
    name = "perl-doc"               # the document's ``source``
    tier = "curated"                # one of corpus.tiers.TIERS
    license = "Artistic-1.0-Perl OR GPL-1.0-or-later"   # license hint when a record has none
    date = "2026-01-15"             # release date of a curated source (records may carry their own)

The first matching table wins. Without one, a WARC/ARC file is source ``web`` in tier ``web``, and a
JSONL or text file is source ``<file stem>`` in the tier ``[ingest] undeclared_files`` names
(``curated`` by default, as the bundled sample's builds rely on; ``web``), or refused (``refuse``).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corpus.tiers import check_tier

WARC_SUFFIXES = (".warc", ".warc.gz", ".arc", ".arc.gz")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
TEXT_SUFFIXES = (".txt", ".txt.gz")
#: what ``[ingest] undeclared_files`` may say of a JSONL or text file no source table matches
UNDECLARED_CHOICES = ("curated", "web", "refuse")


@dataclass(frozen=True)
class SourceSpec:
    name: str
    tier: str
    license: str = ""
    date: str = ""


def input_format(path: Path) -> str:
    """ "warc", "jsonl" or "text" by file name; "" when the name says nothing we read."""
    name = path.name.lower()
    for fmt, suffixes in (("warc", WARC_SUFFIXES), ("jsonl", JSONL_SUFFIXES), ("text", TEXT_SUFFIXES)):
        if name.endswith(suffixes):
            return fmt
    return ""


def file_stem(path: Path) -> str:
    name = path.name
    for suffix in sorted(WARC_SUFFIXES + JSONL_SUFFIXES + TEXT_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def parse_source_tables(tables: list[dict[str, Any]]) -> list[tuple[str, SourceSpec]]:
    """Validate ``[[ingest.sources]]`` tables into (glob, spec) pairs; raises ValueError naming the problem."""
    out = []
    for i, t in enumerate(tables):
        unknown = sorted(set(t) - {"match", "name", "tier", "license", "date"})
        if unknown:
            raise ValueError(f"ingest.sources[{i}]: unknown keys {', '.join(unknown)}")
        if not t.get("match") or not t.get("name"):
            raise ValueError(f"ingest.sources[{i}]: needs 'match' (a glob) and 'name'")
        spec = SourceSpec(
            name=str(t["name"]),
            tier=check_tier(str(t.get("tier", "web"))),
            license=str(t.get("license", "")),
            date=str(t.get("date", "")),
        )
        out.append((str(t["match"]), spec))
    return out


def declared_source(path: Path, declared: list[tuple[str, SourceSpec]]) -> SourceSpec | None:
    """The first declared source whose glob matches the path or the file name, None if none does."""
    for pattern, spec in declared:
        if fnmatch.fnmatch(str(path), pattern) or fnmatch.fnmatch(path.name, pattern):
            return spec
    return None


def source_for(
    path: Path, declared: list[tuple[str, SourceSpec]], fmt: str, undeclared_tier: str = "curated"
) -> SourceSpec:
    """The declared source, else the default: ``web`` for a WARC/ARC file, ``<file stem>`` in
    ``undeclared_tier`` for a JSONL or text file (``[ingest] undeclared_files = "refuse"`` refuses
    those earlier)."""
    spec = declared_source(path, declared)
    if spec is not None:
        return spec
    if fmt == "warc":
        return SourceSpec(name="web", tier="web")
    return SourceSpec(name=file_stem(path), tier=undeclared_tier)


def expand_inputs(paths: list[Path]) -> list[Path]:
    """Files named directly, plus every readable-format file under a named directory (sorted)."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files.extend(sorted(q for q in p.rglob("*") if q.is_file() and input_format(q)))
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"input not found: {p}")
    return sorted(set(files))
