"""What a stage manifest is made of, read by the rank that owns each piece: a finished shard's counts
and outputs (:class:`ShardRecord`), and a share of the stage's artifact files. The ranks gather them to
rank 0, which writes the manifest without opening every shard's stats and sidecars itself (issue 37:
no rank opens O(input shards) files at a stage's end). docs/scale.md "Shape".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corpus.formats.docshard import SUFFIX, read_sidecar
from corpus.model import ShardRef
from corpus.model.digest import file_sha256
from corpus.model.layout import DOC_OUTPUT_KINDS, stats_path


@dataclass(frozen=True)
class ShardRecord:
    """What a finished shard contributes to the stage manifest: its counts and its three outputs
    (:data:`DOC_OUTPUT_KINDS` order)."""

    name: str
    counts: dict[str, Any]
    outputs: tuple[ShardRef, ...]


def read_shard_record(out: Path, name: str, key: dict[str, str]) -> ShardRecord | None:
    """The record of shard ``name`` of the stage directory ``out`` when it was finished under the
    checkpoint ``key`` (its stats file holds the key, its three outputs have their sidecars), else None."""
    p = stats_path(out, name)
    if not p.exists():
        return None
    stats = json.loads(p.read_text())
    if stats.get("key") != key:
        return None
    refs = []
    for kind in DOC_OUTPUT_KINDS:
        rel = f"{kind}/{name}{SUFFIX}"
        sc = read_sidecar(out / rel)
        if sc is None:
            return None
        refs.append(ShardRef(path=rel, sha256=sc["sha256"], records=sc["records"]))
    return ShardRecord(name, stats["counts"], tuple(refs))


def artifact_refs(out: Path, kinds: tuple[str, ...], rank: int, size: int) -> list[tuple[int, ShardRef]]:
    """This rank's share of the finished files of the stage's artifact directories (sidecars are
    folded into their file), each with its place in the manifest's list (by kind, then name): read
    through its sidecar, or hashed here when its writer recorded no digest."""
    found = []
    for kind in kinds:
        d = out / kind
        files = (
            sorted(p for p in d.iterdir() if p.is_file() and not p.name.startswith(".")) if d.is_dir() else []
        )
        names = {p.name for p in files}
        found += [
            (kind, p) for p in files if not (p.name.endswith(".json") and p.name[: -len(".json")] in names)
        ]
    refs = []
    for place in range(rank, len(found), size):
        kind, p = found[place]
        sidecar = read_sidecar(p)
        sha = sidecar["sha256"] if sidecar and "sha256" in sidecar else file_sha256(p)
        records = sidecar["records"] if sidecar else -1
        refs.append((place, ShardRef(path=f"{kind}/{p.name}", sha256=sha, records=records)))
    return refs
