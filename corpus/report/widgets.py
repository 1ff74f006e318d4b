"""The card's HTML pieces shared by every section: numbers, percentages, tables, notes, images.

Each returns a fragment of the page with every value escaped; the styles they name (``.mono``,
``.note``, ``td.l``) are the card's CSS (:data:`corpus.report.html.CSS`). See docs/report.md.
"""

from __future__ import annotations

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
