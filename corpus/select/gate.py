"""The extract gate: which pages are worth the expensive extractor, decided on first-pass signals.

Two-pass extraction (:mod:`corpus.text.first_pass`) reads every page cheaply, then spends the slow
extractor only on the pages the gate passes. The gate is data in the build config, in the grammar of
a selection's bucket predicates (:func:`corpus.select.buckets.parse_predicate`: ``signal OP literal``
and ``signal IN (...)`` clauses joined by ``AND``) but judged per page in Python, over the names of
:data:`SIGNALS` only and without percentiles (a page cannot see the corpus). A page fails at the first
clause it does not satisfy, which names its reason (``gate_<signal>``); a missing signal never
satisfies a clause, as a NULL never does in a version's SQL. docs/ingest-and-filters.md ("extract").
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass

from corpus.model.errors import UserError
from corpus.select.buckets import Clause, Quantile, parse_predicate

#: every first-pass signal a gate may name, and its type (a string compares only with strings)
SIGNALS: dict[str, type] = {
    "lang": str,  # fastText's language of the first-pass text
    "lang_confidence": float,
    "words": float,  # whitespace-separated words of the first-pass text
    "chars": float,  # characters of the first-pass text
    "lines": float,  # non-empty lines of the first-pass text
}


def text_counts(text: str) -> dict[str, str | float]:
    """The count signals of a text (``words``, ``chars``, ``lines``), as every gate reads them."""
    return {
        "words": float(len(text.split())),
        "chars": float(len(text)),
        "lines": float(sum(1 for line in text.splitlines() if line.strip())),
    }


_OPS = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True)
class Gate:
    """A parsed gate: its clauses in the order they are judged (none: every page passes)."""

    clauses: tuple[Clause, ...] = ()

    @property
    def text(self) -> str:
        """The canonical spelling (what the stage's config records)."""
        return " AND ".join(c.text for c in self.clauses)

    def reads(self, signals: frozenset[str]) -> bool:
        """Whether any clause reads one of ``signals`` (what the first pass must compute for it)."""
        return any(c.column in signals for c in self.clauses)

    def failure(self, signals: Mapping[str, str | float]) -> Clause | None:
        """The first clause ``signals`` does not satisfy, or None when the page passes."""
        for clause in self.clauses:
            if not _holds(clause, signals.get(clause.column)):
                return clause
        return None


def parse_gate(text: str, where: str = "[extract] gate") -> Gate:
    """``text`` as a gate ("" passes everything); a mistake is one line naming the gate (``where``)."""
    if not text.strip():
        return Gate()
    clauses = parse_predicate(text, where)
    for c in clauses:
        kind = SIGNALS.get(c.column)
        if kind is None:
            raise UserError(
                f"{where} names unknown signal {c.column}; first-pass signals: {', '.join(SIGNALS)}"
            )
        values = c.value if isinstance(c.value, tuple) else (c.value,)
        if any(isinstance(v, Quantile) for v in values):
            raise UserError(f"{where}: {c.text}: a page cannot compare with a percentile of the corpus")
        if any(isinstance(v, str) != (kind is str) for v in values):
            raise UserError(f"{where}: {c.text}: {c.column} is a {'string' if kind is str else 'number'}")
    return Gate(clauses)


def _holds(clause: Clause, value: str | float | None) -> bool:
    if value is None:
        return False
    if clause.op == "IN":
        return value in clause.value
    return bool(_OPS[clause.op](value, clause.value))


def gate_reason(clause: Clause) -> str:
    """The filter reason of a page that failed ``clause``."""
    return f"gate_{clause.column}"
