"""Line counts kept from build to build, so that a delta's line_dedup judges a line on the documents of
every build, as one full build of all their inputs would.

Inside a build that keeps indexes each lines part also writes every line key of its range with the
number of this build's documents that hold it (``line_counts/PART.keys``: sorted native uint64 keys,
``PART.counts``: uint32 counts, each with a sidecar). A build against a base adds, to each key's
count, the counts of every build before it (the base, the base's base, ...: the chain of
``dedup_index/base.json``) and judges the total against the limit of all their documents together.
The base's documents keep the texts their own build gave them (append-only). docs/incremental.md
"Line counts across builds".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus.formats.docshard import read_sidecar
from corpus.model.layout import base_chain, build_dir_of_stage, stage_dir
from corpus.model.manifest import read_stage_manifest
from runtime.global_phase import PartWriter

#: the artifact: per lines part, its keys and their counts in this build
LINE_COUNTS = "line_counts"
KEYS, COUNTS = ".keys", ".counts"


def part_of_keys(keys: np.ndarray, parts: int) -> np.ndarray:
    """The lines part of each key (native uint64): ``line_dedup.stage.key_part``, vectorized."""
    return (((keys >> np.uint64(32)) * np.uint64(parts)) >> np.uint64(32)).astype(np.int64)


class OwnCounts:
    """A part's own line counts, written through its writer (closed before its marker, removed if the
    part fails)."""

    def __init__(self, out_dir: Path, writer: PartWriter) -> None:
        d = Path(out_dir) / LINE_COUNTS
        self.keys = writer.open_records(d / f"{writer.name}{KEYS}")
        self.counts = writer.open_records(d / f"{writer.name}{COUNTS}")

    def add(self, keys: np.ndarray, counts: np.ndarray) -> None:
        self.keys.write_rows(np.asarray(keys, dtype="<u8"))
        self.counts.write_rows(np.minimum(counts, np.iinfo(np.uint32).max).astype("<u4"))


@dataclass(frozen=True)
class BuildCounts:
    """One earlier build's line counts: its parts' files (in part order) and its documents."""

    directory: Path
    parts: int
    docs: int
    digests: tuple[str, ...]  # of its files, as their sidecars say: what the phase key covers

    def counts(self, keys: np.ndarray) -> np.ndarray:
        """The count of each key (sorted native uint64) in this build; 0 for a key it never held."""
        out = np.zeros(len(keys), dtype=np.uint64)
        where = part_of_keys(keys, self.parts)
        for p in np.unique(where).tolist():
            at = np.flatnonzero(where == p)
            path = self.directory / f"l{p:05d}{KEYS}"
            if path.stat().st_size == 0:  # a part no line of that build fell in (nothing to map)
                continue
            held = np.memmap(path, dtype="<u8", mode="r")
            i = np.minimum(np.searchsorted(held, keys[at]), len(held) - 1)
            hit = held[i] == keys[at]
            counts = np.memmap(self.directory / f"l{p:05d}{COUNTS}", dtype="<u4", mode="r")
            out[at[hit]] = counts[i[hit]]
        return out


def base_counts(stage_directory: Path) -> tuple[list[BuildCounts], list[Path]]:
    """The line counts of the builds before the build of ``stage_directory``, nearest first, and the
    builds of the chain that kept none (built before line_dedup wrote them)."""
    found: list[BuildCounts] = []
    missing: list[Path] = []
    build = build_dir_of_stage(stage_directory)
    for base in base_chain(build) if build is not None else []:
        stage = stage_dir(base, "line_dedup")
        directory = stage / LINE_COUNTS
        keys = sorted(directory.glob(f"*{KEYS}")) if directory.is_dir() else []
        manifest = read_stage_manifest(stage)
        if not keys or manifest is None:
            missing.append(base)
            continue
        docs = int(manifest.extra["docs"])
        digests = tuple(read_sidecar(f)["sha256"] for k in keys for f in (k, k.with_suffix(COUNTS)))
        found.append(BuildCounts(directory, len(keys), docs, digests))
    return found, missing


def total_counts(bases: list[BuildCounts], keys: np.ndarray) -> np.ndarray:
    """Each key's count summed over ``bases``."""
    total = np.zeros(len(keys), dtype=np.uint64)
    for b in bases:
        total += b.counts(keys)
    return total
