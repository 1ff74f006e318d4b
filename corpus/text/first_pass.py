"""The first pass of two-pass extraction: what every page costs, kept cheap.

resiliparse's main-content extractor (C++, 14-20 times trafilatura's throughput on the shared
crawls), the counts that need only its text, and fastText's language where it is needed. The gate
(:mod:`corpus.select.gate`) decides on these signals whether a page is worth trafilatura; with
``extractor = "resiliparse"`` the first-pass text is the page's text. Pure functions of the page;
they run in the extract worker, under its time and memory limits. docs/ingest-and-filters.md
("extract").
"""

from __future__ import annotations

from dataclasses import dataclass

from corpus.select.gate import text_counts
from corpus.signals.langid import identify_language


@dataclass(frozen=True)
class FirstPass:
    """A page's first-pass text and the signals a gate may read (:data:`corpus.select.gate.SIGNALS`)."""

    text: str
    signals: dict[str, str | float]


def resiliparse_text(html: str) -> str:
    """The page's main content as plain text (navigation, headers and footers left out)."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    return extract_plain_text(HTMLTree.parse(html), main_content=True)


#: the signals that cost a language identification (a third of the first pass, on the shared crawls)
LANGUAGE_SIGNALS = frozenset({"lang", "lang_confidence"})


def first_pass(html: str, language: bool = True) -> FirstPass:
    """The page's first pass; its language only when ``language`` (a gate that reads none needs the
    language of the pages it rejects only: :func:`with_language`)."""
    text = resiliparse_text(html)
    signals = text_counts(text)
    return with_language(FirstPass(text, signals)) if language else FirstPass(text, signals)


def with_language(first: FirstPass) -> FirstPass:
    """``first`` with its text's language (``lang``, ``lang_confidence``)."""
    if "lang" in first.signals:
        return first
    guess = identify_language(first.text)
    return FirstPass(first.text, first.signals | {"lang": guess.lang, "lang_confidence": guess.confidence})
