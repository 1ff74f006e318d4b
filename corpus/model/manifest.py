"""Stage and snapshot manifests, and the one place that reads a directory's ``manifest.json`` into them.

Manifests are content-addressed: their digest covers everything except ``run_info`` (who ran it, when),
so the same inputs and config give the same digest on any number of ranks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from corpus.model.counts import YieldCounts
from corpus.model.digest import json_digest
from corpus.model.layout import manifest_path
from corpus.model.shard_table import ShardKey, ShardTable, table_bytes


@dataclass(frozen=True)
class ShardRef:
    """A file an artifact is made of, by relative path, digest and record count."""

    path: str
    sha256: str
    records: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "records": self.records}


@dataclass(frozen=True)
class StageManifest:
    """Proof that a stage completed: what went in, what came out, under which code and config.

    ``digest`` covers everything but ``run_info`` (ranks, host, wall time), so it is the same on any
    rank count and changes whenever an input, an output, the code version or the config changes.
    """

    stage: str
    stage_version: str
    config: dict[str, Any]
    config_hash: str
    inputs: tuple[ShardRef, ...]
    outputs: tuple[ShardRef, ...]
    side_outputs: tuple[ShardRef, ...]  # filtered/, quarantine/ and stage-specific artifacts
    shard_counts: dict[str, dict[str, Any]]  # output shard name -> YieldCounts.to_dict()
    totals: dict[str, Any]  # GroupCounts.to_dict() over all shards
    extra: dict[str, Any] = field(default_factory=dict)  # stage-specific digested facts
    run_info: dict[str, Any] = field(default_factory=dict)  # not digested

    def digested_part(self) -> dict[str, Any]:
        d = self.to_dict()
        d.pop("run_info")
        return d

    @property
    def digest(self) -> str:
        return json_digest(self.digested_part())

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "stage_version": self.stage_version,
            "config": self.config,
            "config_hash": self.config_hash,
            "inputs": [s.to_dict() for s in self.inputs],
            "outputs": [s.to_dict() for s in self.outputs],
            "side_outputs": [s.to_dict() for s in self.side_outputs],
            "shard_counts": self.shard_counts,
            "totals": self.totals,
            "extra": self.extra,
            "run_info": self.run_info,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StageManifest:
        return cls(
            stage=d["stage"],
            stage_version=d["stage_version"],
            config=d["config"],
            config_hash=d["config_hash"],
            inputs=tuple(ShardRef(**s) for s in d["inputs"]),
            outputs=tuple(ShardRef(**s) for s in d["outputs"]),
            side_outputs=tuple(ShardRef(**s) for s in d["side_outputs"]),
            shard_counts=d["shard_counts"],
            totals=d["totals"],
            extra=d.get("extra", {}),
            run_info=d.get("run_info", {}),
        )

    def yield_counts(self) -> YieldCounts:
        y = YieldCounts()
        for counts in self.shard_counts.values():
            y.merge(YieldCounts.from_dict(counts))
        return y


@dataclass(frozen=True)
class SnapshotShard:
    """One shard of the final snapshot, as the loader and ``corpus trace`` see it."""

    path: str  # relative to the snapshot directory
    sha256: str
    bucket: str  # mixture bucket (source category); shards are homogeneous by bucket
    docs: int
    tokens: int
    files: dict[str, str] = field(default_factory=dict)  # role -> relative path of companion files
    # the sha256 of each ``block_size``-byte block of the .bin, so a reader verifies only what it reads:
    # in the shard's ``.blocks`` file (``files["blocks"]``, whose sha256 is ``blocks_sha256``), or listed
    # here (``block_sha256``) in a snapshot written before the file. Neither (block_size 0) in a
    # snapshot without block digests: readers check the whole file. ``block_layout``: where the blocks lie
    # (corpus.formats.block_layout: "" fixed blocks over the file, "documents" each document's own).
    block_size: int = 0
    block_sha256: tuple[str, ...] = ()
    blocks_sha256: str = ""
    block_layout: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "block_sha256", tuple(self.block_sha256))  # JSON gives a list

    def to_dict(self) -> dict[str, Any]:
        """Field by field (every loader rank makes one per shard to check the snapshot id: ``asdict``'s
        deep copies were 0.6 of 1.0 CPU s at 30,000 shards)."""
        d: dict[str, Any] = {
            "path": self.path,
            "sha256": self.sha256,
            "bucket": self.bucket,
            "docs": self.docs,
            "tokens": self.tokens,
            "files": dict(self.files),
        }
        # keys a shard does not use are left out, so snapshots of each earlier form keep their id
        if self.block_size or self.block_sha256 or self.blocks_sha256:
            d["block_size"] = self.block_size
        if self.block_sha256:
            d["block_sha256"] = list(self.block_sha256)
        if self.blocks_sha256:
            d["blocks_sha256"] = self.blocks_sha256
        if self.block_layout:
            d["block_layout"] = self.block_layout
        return d


@dataclass(frozen=True)
class SnapshotManifest:
    """The immutable snapshot: its shards, the versions of everything that made them, and its id.

    ``snapshot_id = sha256(canonical manifest bytes)`` over every field here except ``run_info``.
    ``split``: the shards are kept beside the manifest (``corpus-snapshot/2``,
    :mod:`corpus.model.shard_table`) and the id digests the table's facts, so a reader checks the id
    without reading every shard's entry; else they are listed in it (``corpus-snapshot/1``).
    """

    shards: Sequence[SnapshotShard]  # a tuple, or a ShardTable read as asked
    stage_versions: dict[str, dict[str, str]]  # stage -> {version, config_hash, manifest_digest, ...}
    seed: int
    token_dtype: str = ""
    tokenizer: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    run_info: dict[str, Any] = field(default_factory=dict)
    split: bool = False

    @cached_property
    def table(self) -> tuple[bytes, bytes, dict[str, Any]]:
        """The split form's keys file, lines file and facts (:func:`~corpus.model.shard_table.table_bytes`)."""
        return table_bytes(self.shards)

    def digested_part(self) -> dict[str, Any]:
        if not self.split:
            listed: dict[str, Any] = {
                "format": "corpus-snapshot/1",
                "shards": [s.to_dict() for s in self.shards],
            }
        else:
            facts = self.shards.facts if isinstance(self.shards, ShardTable) else self.table[2]
            listed = {"format": "corpus-snapshot/2", "shard_table": facts}
        return listed | {
            "stage_versions": self.stage_versions,
            "seed": self.seed,
            "token_dtype": self.token_dtype,
            "tokenizer": self.tokenizer,
            "extra": self.extra,
        }

    @cached_property
    def snapshot_id(self) -> str:
        """Computed once per object (O(shards) listed, O(1) split: a loader asks at start and at every
        checkpoint); the manifest is immutable, its dicts never changed after it is made."""
        return json_digest(self.digested_part())

    def shard_keys(self) -> tuple[ShardKey, ...]:
        """Each shard's bucket, sha256, tokens and documents: of a split manifest, from its keys file
        alone (a loader rank parses only the entries of the shards it opens)."""
        if isinstance(self.shards, ShardTable):
            return self.shards.keys()
        return tuple(ShardKey(s.bucket, s.sha256, s.tokens, s.docs) for s in self.shards)

    def to_dict(self) -> dict[str, Any]:
        d = self.digested_part()
        d["snapshot_id"] = self.snapshot_id
        d["run_info"] = self.run_info
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], directory: Path | None = None) -> SnapshotManifest:
        """The manifest ``d``, read from ``directory`` (where a split manifest's shard table lies)."""
        split = d.get("format") == "corpus-snapshot/2"
        if split and directory is None:
            raise ValueError("a corpus-snapshot/2 manifest is read with the directory its shard table is in")
        m = cls(
            shards=ShardTable(directory, d["shard_table"])
            if split
            else tuple(SnapshotShard(**s) for s in d["shards"]),
            stage_versions=d["stage_versions"],
            seed=d["seed"],
            token_dtype=d.get("token_dtype", ""),
            tokenizer=d.get("tokenizer", {}),
            extra=d.get("extra", {}),
            run_info=d.get("run_info", {}),
            split=split,
        )
        if "snapshot_id" in d and d["snapshot_id"] != m.snapshot_id:
            raise ValueError(
                f"snapshot manifest does not match its id: recorded {d['snapshot_id']}, content {m.snapshot_id}"
            )
        return m


class NotCompleted(FileNotFoundError):
    """A directory that should hold a completed stage (or snapshot) has no manifest."""


def read_stage_manifest(stage_directory: Path) -> StageManifest | None:
    """The stage's manifest, or None while the stage is not complete."""
    p = manifest_path(stage_directory)
    if not p.exists():
        return None
    return StageManifest.from_dict(json.loads(p.read_text()))


def require_stage_manifest(stage_directory: Path) -> StageManifest:
    m = read_stage_manifest(stage_directory)
    if m is None:
        raise NotCompleted(
            f"input {stage_directory} is not a completed stage (no {manifest_path(stage_directory).name}); "
            "run that stage first"
        )
    return m


def read_snapshot_manifest(snapshot_directory: Path) -> SnapshotManifest:
    return SnapshotManifest.from_dict(
        json.loads(manifest_path(snapshot_directory).read_text()), snapshot_directory
    )
