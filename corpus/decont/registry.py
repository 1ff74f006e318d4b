"""The eval-set registry: a directory of benchmark files, one per benchmark, named by the file.

A benchmark file is JSONL (optionally gzip-compressed): one item per line with ``text`` (the item as
it would appear verbatim on a web page: question plus answer), optionally ``id`` and optionally ``doc``
(the original record: what :mod:`corpus.decont.content` builds the item's matched passages from, its
question, answer and choices without the benchmark's template). The registry's
digest covers every benchmark's name and file sha256, so a snapshot records exactly which eval sets
it was cleaned against. The files are read-only inputs; nothing here writes to them.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from corpus.decont.content import content_kind, item_passages
from corpus.model.digest import file_sha256, json_digest

SUFFIXES = (".jsonl", ".jsonl.gz")


class RegistryError(ValueError):
    """A benchmark file or the registry directory cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class EvalItem:
    benchmark: str
    item_id: str
    text: str
    #: what the item is matched by (content passages, then the verbatim text): see corpus.decont.content
    passages: tuple[str, ...] = ()

    @classmethod
    def of(cls, benchmark: str, item_id: str, text: str, doc: object = None) -> EvalItem:
        return cls(benchmark, item_id, text, item_passages(text, doc))


@dataclass(frozen=True)
class Benchmark:
    name: str
    path: Path
    sha256: str
    items: tuple[EvalItem, ...]
    content: str = "text"  # which content builder read the first record (corpus.decont.content)

    def describe(self) -> dict:
        return {
            "sha256": self.sha256,
            "items": len(self.items),
            "file": self.path.name,
            "content": self.content,
        }


def benchmark_name(path: Path) -> str:
    name = path.name
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    raise RegistryError(f"{path}: a benchmark file must end in {' or '.join(SUFFIXES)}")


def iter_benchmark(path: Path, name: str) -> Iterator[tuple[EvalItem, str | None]]:
    """Each item of a benchmark file in file order; the first with the content kind its record's ``doc``
    has (the benchmark's), the others with None. One line in memory at a time (a registry of 10^7 items
    is read this way by :mod:`corpus.decont.eval_table`)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    any_item = False
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise RegistryError(f"{path}:{lineno}: not valid JSON ({e})") from e
            if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
                raise RegistryError(f'{path}:{lineno}: an eval item needs a string field "text"')
            doc = rec.get("doc")
            item = EvalItem.of(name, str(rec.get("id", f"{name}-{lineno}")), rec["text"], doc)
            yield item, (None if any_item else content_kind(doc))
            any_item = True
    if not any_item:
        raise RegistryError(f"{path}: benchmark {name!r} has no items")


def load_benchmark(path: Path, name: str | None = None) -> Benchmark:
    path = Path(path)
    if not path.is_file():
        raise RegistryError(f"benchmark file not found: {path}")
    name = name or benchmark_name(path)
    pairs = list(iter_benchmark(path, name))
    items = tuple(item for item, _ in pairs)
    return Benchmark(name, path, file_sha256(path), items, pairs[0][1] or "text")


def registry_files(directory: str | Path) -> list[Path]:
    d = Path(directory)
    if not d.is_dir():
        raise RegistryError(f"eval registry directory not found: {d}")
    files = sorted(p for p in d.iterdir() if p.is_file() and p.name.endswith(SUFFIXES))
    if not files:
        raise RegistryError(f"eval registry {d} holds no benchmark files (*.jsonl, *.jsonl.gz)")
    return files


def check_unique_names(directory: str | Path, names: list[str]) -> None:
    if len(set(names)) != len(names):
        raise RegistryError(f"eval registry {directory}: two files give the same benchmark name")


def registry_digest(directory: str | Path) -> str:
    """The digest :attr:`EvalRegistry.digest` will have, from the files' bytes alone (no parsing)."""
    return json_digest([[benchmark_name(p), file_sha256(p)] for p in registry_files(directory)])


@dataclass(frozen=True)
class EvalRegistry:
    benchmarks: tuple[Benchmark, ...]  # sorted by name

    @classmethod
    def load(cls, directory: str | Path) -> EvalRegistry:
        benchmarks = [load_benchmark(p) for p in registry_files(directory)]
        check_unique_names(directory, [b.name for b in benchmarks])
        return cls(tuple(sorted(benchmarks, key=lambda b: b.name)))

    @property
    def digest(self) -> str:
        """``sha256:…`` over (name, file sha256) of every benchmark: what the snapshot was cleaned against."""
        return json_digest([[b.name, b.sha256] for b in self.benchmarks])

    def describe(self) -> dict:
        return {b.name: b.describe() for b in self.benchmarks}
