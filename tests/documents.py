"""Documents for tests: ``Document.create`` with the fields a test does not look at filled in."""

from __future__ import annotations

from typing import Any

from corpus.model import Document

#: The fields a test document has unless the test gives them.
DEFAULTS = dict(url="u", crawl_date="2026-03-01", raw_digest="0" * 64)


def make_doc(text: str, *, source: str = "s", tier: str = "web", **fields: Any) -> Document:
    """A new document of ``text`` from ``source`` in ``tier``; ``fields``: more of Document's fields (and
    those of DEFAULTS to replace)."""
    return Document.create(text=text, source=source, source_tier=tier, **{**DEFAULTS, **fields})


def with_new_text(doc: Document, text: str, *fields: str) -> Document:
    """A new document of ``text`` (not one derived from ``doc``) with ``doc``'s source, tier, URL, crawl
    date, raw digest and language, and its ``fields``."""
    same = ("source_tier", "url", "crawl_date", "raw_digest", "lang", *fields)
    return Document.create(text=text, source=doc.source, **{f: getattr(doc, f) for f in same})
