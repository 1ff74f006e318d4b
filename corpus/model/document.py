"""A document and its annotations, and the quarantine record of an input that could not be one.

Documents are immutable values; a stage derives a new one with :func:`dataclasses.replace`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from corpus.model.digest import canonical_json, doc_id_for, text_digest


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
        asdict's recursive deep copy would be the largest CPU cost of writing a shard."""
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
