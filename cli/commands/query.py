"""``corpus query BUILD "SQL"``: DuckDB over the per-document metadata table, as the table ``docs``."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from typing import Any

import duckdb

from corpus.model.errors import UserError
from corpus.version.open import open_version
from corpus.version.query import connect


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "query",
        help="run SQL over a build's per-document metadata table (DuckDB; the table is called docs)",
        description="The table docs has one row per stored document (see docs/versions.md for its "
        "columns); on a version directory it has a boolean column selected.",
    )
    p.add_argument("build", type=Path, metavar="BUILD", help="build, snapshot or version directory")
    p.add_argument(
        "sql", metavar="SQL", help='e.g. "SELECT lang, count(*), sum(tokens) FROM docs GROUP BY lang"'
    )
    p.add_argument("--json", action="store_true", help="print a JSON array of row objects")
    p.set_defaults(func=run)


def _plain(value: Any) -> Any:
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return value


def format_table(names: list[str], rows: list[tuple]) -> str:
    """Rows as aligned text columns (numbers right-aligned), a header and a rule."""
    cells = [[("" if v is None else str(_plain(v))) for v in row] for row in rows]
    widths = [max([len(n), *(len(r[i]) for r in cells)]) for i, n in enumerate(names)]
    numeric = [
        all(isinstance(r[i], int | float) or r[i] is None for r in rows) and rows for i in range(len(names))
    ]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    return "\n".join([line(names), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def run(args: argparse.Namespace) -> int:
    con = connect(open_version(args.build))
    try:
        cur = con.execute(args.sql)
    except duckdb.Error as e:
        raise UserError(str(e).splitlines()[0]) from None
    if cur.description is None:
        return 0
    names = [d[0] for d in cur.description]
    rows = cur.fetchall()
    if args.json:
        print(json.dumps([{n: _plain(v) for n, v in zip(names, r, strict=True)} for r in rows], indent=1))
    else:
        print(format_table(names, rows))
    return 0
