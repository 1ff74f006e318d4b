"""Facts one stage hands another, typed: what a later stage or the snapshot reads from a stage manifest.

A stage manifest's ``extra`` is JSON; the facts another stage depends on are written from, and read
back into, these dataclasses, so a reader never fishes a free key out of a dict and a build of an
older stage version that lacks one gets a clear error naming the stage, not a ``KeyError``.

* the tokenize stage's tokenizer (:class:`corpus.text.tokenizer.TokenizerInfo`): write_shards, the snapshot;
* decontaminate's :class:`DecontaminationFacts` (eval registry, the rule and its settings, the parts of
  the per-document 8-gram index): the snapshot, its contamination report and the index it links;
* write_shards' :class:`WriteShardsFacts` (the token shards and the doc_id index's parts): the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corpus.model import StageManifest
from corpus.text.tokenizer import TokenizerInfo


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
    ``prefix_bits`` bits are ``p``. ``unit`` names what it counts in JSON (``rows``, ``docs``)."""

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


#: what ``DecontaminationFacts.matching`` must say of the rule, for a check after the build to apply it
RULE_KEYS = ("rule", "ngram", "min_run", "min_item_words")


@dataclass(frozen=True)
class DecontaminationFacts:
    eval_registry_hash: str
    eval_registry: dict[str, Any]  # per benchmark: items, source, unchecked items
    matching: dict[str, Any]  # the rule and its settings (RULE_KEYS), the scheme, passage counts
    doc_gram_index: PartitionedIndex  # the per-document 8-gram index: (8-gram, document) records, "rows"

    def rule_settings(self) -> dict[str, Any]:
        """What a check of the index after the build applies: the rule, its n-gram and its settings."""
        m = self.matching
        return {
            "rule": m["rule"],
            "n": int(m["ngram"]),
            "min_run": int(m["min_run"]),
            "min_item_words": int(m["min_item_words"]),
        }

    def to_extra(self) -> dict[str, Any]:
        return {
            "eval_registry_hash": self.eval_registry_hash,
            "eval_registry": self.eval_registry,
            "matching": self.matching,
            "doc_gram_index": self.doc_gram_index.to_dict(),
        }

    @classmethod
    def of(cls, m: StageManifest) -> DecontaminationFacts:
        _require(m, "decontaminate", "eval_registry_hash", "eval_registry", "matching", "doc_gram_index")
        e = m.extra
        missing = [k for k in RULE_KEYS if k not in e["matching"]]
        if missing:
            raise MissingFacts(
                f"the decontaminate stage (version {m.stage_version}) does not say its rule's "
                f"{', '.join(missing)}: rerun the build from decontaminate"
            )
        return cls(
            e["eval_registry_hash"],
            e["eval_registry"],
            e["matching"],
            PartitionedIndex.from_dict(e["doc_gram_index"], "rows"),
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
            d["name"],
            d["bucket"],
            int(d["docs"]),
            int(d["tokens"]),
            {suffix: FileRef.from_dict(ref) for suffix, ref in d["files"].items()},
        )


@dataclass(frozen=True)
class WriteShardsFacts:
    token_shards: tuple[TokenShardListing, ...]
    doc_index: PartitionedIndex

    def to_extra(self) -> dict[str, Any]:
        return {
            "token_shards": [s.to_dict() for s in self.token_shards],
            "doc_index": self.doc_index.to_dict(),
        }

    @classmethod
    def of(cls, m: StageManifest) -> WriteShardsFacts:
        _require(m, "write_shards", "token_shards", "doc_index")
        return cls(
            tuple(TokenShardListing.from_dict(s) for s in m.extra["token_shards"]),
            PartitionedIndex.from_dict(m.extra["doc_index"], "docs"),
        )
