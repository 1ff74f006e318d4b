"""The card's HTML pieces shared by every section: numbers, percentages, tables, notes, images.

Each returns a fragment of the page with every value escaped; the styles they name (``.mono``,
``.note``, ``td.l``) are the card's CSS (:data:`corpus.report.html.CSS`). See docs/report.md.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any


def number(v: Any) -> str:
    """A count with thousands separators, a float to 4 significant digits, "–" for a missing value."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return escape(str(v))


def percent(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}%"


def html_table(head: list[str], rows: list[list[Any]], left: int = 1) -> str:
    """A table of cells already rendered to HTML; the first ``left`` columns aligned left."""
    th = "".join(f'<th class="{"l" if i < left else ""}">{escape(h)}</th>' for i, h in enumerate(head))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>' for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{th}</tr>{body}</table>"


def mono(text: str, limit: int = 0) -> str:
    """Monospace; with ``limit``, shortened with the whole value in the tooltip."""
    short = text if not limit or len(text) <= limit else text[:limit] + "…"
    return f'<span class="mono" title="{escape(text)}">{escape(short)}</span>'


def img(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{escape(alt)}">'


def note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>'


_SECTION = re.compile(r"<h2>(.*?)</h2>", re.S)


def with_contents(body: str) -> tuple[str, str]:
    """A table of contents of ``body``'s sections (its ``<h2>`` headings, in order) and the body with
    an anchor on each: a long card is read by jumping, not scrolling."""
    seen: dict[str, int] = {}
    entries: list[str] = []

    def anchor(m: re.Match) -> str:
        title = re.sub(r"<[^>]+>", "", m.group(1)).strip()
        slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"
        seen[slug] = seen.get(slug, 0) + 1
        slug = slug if seen[slug] == 1 else f"{slug}-{seen[slug]}"
        entries.append(f'<li><a href="#{slug}">{title}</a></li>')
        return f'<h2 id="{slug}">{m.group(1)}</h2>'

    body = _SECTION.sub(anchor, body)
    return f'<nav class="toc"><b>Contents</b><ol>{"".join(entries)}</ol></nav>', body
