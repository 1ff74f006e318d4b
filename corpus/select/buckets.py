"""Buckets by predicate: a version's named, disjoint groups of its selected documents.

The training mixture's unit is a bucket; a version may name buckets by predicates over the metadata
table (:mod:`corpus.formats.metadata`) instead of the build's physical ones, without a rebuild. A
predicate is data, not SQL: ``column OP literal`` or ``column IN (...)`` clauses joined by ``AND``,
a literal a number, a quoted string or ``qNN`` (a percentile resolved when the version is made); the
SQL made of it quotes checked column names and binds every value. A selected document belongs to the
first bucket whose predicate it satisfies, or to none; a comparison with NULL is never true. See
docs/versions.md ("Buckets by predicate").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from corpus.model.errors import UserError

NAME = re.compile(r"[a-z0-9_]+")
OPS = ("=", "!=", "<", "<=", ">", ">=")
_TOKEN = re.compile(
    r"\s*(?:(?P<string>'(?:[^']|'')*')"
    r"|(?P<quantile>q\d+(?:\.\d+)?)(?![A-Za-z0-9_.])"
    r"|(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(?![A-Za-z0-9_.])"
    r"|(?P<op><=|>=|!=|=|<|>)"
    r"|(?P<punct>[(),])"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*))",
    re.ASCII,  # the grammar's digits and spaces, not every script's
)
_REST_IS_SPACE = re.compile(r"\s*\Z", re.ASCII)
#: a predicate longer than this is refused (its parse and its error line stay small)
MAX_PREDICATE_CHARS = 65_536
#: an integer literal's digits at most (a signed 64-bit value: what DuckDB compares it as)
_MAX_INT_DIGITS = 19


@dataclass(frozen=True)
class Quantile:
    """``qNN``: the NN-th percentile (0..100) of the clause's column."""

    percent: float

    @property
    def text(self) -> str:
        """Positional (``q0.00001``, never ``q1e-05``), so the stored predicate parses back."""
        return "q" + (
            str(int(self.percent)) if self.percent.is_integer() else format(Decimal(repr(self.percent)), "f")
        )


Literal = int | float | str


@dataclass(frozen=True)
class Clause:
    """``column op value``; for ``IN`` the value is a tuple of literals."""

    column: str
    op: str
    value: Literal | Quantile | tuple[Literal, ...]

    @property
    def text(self) -> str:
        if self.op == "IN":
            return f"{self.column} IN ({', '.join(_literal_text(v) for v in self.value)})"
        return f"{self.column} {self.op} {_literal_text(self.value)}"


@dataclass(frozen=True)
class BucketDef:
    """A named bucket: its clauses (none: the rest, every selected document no earlier bucket took)."""

    name: str
    clauses: tuple[Clause, ...] = ()

    @property
    def where(self) -> str | None:
        """The canonical predicate text (what a version's id covers), or None for the rest."""
        return " AND ".join(c.text for c in self.clauses) or None

    @property
    def quantiles(self) -> tuple[Clause, ...]:
        return tuple(c for c in self.clauses if isinstance(c.value, Quantile))

    def canonical(self) -> dict[str, Any]:
        return {"name": self.name, "where": self.where}


def _literal_text(v: Literal | Quantile) -> str:
    if isinstance(v, Quantile):
        return v.text
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


def _err(where: str, msg: str) -> UserError:
    return UserError(f"selection {where}: {msg}")


def parse_buckets(items: Any, where: str = "<inline>") -> tuple[BucketDef, ...]:
    """The ``[[buckets]]`` array of a selection; every mistake is one line naming the bucket."""
    if not isinstance(items, list) or not all(isinstance(t, dict) for t in items):
        raise _err(where, "buckets must be an array of tables [[buckets]] with name and where")
    out: list[BucketDef] = []
    for i, t in enumerate(items):
        name = t.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise _err(where, f"buckets[{i}].name must match [a-z0-9_]+, not {name!r}")
        extra = sorted(set(t) - {"name", "where"})
        if extra:
            raise _err(where, f"bucket {name} has unknown key(s) {', '.join(extra)}; known: name, where")
        if any(b.name == name for b in out):
            raise _err(where, f"bucket {name} is defined twice")
        if out and out[-1].where is None:
            raise _err(where, f"bucket {out[-1].name} has no where (the rest): only the last bucket may")
        if t.get("where") is None:  # absent (None: a version's recorded selection read back)
            out.append(BucketDef(name))
            continue
        if not isinstance(t["where"], str) or not t["where"].strip():
            raise _err(where, f"bucket {name}: where must be a predicate (leave it out for the rest)")
        out.append(BucketDef(name, parse_predicate(t["where"], f"{where}: bucket {name}")))
    return tuple(out)


def _tokens(text: str, where: str) -> list[tuple[str, str, int]]:
    """(kind, text, character) of every token of ``text``."""
    if len(text) > MAX_PREDICATE_CHARS:
        raise UserError(
            f"selection {where}: the predicate has {len(text):,} characters, at most {MAX_PREDICATE_CHARS:,}"
        )
    out, pos = [], 0
    while pos < len(text):
        if _REST_IS_SPACE.match(text, pos):
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            at = pos + len(text[pos : pos + 200]) - len(text[pos : pos + 200].lstrip())
            bad = text[at : at + 200].split()[0][:40]
            raise UserError(f"selection {where}: unexpected {bad!r} at character {at}")
        kind = m.lastgroup
        out.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    return out


def parse_predicate(text: str, where: str) -> tuple[Clause, ...]:
    """``column OP literal [AND ...]`` as clauses; ``where`` names the bucket in errors."""
    toks = _tokens(text, where)
    k = 0

    def fail(expected: str) -> UserError:
        if k >= len(toks):
            return UserError(f"selection {where}: expected {expected} at the end of the predicate")
        return UserError(
            f"selection {where}: expected {expected}, not {toks[k][1][:40]!r} at character {toks[k][2]}"
        )

    def literal(quantile: bool) -> Literal | Quantile:
        nonlocal k
        if k >= len(toks) or toks[k][0] not in ("string", "number", "quantile"):
            raise fail("a number, a 'string' or qNN" if quantile else "a number or a 'string'")
        kind, tok, _ = toks[k]
        if kind == "quantile" and not quantile:
            raise fail("a number or a 'string' (no quantile inside IN)")
        k += 1
        if kind == "string":
            return tok[1:-1].replace("''", "'")
        if kind == "quantile":
            percent = float(tok[1:])
            if percent > 100:
                k -= 1
                raise fail("a percentile q0 .. q100")
            return Quantile(percent)
        if not any(c in tok for c in ".eE"):
            if len(tok.lstrip("+-")) > _MAX_INT_DIGITS or not -(2**63) <= int(tok) < 2**63:
                k -= 1
                raise fail("an integer within 64 bits")
            return int(tok)
        value = float(tok)
        if not math.isfinite(value):
            k -= 1
            raise fail("a finite number")
        return value

    def expect(kind: str, text_: str | None = None) -> str:
        nonlocal k
        if k >= len(toks) or toks[k][0] != kind or (text_ is not None and toks[k][1].upper() != text_):
            raise fail(text_ or {"word": "a column", "op": "an operator"}.get(kind, kind))
        k += 1
        return toks[k - 1][1]

    clauses: list[Clause] = []
    while True:
        if k < len(toks) and toks[k][0] == "quantile":  # a column may look like one
            toks[k] = ("word", *toks[k][1:])
        column = expect("word")
        if k < len(toks) and toks[k][0] == "word" and toks[k][1].upper() == "IN":
            k += 1
            expect("punct", "(")
            values = [literal(False)]
            while k < len(toks) and toks[k][1] == ",":
                k += 1
                values.append(literal(False))
            expect("punct", ")")
            clauses.append(Clause(column, "IN", tuple(values)))
        elif k < len(toks) and toks[k][0] == "op":
            op = expect("op")
            clauses.append(Clause(column, op, literal(True)))
        else:
            raise fail("an operator (= != < <= > >=) or IN")
        if k == len(toks):
            return tuple(clauses)
        expect("word", "AND")


def check_bucket_columns(buckets: Sequence[BucketDef], columns: Sequence[str]) -> None:
    """Refuse a bucket whose predicate names a column the table does not have, listing the ones it has."""
    known = set(columns)
    for b in buckets:
        for c in b.clauses:
            if c.column not in known:
                raise UserError(
                    f"selection bucket {b.name} names unknown column {c.column}; known: {', '.join(sorted(known))}"
                )


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def clause_sql(clause: Clause, resolved: Mapping[str, Any] | None = None) -> tuple[str, list[Any]]:
    """One clause as SQL and its parameters; a quantile is its value in ``resolved`` (by its text).
    DuckDB casts a bound string to the column's type (a date) when it compares them."""
    col = ident(clause.column)
    if clause.op == "IN":
        return f"{col} IN ({', '.join('?' for _ in clause.value)})", list(clause.value)
    value = resolved[clause.value.text] if isinstance(clause.value, Quantile) else clause.value
    return f"{col} {clause.op} ?", [value]


def predicate_sql(bucket: BucketDef, resolved: Mapping[str, Mapping[str, Any]]) -> tuple[str, list[Any]]:
    """The bucket's predicate as SQL (``TRUE`` for the rest); ``resolved``: column -> {qNN: value}."""
    parts, params = [], []
    for c in bucket.clauses:
        sql, p = clause_sql(c, resolved.get(c.column, {}))
        parts.append(sql)
        params += p
    return " AND ".join(parts) or "TRUE", params


def _other_clauses_sql(bucket: BucketDef) -> tuple[str, list[Any]]:
    """The bucket's non-quantile clauses joined by AND (TRUE: none), and their parameters."""
    conds, params = [], []
    for c in bucket.clauses:
        if not isinstance(c.value, Quantile):
            sql, p = clause_sql(c)
            conds.append(sql)
            params += p
    return " AND ".join(conds) or "TRUE", params


def quantile_sql(bucket: BucketDef, clause: Clause, table: str) -> tuple[str, list[Any]]:
    """The query resolving one ``qNN`` clause: the percentile (``quantile_disc``: a value the column has,
    the same on every run) of the column over ``table``'s rows that pass the bucket's other, non-quantile
    clauses."""
    where, params = _other_clauses_sql(bucket)
    return (
        f"SELECT quantile_disc({ident(clause.column)}, ?) FROM {table} WHERE {where}",
        [clause.value.percent / 100, *params],
    )


def quantile_values_sql(bucket: BucketDef, clause: Clause, table: str) -> tuple[str, list[Any]]:
    """The values :func:`quantile_sql` takes its percentile of (non-null, ascending): what one rank of
    the partitioned version step contributes to the percentile resolved across ranks."""
    where, params = _other_clauses_sql(bucket)
    col = ident(clause.column)
    return f"SELECT {col} FROM {table} WHERE {where} AND {col} IS NOT NULL ORDER BY {col}", params
