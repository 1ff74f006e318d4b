"""Facts one stage hands another, typed: what a later stage, the build driver, the snapshot or the data
card reads from a stage manifest's (or a snapshot manifest's) ``extra``.

``extra`` is JSON; the facts a reader depends on are read back into these dataclasses (and written from
them where a writer builds one), so a reader never fishes a free key out of a dict, a missing optional
fact has one default, spelled here, and an older stage version that lacks a required one is a clear
error naming the stage, not a ``KeyError``. By reader: the tokenizer (:func:`tokenizer_facts`),
:class:`DecontaminationFacts` and :class:`WriteShardsFacts` (the snapshot); :class:`StageFacts` and
:class:`DedupFacts` (any stage, the dedup stages: the build driver, the card); :class:`HoldoutFacts`,
:class:`CodeFilesFacts`, :func:`quality_model_hash` (the card); :class:`SnapshotFacts` and
:class:`BaseCandidates` (a snapshot manifest: lookup, validation, a delta's assembly, the card).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corpus.decont.doc_grams import DOC_GRAM_INDEX
from corpus.model import ShardRef, SnapshotManifest, StageManifest
from corpus.snapshot.layout import BASE_DOC_INDEX
from corpus.text.normalize import NORMALIZATION_VERSION
from corpus.text.tokenizer import TokenizerInfo


class MissingFacts(ValueError):
    """A stage manifest lacks facts a later stage needs (an older stage version): rerun that stage."""


def _expect_stage(m: StageManifest, *stages: str) -> None:
    if m.stage not in stages:
        raise MissingFacts(f"expected the manifest of the {' or '.join(stages)} stage, got {m.stage}'s")


def _require(m: StageManifest, stage: str, *keys: str) -> None:
    _expect_stage(m, stage)
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
            "sample": int(m.get("doc_gram_sample", 1)),  # one 8-gram in this many kept (1 before it existed)
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
class ShardNumbering:
    """The base candidates a delta's write_shards numbered its shards after (``extra.base``): their id
    (``label``), how many shards they list (the delta's doc_id index counts its shards after them) and
    the next free number per bucket. Assembly refuses a delta whose numbering is not its base's."""

    label: str
    shards: int
    next_number: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "shards": self.shards, "next_number": self.next_number}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShardNumbering:
        return cls(d["label"], int(d["shards"]), dict(d["next_number"]))


@dataclass(frozen=True)
class WriteShardsFacts:
    token_shards: tuple[TokenShardListing, ...]
    doc_index: PartitionedIndex
    base: ShardNumbering | None = None  # a delta build's (``corpus build --base``); no key without one

    def to_extra(self) -> dict[str, Any]:
        return {
            "token_shards": [s.to_dict() for s in self.token_shards],
            "doc_index": self.doc_index.to_dict(),
        } | ({"base": self.base.to_dict()} if self.base is not None else {})

    @classmethod
    def of(cls, m: StageManifest) -> WriteShardsFacts:
        _require(m, "write_shards", "token_shards", "doc_index")
        base = m.extra.get("base")
        return cls(
            tuple(TokenShardListing.from_dict(s) for s in m.extra["token_shards"]),
            PartitionedIndex.from_dict(m.extra["doc_index"], "docs"),
            ShardNumbering.from_dict(base) if base is not None else None,
        )


@dataclass(frozen=True)
class StageFacts:
    """What a stage of any kind may record about its own run besides its counts, each absent where it
    has nothing to say: the input records it skipped that were not documents, by reason (ingest's
    requests, revisits, non-200 responses: outside the document counts, so the build driver and the
    data card read them here; None where the stage tallies none) and alarms about its own output
    (minhash_dedup: a cluster far too large; the card lists them)."""

    skipped_records: dict[str, int] | None
    alarms: tuple[str, ...]

    @classmethod
    def of(cls, m: StageManifest) -> StageFacts:
        return cls(m.extra.get("skipped_records"), tuple(str(a) for a in m.extra.get("alarms") or ()))


#: the stages that key documents for the persistent dedup indexes (ingest: its recrawl keys)
DEDUP_STAGES = ("ingest", "exact_dedup", "line_dedup", "minhash_dedup")


@dataclass(frozen=True)
class DedupFacts:
    """What a stage that keys documents for the persistent dedup indexes records of them: the version
    of the text normalization its keys were made with (what defines the keys the build commits; the
    code's own where a manifest names none) and, in a delta build, its probe of the base build's index
    (``extra.index``: the base's partitions, generations and records it was checked against, the keys
    of the base it met, the documents it found duplicate or linked to a base cluster, the records it
    wrote for the index). The data card checks its counts against the documents. Every probe fact is
    None where the stage probed no base (a full build) or does not count it."""

    normalization_version: str
    partitions: int | None = None
    base: str | None = None  # digest of the base generations probed
    base_generations: tuple[str, ...] | None = None
    base_records: int | None = None
    base_keys: int | None = None
    base_duplicates: int | None = None  # ingest (recrawls of the base), exact_dedup
    index_records: int | None = None
    base_linked_docs: int | None = None  # minhash_dedup: documents joined to a base cluster
    #: minhash_dedup: edges to base clusters verified against the base's signature store, rejected, and
    #: left unverified (no store), and the estimated Jaccard a join needed
    base_joins: tuple[int, int, int] | None = None
    join_threshold: float | None = None

    @classmethod
    def of(cls, m: StageManifest) -> DedupFacts:
        _expect_stage(m, *DEDUP_STAGES)
        index = m.extra.get("index", {})
        generations = index.get("base_generations")
        return cls(
            m.extra.get("normalization_version", NORMALIZATION_VERSION),
            index.get("partitions"),
            index.get("base"),
            tuple(generations) if generations is not None else None,
            index.get("base_records"),
            index.get("base_keys"),
            index.get("base_duplicates"),
            index.get("index_records"),
            index.get("base_linked_docs"),
            tuple(index[k] for k in JOIN_FACTS) if all(k in index for k in JOIN_FACTS) else None,
            index.get("join_threshold"),
        )


#: minhash_dedup's counts of edges to base clusters (``extra.index``), in :attr:`DedupFacts.base_joins`
JOIN_FACTS = ("base_joins_verified", "base_joins_rejected", "base_joins_unverified")


@dataclass(frozen=True)
class HoldoutFacts:
    """The eval holdout as ingest carved it and extract stored it, for the data card: the pages held
    out, the carving rule's version (``"1"``: a manifest from before it was recorded), the pages
    stored extracted and scrubbed (None without an extract stage) and those extraction dropped, by
    reason."""

    held_out: int
    carving_version: str
    stored: int | None
    dropped: dict[str, int]

    @classmethod
    def of(cls, ingest: StageManifest | None, extract: StageManifest | None) -> HoldoutFacts | None:
        """None when there is no ingest stage or it recorded no holdout."""
        if ingest is None or "holdout_docs" not in ingest.extra:
            return None
        _expect_stage(ingest, "ingest")
        if extract is not None:
            _expect_stage(extract, "extract")
        return cls(
            ingest.extra["holdout_docs"],
            ingest.extra.get("holdout_version", "1"),
            extract.extra.get("holdout_docs") if extract is not None else None,
            extract.extra.get("holdout_dropped", {}) if extract is not None else {},
        )


@dataclass(frozen=True)
class CodeFilesFacts:
    """ingest's tally of the repositories it read (``extra.code_files``), for the data card's code
    section: repositories read and quarantined, the files (and bytes) kept and rejected by reason, and
    the licences found (per class, and one entry per repository)."""

    repositories: int
    quarantined_repositories: int
    kept: dict[str, int]
    rejected: dict[str, dict[str, int]]
    licence_classes: dict[str, int]
    licences: list[dict[str, Any]]

    @classmethod
    def of(cls, ingest: StageManifest) -> CodeFilesFacts | None:
        """None where ingest read no repository (or is too old to say)."""
        _expect_stage(ingest, "ingest")
        d = ingest.extra.get("code_files")
        if not d or not d.get("repositories"):
            return None
        return cls(
            d["repositories"],
            d["quarantined_repositories"],
            d["kept"],
            d["rejected"],
            d.get("licence_classes", {}),
            d.get("licences", []),
        )


def quality_model_hash(m: StageManifest) -> str | None:
    """The sha256 of the quality model annotate scored with; None where it recorded none."""
    _expect_stage(m, "annotate")
    return m.extra.get("quality_model_hash")


@dataclass(frozen=True)
class BaseCandidates:
    """The base candidates a delta's candidates list first, by reference (a snapshot manifest's
    ``extra.base``): their id, shards, documents and tokens, so the data card tells the base's shards
    and documents from the delta's own."""

    snapshot_id: str
    shards: int
    docs: int
    tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.snapshot_id,
            "shards": self.shards,
            "docs": self.docs,
            "tokens": self.tokens,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BaseCandidates:
        return cls(d["snapshot_id"], d["shards"], d["docs"], d["tokens"])

    @classmethod
    def of(cls, m: SnapshotManifest) -> BaseCandidates:
        """Candidates ``m`` as a delta built on them lists them."""
        missing = [k for k in ("docs", "tokens") if k not in m.extra]
        if missing:
            raise MissingFacts(
                f"the candidates {m.snapshot_id} list no {', '.join(missing)}: reassemble them"
            )
        return cls(m.snapshot_id, len(m.shards), m.extra["docs"], m.extra["tokens"])


@dataclass(frozen=True)
class SnapshotFacts:
    """What a snapshot manifest's ``extra`` says besides its shards, for the readers of a snapshot
    (lookup, validation, a delta's assembly, the version's queries, the data card): its artifacts (each
    a file ``{path, sha256}`` or a listing of ``parts``; ``artifacts`` holds them all, by name, for a walk
    over every file) and, for a delta's candidates, the base candidates they list first. The named
    artifacts are read on demand, so a reader of one never depends on the form of another."""

    artifacts: dict[str, dict[str, Any]]
    base: BaseCandidates | None

    @classmethod
    def of(cls, m: SnapshotManifest) -> SnapshotFacts:
        base = m.extra.get("base")
        return cls(m.extra.get("artifacts", {}), BaseCandidates.from_dict(base) if base is not None else None)

    @property
    def contamination_report(self) -> FileRef | None:
        art = self.artifacts.get("contamination_report")
        return FileRef.from_dict(art) if art is not None else None

    @property
    def doc_gram_index(self) -> dict[str, Any] | None:
        """The per-document 8-gram index's listing: ``parts``, ``prefix_bits``, ``rows`` and what a check
        after the build applies (``rule``, ``n``, ``min_run``, ``min_item_words``); None before it existed."""
        return self.artifacts.get(DOC_GRAM_INDEX)

    @property
    def copies(self) -> tuple[ShardRef, ...]:
        """The exact copies' provenance files (a delta's: its base's first); none without exact_dedup."""
        return tuple(ShardRef(**p) for p in self.artifacts.get("copies", {}).get("parts", []))

    def doc_indexes(self) -> tuple[PartitionedIndex, ...]:
        """Every doc_id index the shard list is addressed by: a delta's inherited ones (oldest first),
        then the build's own, last. Their shard numbers are places in the manifest's shard list."""
        if "doc_index" not in self.artifacts:
            raise MissingFacts("the snapshot lists no doc_index: reassemble it")
        earlier = self.artifacts.get(BASE_DOC_INDEX)
        inherited = _inherited_doc_indexes(earlier) if earlier is not None else []
        return (*inherited, PartitionedIndex.from_dict(self.artifacts["doc_index"], "docs"))


def _inherited_doc_indexes(listing: dict[str, Any]) -> list[PartitionedIndex]:
    """The doc_id indexes a delta's candidates inherit, from their one listing: each part says which
    index it belongs to, ``prefix_bits`` lists each index's."""
    indexes = []
    for k, bits in enumerate(listing["prefix_bits"]):
        parts = tuple((FileRef.from_dict(p), int(p["docs"])) for p in listing["parts"] if p["index"] == k)
        indexes.append(PartitionedIndex("docs", int(bits), sum(n for _, n in parts), parts))
    return indexes
