"""The typed data model every stage shares: documents, stage outcomes, counts and manifests.

Documents are immutable values; a stage derives a new one with :func:`dataclasses.replace`. Manifests
are content-addressed: their digest covers everything except ``run_info`` (who ran it, when), so the
same inputs and config give the same digest on any number of ranks.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from corpus.digest import canonical_json, doc_id_for, json_digest, text_digest


@dataclass(frozen=True)
class Annotation:
    """One filter's verdict on a document, with the continuous value behind it.

    ``verdict`` is ``"pass"``, ``"fail"`` or ``"info"``; the keep/drop policy reads ``value`` again,
    so a threshold change never needs a re-run of the filter itself.
    """

    stage: str
    name: str
    value: float | int | str | None
    verdict: str = "info"

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "name": self.name, "value": self.value, "verdict": self.verdict}


@dataclass(frozen=True)
class Document:
    doc_id: str
    source: str
    source_tier: str
    url: str
    crawl_date: str  # ISO-8601 date (YYYY-MM-DD) of the fetch or the curated release
    raw_digest: str  # hex sha256 of the raw record payload as fetched
    text_digest: str  # hex sha256 of ``text``
    text: str
    content_type: str = "text/plain"  # "text/html" until extraction turns it into text
    lang: str = ""
    lang_confidence: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)
    annotations: tuple[Annotation, ...] = ()
    dup_cluster_id: str = ""
    dup_cluster_size: int = 1
    dup_of: str = ""
    license_hint: str = ""
    derived_from: str = ""  # doc_id this document was derived from by a text-changing stage

    @classmethod
    def create(cls, *, text: str, source: str, **kw: Any) -> Document:
        """A new document whose text_digest and doc_id follow from its text and source."""
        td = text_digest(text)
        return cls(doc_id=doc_id_for(td, source), source=source, text=text, text_digest=td, **kw)

    def with_text(self, text: str, **kw: Any) -> Document:
        """The same document with new text: new digest and doc_id, lineage kept in derived_from."""
        if text == self.text and not kw:
            return self
        td = text_digest(text)
        new_id = doc_id_for(td, self.source)
        derived = self.doc_id if new_id != self.doc_id else self.derived_from
        return replace(self, text=text, text_digest=td, doc_id=new_id, derived_from=derived, **kw)

    def annotate(self, *annotations: Annotation, **kw: Any) -> Document:
        return replace(self, annotations=self.annotations + tuple(annotations), **kw)

    def annotation(self, stage: str, name: str) -> Annotation | None:
        """The latest annotation with this stage and name (a re-run appends, the newest wins)."""
        for a in reversed(self.annotations):
            if a.stage == stage and a.name == name:
                return a
        return None

    @property
    def group(self) -> tuple[str, str]:
        """The (source, lang) cell every stage's yield is accounted in."""
        return (self.source, self.lang or "und")

    def to_dict(self) -> dict[str, Any]:
        """Every field, annotations as dicts: what ``dataclasses.asdict`` gives, written out because
        asdict's recursive deep copy was the largest CPU cost of writing a shard."""
        d = {name: getattr(self, name) for name in _DOCUMENT_FIELDS}
        d["scores"] = dict(self.scores)
        d["annotations"] = [a.to_dict() for a in self.annotations]
        return d

    def to_json_bytes(self) -> bytes:
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Document:
        unknown = d.keys() - _DOCUMENT_FIELD_SET
        if unknown:
            raise ValueError(f"unknown document fields: {sorted(unknown)}")
        d = dict(d)
        d["annotations"] = tuple(Annotation(**a) for a in d.get("annotations", ()))
        return cls(**d)



_DOCUMENT_FIELDS = tuple(f.name for f in fields(Document))
_DOCUMENT_FIELD_SET = frozenset(_DOCUMENT_FIELDS)

@dataclass(frozen=True)
class QuarantineRecord:
    """Why an input could not become a document; kept so nothing is ever lost silently."""

    stage: str
    reason: str
    raw_digest: str
    source: str = ""
    url: str = ""
    detail: str = ""
    input_name: str = ""
    lang: str = ""

    @property
    def group(self) -> tuple[str, str]:
        return (self.source, self.lang or "und")

    def to_json_bytes(self) -> bytes:
        return canonical_json(asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QuarantineRecord:
        return cls(**d)


# --- what a stage does with one input document ---------------------------------------------------


@dataclass(frozen=True)
class Kept:
    doc: Document


@dataclass(frozen=True)
class Filtered:
    """Dropped by policy: written to the stage's ``filtered/`` output with its reason, never deleted."""

    doc: Document
    reason: str


@dataclass(frozen=True)
class Quarantined:
    record: QuarantineRecord


@dataclass(frozen=True)
class Passed:
    """A document whose text a stage leaves exactly as it read it: its serialized line goes on as it was
    read, or as :func:`annotated_line` made it (the text neither decoded nor encoded again), accounted
    in its ``group`` with ``text_bytes``, both recorded by the stage when it last read the document.
    What most documents of a dedup stage are."""

    line: bytes
    group: tuple[str, str]
    text_bytes: int


#: the fields a document's line has before ``lang`` (canonical JSON sorts its keys): its *head*
_HEAD_FIELDS = frozenset(f for f in _DOCUMENT_FIELDS if f < "lang")
_LANG_KEY = b',"lang":'


def annotated_line(line: bytes, annotation: Annotation, **fields: Any) -> bytes | None:
    """``Document.from_dict(json.loads(line)).annotate(annotation, **fields).to_json_bytes()`` for the
    line of a document as :meth:`Document.to_json_bytes` wrote it, made from the line's head alone: the
    annotations and the fields before ``lang`` (``dup_*`` among them) are parsed and encoded again, the
    rest (``text`` among it) is copied as bytes. None where the head is not whole (the line is not such
    a line): the caller parses the document instead.

    Inside a JSON string every quote is escaped, so ``,"lang":`` outside one is a key; before the top
    level's, it could only be a key of a nested object, and a head cut there is not a JSON object."""
    if not fields.keys() <= _HEAD_FIELDS:
        raise ValueError(f"only the fields before lang: {sorted(fields.keys() - _HEAD_FIELDS)}")
    cut = line.find(_LANG_KEY)
    if cut < 0:
        return None
    try:
        head = json.loads(line[:cut] + b"}")
    except ValueError:
        return None
    if not isinstance(head, dict) or head.keys() != _HEAD_FIELDS or not isinstance(head["annotations"], list):
        return None
    head["annotations"].append(annotation.to_dict())
    head.update(fields)
    return canonical_json(head)[:-1] + line[cut:]


Outcome = Kept | Passed | Filtered | Quarantined


# --- counts -----------------------------------------------------------------------------------------


@dataclass
class GroupCounts:
    """Yield of one (source, lang) cell in one shard of one stage."""

    docs_in: int = 0
    docs_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    filtered: Counter = field(default_factory=Counter)
    quarantined: Counter = field(default_factory=Counter)
    filtered_bytes: int = 0

    def add(self, other: GroupCounts) -> None:
        self.docs_in += other.docs_in
        self.docs_out += other.docs_out
        self.bytes_in += other.bytes_in
        self.bytes_out += other.bytes_out
        self.filtered_bytes += other.filtered_bytes
        self.filtered.update(other.filtered)
        self.quarantined.update(other.quarantined)

    def reconciles(self) -> bool:
        return self.docs_in == self.docs_out + sum(self.filtered.values()) + sum(self.quarantined.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "in": self.docs_in,
            "out": self.docs_out,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "filtered_bytes": self.filtered_bytes,
            "filtered": dict(sorted(self.filtered.items())),
            "quarantined": dict(sorted(self.quarantined.items())),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GroupCounts:
        return cls(
            docs_in=d["in"],
            docs_out=d["out"],
            bytes_in=d["bytes_in"],
            bytes_out=d["bytes_out"],
            filtered_bytes=d.get("filtered_bytes", 0),
            filtered=Counter(d["filtered"]),
            quarantined=Counter(d["quarantined"]),
        )


class YieldCounts:
    """Counts keyed by (source, lang); the stage runner fills one per shard and sums them."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], GroupCounts] = {}

    def cell(self, group: tuple[str, str]) -> GroupCounts:
        if group not in self.groups:
            self.groups[group] = GroupCounts()
        return self.groups[group]

    def count_input(self, group: tuple[str, str], nbytes: int) -> None:
        c = self.cell(group)
        c.docs_in += 1
        c.bytes_in += nbytes

    def count(self, outcome: Outcome, bytes_in: int) -> None:
        """Account one input document by what became of it (in = out + filtered + quarantined)."""
        if isinstance(outcome, Kept):
            c = self.cell(outcome.doc.group)
            c.docs_out += 1
            c.bytes_out += len(outcome.doc.text.encode("utf-8"))
        elif isinstance(outcome, Passed):
            c = self.cell(outcome.group)
            c.docs_out += 1
            c.bytes_out += outcome.text_bytes
        elif isinstance(outcome, Filtered):
            c = self.cell(outcome.doc.group)
            c.filtered[outcome.reason] += 1
            c.filtered_bytes += len(outcome.doc.text.encode("utf-8"))
        else:
            c = self.cell(outcome.record.group)
            c.quarantined[outcome.record.reason] += 1
        c.docs_in += 1
        c.bytes_in += bytes_in

    def merge(self, other: YieldCounts) -> None:
        for g, c in other.groups.items():
            self.cell(g).add(c)

    def total(self) -> GroupCounts:
        t = GroupCounts()
        for c in self.groups.values():
            t.add(c)
        return t

    def by(self, axis: int) -> dict[str, GroupCounts]:
        """Totals by source (axis 0) or by lang (axis 1)."""
        out: dict[str, GroupCounts] = {}
        for g in sorted(self.groups):
            out.setdefault(g[axis], GroupCounts()).add(self.groups[g])
        return out

    def to_dict(self) -> dict[str, Any]:
        return {f"{s}|{lang}": self.groups[(s, lang)].to_dict() for s, lang in sorted(self.groups)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> YieldCounts:
        y = cls()
        for key, c in d.items():
            source, lang = key.rsplit("|", 1)
            y.groups[(source, lang)] = GroupCounts.from_dict(c)
        return y


# --- manifests --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardRef:
    """A file an artifact is made of, by relative path, digest and record count."""

    path: str
    sha256: str
    records: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    # sha256 of each ``block_size``-byte block of the .bin, so a reader verifies only what it reads.
    # Empty (block_size 0) in snapshots written before block digests: readers check the whole file.
    block_size: int = 0
    block_sha256: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "block_sha256", tuple(self.block_sha256))  # JSON gives a list

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.block_size and not self.block_sha256:
            # a shard without block digests serializes as before, so older snapshots keep their id
            del d["block_size"], d["block_sha256"]
        else:
            d["block_sha256"] = list(self.block_sha256)
        return d


@dataclass(frozen=True)
class SnapshotManifest:
    """The immutable snapshot: its shards, the versions of everything that made them, and its id.

    ``snapshot_id = sha256(canonical manifest bytes)`` over every field here except ``run_info``.
    """

    shards: tuple[SnapshotShard, ...]
    stage_versions: dict[str, dict[str, str]]  # stage -> {version, config_hash, manifest_digest, ...}
    seed: int
    token_dtype: str = ""
    tokenizer: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    run_info: dict[str, Any] = field(default_factory=dict)

    def digested_part(self) -> dict[str, Any]:
        return {
            "format": "corpus-snapshot/1",
            "shards": [s.to_dict() for s in self.shards],
            "stage_versions": self.stage_versions,
            "seed": self.seed,
            "token_dtype": self.token_dtype,
            "tokenizer": self.tokenizer,
            "extra": self.extra,
        }

    @property
    def snapshot_id(self) -> str:
        return json_digest(self.digested_part())

    def to_dict(self) -> dict[str, Any]:
        d = self.digested_part()
        d["snapshot_id"] = self.snapshot_id
        d["run_info"] = self.run_info
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SnapshotManifest:
        m = cls(
            shards=tuple(SnapshotShard(**s) for s in d["shards"]),
            stage_versions=d["stage_versions"],
            seed=d["seed"],
            token_dtype=d.get("token_dtype", ""),
            tokenizer=d.get("tokenizer", {}),
            extra=d.get("extra", {}),
            run_info=d.get("run_info", {}),
        )
        if "snapshot_id" in d and d["snapshot_id"] != m.snapshot_id:
            raise ValueError(
                f"snapshot manifest does not match its id: recorded {d['snapshot_id']}, content {m.snapshot_id}"
            )
        return m
