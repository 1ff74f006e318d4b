"""Facts one stage hands another, typed: what a later stage or the snapshot reads from a stage manifest.

A stage manifest's ``extra`` is JSON; the facts another stage depends on are written from, and read
back into, these dataclasses, so a reader never fishes a free key out of a dict and a build of an
older stage version that lacks one gets a clear error naming the stage, not a ``KeyError``.

* the tokenize stage's tokenizer (:class:`corpus.tokenizer.TokenizerInfo`): write_shards, the snapshot;
* decontaminate's :class:`DecontaminationFacts` (eval registry, matching settings, the retained 13-gram
  index's parts): the snapshot and its contamination report;
* write_shards' :class:`WriteShardsFacts` (the token shards and the doc_id index's parts): the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corpus.model import StageManifest
from corpus.tokenizer import TokenizerInfo


class MissingFacts(ValueError):
    """A stage manifest lacks facts a later stage needs (an older stage version): rerun that stage."""


def _require(m: StageManifest, stage: str, *keys: str) -> None:
    if m.stage != stage:
        raise MissingFacts(f"expected the manifest of the {stage} stage, got {m.stage}'s")
    missing = [k for k in keys if k not in m.extra]
    if missing:
        raise MissingFacts(
            f"the {stage} stage (version {m.stage_version}) lists no {', '.join(missing)}: rerun the build from {stage}"
        )


def tokenizer_facts(m: StageManifest) -> TokenizerInfo:
    """The tokenizer the tokenize stage encoded with."""
    _require(m, "tokenize", "tokenizer")
    return TokenizerInfo.from_dict(m.extra["tokenizer"])


@dataclass(frozen=True)
class FileRef:
    path: str  # relative to the stage directory (or the snapshot, once linked there)
    sha256: str  # hex, as the writer computed it

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FileRef:
        return cls(d["path"], d["sha256"])


@dataclass(frozen=True)
class PartitionedIndex:
    """A sorted index split by key prefix: part ``p`` of ``2**prefix_bits`` holds the keys whose top
    ``prefix_bits`` bits are ``p``. ``unit`` names what it counts in JSON (``grams``, ``docs``)."""

    unit: str
    prefix_bits: int
    count: int
    parts: tuple[tuple[FileRef, int], ...]  # each part's file and its record count
    scheme: str = ""
    record: str = ""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "prefix_bits": self.prefix_bits,
            self.unit: self.count,
            "parts": [{**ref.to_dict(), self.unit: n} for ref, n in self.parts],
        }
        if self.scheme:
            d["scheme"] = self.scheme
        if self.record:
            d["record"] = self.record
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], unit: str) -> PartitionedIndex:
        return cls(
            unit,
            int(d["prefix_bits"]),
            int(d[unit]),
            tuple((FileRef.from_dict(p), int(p[unit])) for p in d["parts"]),
            d.get("scheme", ""),
            d.get("record", ""),
        )


@dataclass(frozen=True)
class DecontaminationFacts:
    eval_registry_hash: str
    eval_registry: dict[str, Any]  # per benchmark: items, source, unchecked items
    matching: dict[str, Any]  # n-gram size, minimum run, scheme
    ngram_index: PartitionedIndex

    def to_extra(self) -> dict[str, Any]:
        return {
            "eval_registry_hash": self.eval_registry_hash,
            "eval_registry": self.eval_registry,
            "matching": self.matching,
            "ngram_index": self.ngram_index.to_dict(),
        }

    @classmethod
    def of(cls, m: StageManifest) -> DecontaminationFacts:
        _require(m, "decontaminate", "eval_registry_hash", "eval_registry", "matching", "ngram_index")
        e = m.extra
        return cls(
            e["eval_registry_hash"], e["eval_registry"], e["matching"], PartitionedIndex.from_dict(e["ngram_index"], "grams")
        )


@dataclass(frozen=True)
class TokenShardListing:
    """One token shard as write_shards lists it: its counts and its files by suffix."""

    name: str
    bucket: str
    docs: int
    tokens: int
    files: dict[str, FileRef]  # ".bin", ".idx", ".meta.json", lineage files

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "bucket": self.bucket,
            "docs": self.docs,
            "tokens": self.tokens,
            "files": {suffix: ref.to_dict() for suffix, ref in sorted(self.files.items())},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TokenShardListing:
        return cls(
            d["name"], d["bucket"], int(d["docs"]), int(d["tokens"]),
            {suffix: FileRef.from_dict(ref) for suffix, ref in d["files"].items()},
        )


@dataclass(frozen=True)
class WriteShardsFacts:
    token_shards: tuple[TokenShardListing, ...]
    doc_index: PartitionedIndex

    def to_extra(self) -> dict[str, Any]:
        return {"token_shards": [s.to_dict() for s in self.token_shards], "doc_index": self.doc_index.to_dict()}

    @classmethod
    def of(cls, m: StageManifest) -> WriteShardsFacts:
        _require(m, "write_shards", "token_shards", "doc_index")
        return cls(
            tuple(TokenShardListing.from_dict(s) for s in m.extra["token_shards"]),
            PartitionedIndex.from_dict(m.extra["doc_index"], "docs"),
        )
