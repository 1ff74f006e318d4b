"""One rank's share of the partitioned version step: its shards' rows judged, and the pure arithmetic of
the global steps (cuts, percentile indexes, sortable keys) that must agree with DuckDB's to the bit.

A rank owns whole shards (:func:`assign_shards`); :func:`judge_rows` runs the row rules on them and
keeps, per row, only what the two global steps need (language and top_fraction scores; the
near-duplicate group and its order; the repository cluster and rank). The exchange itself is in
hpc_jobs/version/ (mpi_kernels below it); nothing here imports MPI. docs/versions.md ("The version
step on N ranks").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from itertools import accumulate

import duckdb
import numpy as np
import pyarrow as pa

from corpus.select.buckets import ident
from corpus.select.selection import AGE_COLUMN, Selection, age_key_sql, group_sql, row_rules_sql
from corpus.version.open import StoredShard
from corpus.version.query import SHARD_AGES, prepare_rules

#: a key's prefix telling a value from NULL: a NULL sorts after every value (DuckDB's NULLS LAST)
_VALUE, _NULL = b"\x00", b"\x01"
#: an int64 as 8 big-endian bytes that sort like the integer
_BIAS = 1 << 63


def assign_shards(docs: Sequence[int], size: int) -> list[tuple[int, ...]]:
    """Each rank's shards (positions in the build's manifest; ``docs``: each shard's documents, from its
    keys, so no rank parses another's entries): contiguous runs of about equal documents. Which rank owns
    a shard changes how much each rank reads, never what the version holds."""
    total = sum(docs) or 1
    before = [0, *accumulate(docs)]
    # a shard goes to the rank whose equal share of the documents holds the shard's middle document
    owners = [min(size - 1, (2 * before[i] + n) * size // (2 * total)) for i, n in enumerate(docs)]
    return [tuple(i for i, o in enumerate(owners) if o == r) for r in range(size)]


@dataclass(frozen=True)
class RankRows:
    """The rows of one rank's live shards in (shard, index) order, with what the global steps read."""

    shard: np.ndarray  #: object: the row's shard name
    index: np.ndarray  #: int64: the row's place in its shard
    passes: np.ndarray  #: bool: the row rules' verdict
    lang: np.ndarray  #: object: str or None
    doc_id: np.ndarray  #: object
    #: per top_fraction score: (values, float64 with NaN where null; not null)
    scores: dict[str, tuple[np.ndarray, np.ndarray]]
    group: np.ndarray  #: object: the near-duplicate group (``GROUP_SQL``), str or None
    age_key: np.ndarray  #: int64: the build-age term (:func:`corpus.select.selection.age_key_sql`)
    representative_key: np.ndarray  #: object: str or None
    repo_cluster: np.ndarray  #: object: str or None
    repo_rank: np.ndarray  #: object: int or None

    def __len__(self) -> int:
        return int(self.index.shape[0])


def _objects(col: pa.ChunkedArray) -> np.ndarray:
    out = np.empty(len(col), dtype=object)
    out[:] = col.to_pylist()
    return out


def judge_rows(
    con: duckdb.DuckDBPyConnection, selection: Selection, cols: list[str], reasons: Counter | None
) -> RankRows:
    """The row rules of ``selection`` over ``con``'s table ``stored`` (one rank's shards; ``cols``:
    the build's columns), and per row what the quantiles and the groups need."""
    table = prepare_rules(con, selection, cols, reasons)
    where, params = row_rules_sql(selection, table)
    age, age_params = age_key_sql(selection)
    scores = sorted({t.score for t in selection.top_fraction})
    sql = (
        f"WITH rows AS (SELECT *, coalesce({where}, FALSE) AS __passes FROM {table}), "
        f"aged AS (SELECT r.*, coalesce(a.build_age, 0) AS {AGE_COLUMN} FROM rows r LEFT JOIN "
        f"(SELECT shard, max(build_age) AS build_age FROM {SHARD_AGES} GROUP BY shard) a ON a.shard = r.shard) "
        f'SELECT shard, "index", __passes, lang, doc_id, {group_sql(selection)} AS __group, '
        f"({age})::BIGINT AS __age, "
        "representative_key, repo_cluster_id, repo_rank"
        + "".join(f", {ident(c)}::DOUBLE AS __score{i}" for i, c in enumerate(scores))
        + ' FROM aged ORDER BY shard, "index"'
    )
    t = con.execute(sql, params + age_params).to_arrow_table()
    return RankRows(
        shard=_objects(t.column("shard")),
        index=t.column("index").to_numpy(),
        passes=t.column("__passes").to_numpy(zero_copy_only=False).astype(bool),
        lang=_objects(t.column("lang")),
        doc_id=_objects(t.column("doc_id")),
        scores={
            c: (
                t.column(f"__score{i}").fill_null(math.nan).to_numpy(),
                t.column(f"__score{i}").is_valid().to_numpy(zero_copy_only=False),
            )
            for i, c in enumerate(scores)
        },
        group=_objects(t.column("__group")),
        age_key=t.column("__age").to_numpy(),
        representative_key=_objects(t.column("representative_key")),
        repo_cluster=_objects(t.column("repo_cluster_id")),
        repo_rank=_objects(t.column("repo_rank")),
    )


def no_rows(selection: Selection) -> RankRows:
    """A rank that owns no live shard: no rows, of the same shapes."""
    empty = np.empty(0, dtype=object)
    return RankRows(
        shard=empty,
        index=np.empty(0, np.int64),
        passes=np.empty(0, bool),
        lang=empty,
        doc_id=empty,
        scores={t.score: (np.empty(0), np.empty(0, bool)) for t in selection.top_fraction},
        group=empty,
        age_key=np.empty(0, np.int64),
        representative_key=empty,
        repo_cluster=empty,
        repo_rank=empty,
    )


def rank_bits(rows: RankRows, selected: np.ndarray, shards: tuple[StoredShard, ...]) -> dict[str, np.ndarray]:
    """Per shard of ``shards`` (one rank's live shards), one bool per document."""
    out = {}
    for s in shards:
        mask = rows.shard == s.name
        bits = np.zeros(s.docs, dtype=bool)
        bits[rows.index[mask]] = selected[mask]
        out[s.name] = bits
    return out


def top_cut(share: float, n: int) -> int:
    """How many of a language's ``n`` rows a top_fraction keeps: DuckDB's ``round(share * n)`` (half
    away from zero, on the double product)."""
    x = share * n
    whole = int(x)
    return whole + (1 if x - whole >= 0.5 else 0)


def quantile_disc_index(n: int, q: float) -> int:
    """The position (0-based, ascending) of DuckDB's ``quantile_disc(col, q)`` among ``n`` non-null
    values: the fraction taken as a decimal (DuckDB's bound double is exact to 15 places here), then
    ``max(1, n - floor(n - n * q)) - 1`` in integers (a test checks it against DuckDB)."""
    scale = 10**15
    integral = int(Decimal(repr(q)).quantize(Decimal(1).scaleb(-15), rounding=ROUND_HALF_EVEN) * scale)
    floored = (n * scale - n * integral) // scale
    return max(1, n - floored) - 1


def _text(value: str | None) -> bytes:
    """A string (no NUL inside) as bytes that sort like it and end where it ends; NULL last."""
    return _NULL if value is None else _VALUE + value.encode() + b"\x00"


def _int(value: int | None) -> bytes:
    return _NULL if value is None else _VALUE + (int(value) + _BIAS).to_bytes(8, "big")


def group_key(group: str | None, order: bytes) -> bytes:
    """A record of a group exchange: ``<u32 length><group><order>``, so that records sort by group
    (contiguous) and within a group by ``order``; :func:`group_of` reads the group back."""
    g = _text(group)
    return len(g).to_bytes(4, "big") + g + order


def group_of(key: bytes) -> bytes:
    return key[4 : 4 + int.from_bytes(key[:4], "big")]


def representative_order(rows: RankRows, i: int) -> bytes:
    """Row ``i``'s place in its near-duplicate group as sortable bytes: the build-age term, then
    ``representative_key``, then (shard, index): ``selection_sql``'s ``row_number()`` order."""
    return (
        _int(int(rows.age_key[i]))
        + _text(rows.representative_key[i])
        + _text(rows.shard[i])
        + _int(int(rows.index[i]))
    )


def repo_order(rows: RankRows, i: int) -> bytes:
    """Row ``i``'s repository rank as sortable bytes (``dense_rank() … ORDER BY repo_rank``)."""
    return _int(rows.repo_rank[i])


def tie_keys(rows: RankRows, where: np.ndarray) -> np.ndarray:
    """(doc_id, shard, index) of the rows ``where`` as sortable bytes: how a top_fraction orders rows
    of one score."""
    out = np.empty(int(where.sum()), dtype=object)
    out[:] = [
        _text(rows.doc_id[i]) + _text(rows.shard[i]) + _int(int(rows.index[i])) for i in np.flatnonzero(where)
    ]
    return out
