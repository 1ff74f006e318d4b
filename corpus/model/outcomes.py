"""What a stage does with one input document: kept, passed on as read, filtered or quarantined."""

from __future__ import annotations

from dataclasses import dataclass

from corpus.model.document import Document, QuarantineRecord


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


Outcome = Kept | Passed | Filtered | Quarantined
