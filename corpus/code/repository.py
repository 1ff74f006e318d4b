"""A repository as documents: its files judged (:mod:`corpus.code.rules`), the kept ones concatenated
in a stated order with a header line before each, split at file boundaries under a token limit.

Order: depth first from the root; in each folder its README files, then its package manifests
(:data:`MANIFEST_NAMES`, :data:`MANIFEST_GLOBS`), then its other files, then its subfolders, each
group by name. Each file is the line ``<|file|> PATH`` (:data:`FILE_HEADER`) then its text, ending
with a newline. A document holds whole files while its estimated tokens stay within
``max_doc_tokens``; a file over the limit is a document of its own (files are never cut). The kept
texts wait in a spooled temporary file, so a large repository costs memory for its file list only.
See docs/code.md ("Documents").
"""

from __future__ import annotations

import fnmatch
import math
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from corpus.code.archive import ArchiveLimits, NoCommonRoot, display_name, is_utf8_name, iter_members
from corpus.code.language import language_of
from corpus.code.licence_detect import LicenceScanner, RepositoryLicence
from corpus.code.rules import Rule, judge

FILE_HEADER = "<|file|> "
MANIFEST_NAMES = frozenset(
    {
        "pyproject.toml",
        "setup.py",
        "setup.cfg",
        "requirements.txt",
        "pipfile",
        "environment.yml",
        "package.json",
        "cargo.toml",
        "go.mod",
        "pom.xml",
        "build.gradle",
        "build.gradle.kts",
        "settings.gradle",
        "settings.gradle.kts",
        "build.sbt",
        "gemfile",
        "composer.json",
        "cmakelists.txt",
        "makefile",
        "gnumakefile",
        "meson.build",
        "configure.ac",
        "configure.in",
        "makefile.am",
        "build",
        "build.bazel",
        "workspace",
        "module.bazel",
        "mix.exs",
        "rebar.config",
        "stack.yaml",
        "package.yaml",
        "cabal.project",
        "project.toml",
        "description",
        "pubspec.yaml",
        "package.swift",
        "project.clj",
        "deps.edn",
        "dune-project",
        "deno.json",
        "tsconfig.json",
    }
)
MANIFEST_GLOBS = (
    "*.gemspec",
    "*.cabal",
    "*.csproj",
    "*.fsproj",
    "*.vbproj",
    "*.nimble",
    "*.podspec",
    "*.opam",
)
_SPOOL_BYTES = 16 << 20


def file_rank(name: str) -> int:
    """0 for a README, 1 for a package manifest, 2 for any other file (of one folder)."""
    low = name.lower()
    if low == "readme" or low.startswith("readme."):
        return 0
    if low in MANIFEST_NAMES or any(fnmatch.fnmatchcase(low, g) for g in MANIFEST_GLOBS):
        return 1
    return 2


def order_key(path: str) -> tuple:
    """Sort key of a file path: folders' files (README, manifests, others) before their subfolders."""
    *dirs, name = path.split("/")
    return tuple((3, d) for d in dirs) + ((file_rank(name), name),)


@dataclass(frozen=True)
class KeptFile:
    path: str
    lang: str
    bytes: int  # UTF-8 bytes of its text
    offset: int  # in the spool
    length: int


class RejectedFile(NamedTuple):
    """A row of the ``rejected_files`` artifact: the file, why, and what its rule found (the verdict's
    ``detail``)."""

    path: str
    reason: str
    bytes: int
    detail: str


@dataclass(frozen=True)
class RepoDocument:
    text: str
    files: tuple[tuple[str, str, int], ...]  # (path, language, bytes) in document order
    part: int  # 1-based
    parts: int


@dataclass
class Repository:
    """What reading one repository gave: every file's fate, and the documents to make."""

    name: str
    rejected: list[RejectedFile] = field(default_factory=list)
    kept: list[KeptFile] = field(default_factory=list)
    plan: list[list[int]] = field(default_factory=list)  # indices into kept, per document
    spool: tempfile.SpooledTemporaryFile | None = None
    licence: RepositoryLicence | None = None  # what its own files say (corpus.code.licence_detect)

    @property
    def rejected_counts(self) -> Counter:
        return Counter(f.reason for f in self.rejected)

    def documents(self) -> Iterator[RepoDocument]:
        parts = len(self.plan)
        for k, indices in enumerate(self.plan, 1):
            chunks, files = [], []
            for i in indices:
                f = self.kept[i]
                self.spool.seek(f.offset)
                text = self.spool.read(f.length).decode("utf-8")
                chunks.append(f"{FILE_HEADER}{f.path}\n{text}" + ("" if text.endswith("\n") else "\n"))
                files.append((f.path, f.lang, f.bytes))
            yield RepoDocument("".join(chunks), tuple(files), k, parts)

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()
            self.spool = None

    def file_summary(self) -> dict:
        """Counts for the stage's ``rejected_files`` artifact and manifest."""
        by_reason: dict[str, dict[str, int]] = {}
        for f in self.rejected:
            r = by_reason.setdefault(f.reason, {"files": 0, "bytes": 0})
            r["files"] += 1
            r["bytes"] += f.bytes
        return {
            "kept": {"files": len(self.kept), "bytes": sum(f.bytes for f in self.kept)},
            "rejected": dict(sorted(by_reason.items())),
            "documents": len(self.plan),
        }


def _estimated_tokens(n_bytes: int, bytes_per_token: float) -> int:
    return math.ceil(n_bytes / bytes_per_token)


def plan_documents(kept: list[KeptFile], max_doc_tokens: int, bytes_per_token: float) -> list[list[int]]:
    """Greedy, in order: whole files while the estimate stays within the limit."""
    plan: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i, f in enumerate(kept):
        cost = _estimated_tokens(
            len(FILE_HEADER.encode()) + len(f.path.encode()) + 2 + f.bytes, bytes_per_token
        )
        if current and used + cost > max_doc_tokens:
            plan.append(current)
            current, used = [], 0
        current.append(i)
        used += cost
    if current:
        plan.append(current)
    return plan


def read_repository(
    path: Path,
    kind: str,
    name: str,
    rules: list[Rule],
    *,
    max_file_bytes: int,
    max_doc_tokens: int,
    bytes_per_token: float,
    limits: ArchiveLimits | None = None,
) -> Repository:
    """Read and judge every file of the repository at ``path`` (``kind``: "tar", "zip", "dir") and plan
    its documents. Raises :class:`corpus.code.archive.ArchiveError` for a damaged archive or one over
    ``limits``. A file whose name is not UTF-8 is rejected as ``non_utf8_name`` (shown escaped)."""
    sizes = (max_file_bytes, max_doc_tokens, bytes_per_token, limits or ArchiveLimits())
    try:
        return _read(path, kind, name, rules, *sizes, strip_top=True)
    except NoCommonRoot:
        return _read(path, kind, name, rules, *sizes, strip_top=False)


def _read(
    path: Path,
    kind: str,
    name: str,
    rules: list[Rule],
    max_file_bytes: int,
    max_doc_tokens: int,
    bytes_per_token: float,
    limits: ArchiveLimits,
    strip_top: bool,
) -> Repository:
    repo = Repository(name=name, spool=tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES))
    fates: list[RejectedFile | KeptFile] = []  # in archive order
    last: dict[str, int] = {}
    licences = LicenceScanner()
    try:
        for m in iter_members(path, kind, strip_top, limits):
            shown = display_name(m.path or m.raw_name)
            if not is_utf8_name(m.raw_name):
                fates.append(RejectedFile(shown, "non_utf8_name", m.size, ""))
                continue
            if not m.path:
                fates.append(RejectedFile(shown, "unsafe_path", m.size, ""))
                continue
            if m.kind != "file":
                fates.append(RejectedFile(shown, "link" if m.kind == "link" else "special_file", m.size, ""))
                continue
            read = _ReadOnce(m.read)
            verdict = judge(m.path, m.size, read, rules, max_file_bytes)
            licences.see(m.path, m.size, verdict.text, read, kept=not verdict.reason)
            if verdict.reason:
                fates.append(RejectedFile(m.path, verdict.reason, m.size, verdict.detail))
            else:
                data = verdict.text.encode("utf-8")
                offset = repo.spool.seek(0, 2)
                repo.spool.write(data)
                fates.append(
                    KeptFile(m.path, language_of(m.path, verdict.text), len(data), offset, len(data))
                )
            if m.path in last:  # a later entry of the same path replaces the earlier one, as on extraction
                earlier = fates[last[m.path]]
                fates[last[m.path]] = RejectedFile(earlier.path, "duplicate_path", earlier.bytes, "")
            last[m.path] = len(fates) - 1
    except BaseException:  # a damaged archive (ArchiveError), a second pass (NoCommonRoot), anything
        repo.close()
        raise
    repo.kept = sorted((f for f in fates if isinstance(f, KeptFile)), key=lambda f: order_key(f.path))
    repo.rejected = sorted(f for f in fates if isinstance(f, RejectedFile))
    repo.plan = plan_documents(repo.kept, max_doc_tokens, bytes_per_token)
    repo.licence = licences.result()
    return repo


class _ReadOnce:
    """A member's bytes, read at most once: the rules and the licence scanner may both want a file,
    and a streamed tar member cannot be read twice."""

    def __init__(self, read: Callable[[], bytes]) -> None:
        self._read = read
        self._data: bytes | None = None

    def __call__(self) -> bytes:
        if self._data is None:
            self._data = self._read()
        return self._data
