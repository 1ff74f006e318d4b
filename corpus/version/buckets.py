"""A selection's buckets by predicate: quantiles resolved over the selected documents, each document's bucket.

The buckets of a shard are disjoint (a document takes the first predicate it satisfies); a tombstone
keeps the buckets as made (:func:`recorded_buckets`). See docs/versions.md ("Buckets by predicate").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from corpus.model.errors import UserError
from corpus.select.buckets import BucketDef, Clause, parse_buckets, predicate_sql, quantile_sql
from corpus.version.open import StoredShard, Version
from corpus.version.query import bits_table

UNBUCKETED = "(unbucketed)"


@dataclass(frozen=True)
class VersionBuckets:
    """A version's buckets by predicate as made: each bucket's quantiles as resolved (column -> {qNN:
    value}), and per shard the bucket of each selected document (its position in ``defs``; -1: not
    selected, or selected and in no bucket)."""

    defs: tuple[BucketDef, ...]
    resolved: tuple[dict[str, dict[str, Any]], ...]
    of_doc: dict[str, np.ndarray]

    def pair(self, shard: str, docs: int, k: int, gone: set[str]) -> np.ndarray:
        """The bits of (shard, bucket ``k``); none of a tombstoned shard."""
        return np.zeros(docs, dtype=bool) if shard in gone else self.of_doc[shard] == k


def _jsonable(value: Any) -> Any:
    """A resolved quantile as the manifest records it (a date as YYYY-MM-DD, which DuckDB compares with
    the column again when bound)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def bucket_error(bucket: BucketDef, e: duckdb.Error) -> UserError:
    """A predicate DuckDB cannot run (a string compared with a number column...), one line naming its bucket."""
    return UserError(f"selection bucket {bucket.name} ({bucket.where}): {str(e).splitlines()[0]}")


#: how a ``qNN`` clause of a bucket is resolved: (bucket, clause) -> the value
Resolver = Callable[[BucketDef, Clause], Any]


def duckdb_resolver(con: duckdb.DuckDBPyConnection) -> Resolver:
    """``quantile_disc`` over the view ``bucket_pool`` of ``con`` (:func:`pool_view`): one process."""

    def resolve(b: BucketDef, c: Clause) -> Any:
        sql, p = quantile_sql(b, c, "bucket_pool")
        try:
            return con.execute(sql, p).fetchall()[0][0]
        except duckdb.Error as e:
            raise bucket_error(b, e) from None

    return resolve


def pool_view(
    con: duckdb.DuckDBPyConnection, shards: tuple[StoredShard, ...], bits: dict[str, np.ndarray]
) -> None:
    """The view ``bucket_pool``: the rows of ``stored`` that ``bits`` selects (what ``qNN`` is taken over)."""
    con.register("bucket_kept", bits_table(shards, bits))
    con.execute(
        'CREATE OR REPLACE VIEW bucket_pool AS SELECT s.* FROM stored s JOIN bucket_kept k USING (shard, "index") '
        "WHERE k.kept"
    )


def resolve_buckets(
    con: duckdb.DuckDBPyConnection | None, defs: tuple[BucketDef, ...], resolve: Resolver
) -> tuple[tuple[dict[str, dict[str, Any]], ...], str, list[Any]]:
    """Each bucket's quantiles resolved in order (``resolve``), and the ``CASE`` arms (with their
    parameters) giving a row the first bucket it satisfies; each predicate is run on ``con`` first (when
    given), so an error names its bucket."""
    resolved: list[dict[str, dict[str, Any]]] = []
    cases, params = [], []
    for k, b in enumerate(defs):
        r: dict[str, dict[str, Any]] = {}
        for c in b.quantiles:
            r.setdefault(c.column, {})[c.value.text] = _jsonable(resolve(b, c))
        resolved.append(r)
        sql, p = predicate_sql(b, r)
        if con is not None:
            try:
                con.execute(f"SELECT count(*) FROM stored WHERE {sql}", p).fetchall()
            except duckdb.Error as e:
                raise bucket_error(b, e) from None
        cases.append(f"WHEN {sql} THEN {k}")
        params += p
    return tuple(resolved), " ".join(cases), params


def assign_buckets(
    con: duckdb.DuckDBPyConnection,
    defs: tuple[BucketDef, ...],
    shards: tuple[StoredShard, ...],
    bits: dict[str, np.ndarray],
    resolve: Resolver | None = None,
) -> tuple[VersionBuckets, dict[str, np.ndarray]]:
    """The buckets of ``bits``' selected documents, and per shard the first bucket whose predicate each
    *stored* document satisfies (-1: none; what the kept table counts as stored per bucket).

    1. Each ``qNN`` is resolved over the selected documents that pass its bucket's other clauses
       (``resolve``; by default ``quantile_disc`` on ``con``; across ranks: hpc_jobs/version/).
    2. One pass over the table assigns every document the first bucket it satisfies (``CASE``: a NULL
       comparison is not true, so it falls through).
    3. A selected document keeps that bucket; an unselected one is in none."""
    if any(b.quantiles for b in defs):
        pool_view(con, shards, bits)
    resolved, cases, params = resolve_buckets(con, defs, resolve or duckdb_resolver(con))
    # one row per shard: its documents' buckets in document order (row i of a shard's table is document i)
    per_shard = con.sql(
        f'SELECT shard, list(CASE {cases} ELSE -1 END ORDER BY "index") AS bucket FROM stored GROUP BY shard',
        params=params,
    ).to_arrow_table()
    found = dict(zip(per_shard.column("shard").to_pylist(), per_shard.column("bucket"), strict=True))
    dtype = np.min_scalar_type(-len(defs))
    match, of_doc = {}, {}
    for s in shards:
        m = found[s.name].values.to_numpy() if s.name in found else np.zeros(0, dtype)
        if m.shape[0] != s.docs:
            raise UserError(f"shard {s.name}: its metadata has {m.shape[0]} rows for {s.docs} documents")
        match[s.name] = m.astype(dtype)
        of_doc[s.name] = np.where(bits[s.name], m, -1).astype(dtype)
    return VersionBuckets(defs, resolved, of_doc), match


def recorded_buckets(version: Version) -> VersionBuckets:
    """The buckets ``version`` was made with, read back from its bitmaps: a new manifest of its selection
    (a tombstone) keeps them as made, since resolving the quantiles again without a deleted shard would
    move documents of the other shards between buckets."""
    if "buckets" not in (version.manifest or {}):
        raise ValueError(
            f"{version.dir or version.base_dir} was not made with buckets by predicate: pass them"
        )
    recorded = version.manifest["buckets"]
    defs = parse_buckets([{"name": b["name"], "where": b["where"]} for b in recorded], str(version.dir))
    dtype = np.min_scalar_type(-len(defs))
    of_doc = {}
    for s in version.live_shards:
        a = np.full(s.docs, -1, dtype=dtype)
        for k, b in enumerate(defs):
            a[version.bucket_selected(s, b.name)] = k
        of_doc[s.name] = a
    return VersionBuckets(defs, tuple(b["resolved"] for b in recorded), of_doc)
