"""Versions: a selection of a build's stored documents, made from the metadata table alone.

A version directory holds ``manifest.json`` (format ``corpus-version/1``) and one bitmap per shard
(``selection/<shard>.bits``: bit i, little-endian within each byte, says whether document i of the
shard is selected). Its id, ``snapshot_id``, is the digest of everything in the manifest but
``run_info`` (where the base lives, who made it): the base snapshot's id, the selection's canonical
form, and per shard its name, the sha256 of its tokens and of its metadata, and the bitmap's sha256 and
counts. So the same selection of the same build gives the same id wherever the directories are.

A version never copies or changes the build: it points at the base snapshot directory (recorded in
``run_info.base``) and refuses to open when a shard there no longer has the digest it was selected
from. The build's own snapshot (``BUILD/snapshot/``) is the version that selects everything.

Why bitmaps: the loader's sampler works from sizes alone, so a version records per shard the selected
documents and tokens; the bits say which, one bit a document (125 MB for 10⁹ documents).

A selection with buckets by predicate (:mod:`corpus.select.buckets`) adds, per shard and bucket, a bitmap
``selection/<shard>.<bucket>.bits`` (a subset of the shard's selection; the buckets of a shard are
disjoint) with its documents and tokens, and the manifest records each bucket's canonical predicate
with its quantiles as resolved, and the selected documents no bucket took (``unbucketed_docs`` and
``unbucketed_tokens``): the loader streams only bucketed documents, and nobody loses data silently.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from corpus.formats.docshard import atomic_write_bytes
from corpus.model import SnapshotManifest
from corpus.model.digest import canonical_json, json_digest, sha256_hex
from corpus.model.errors import UserError
from corpus.model.layout import BASE_CANDIDATES, MANIFEST, SNAPSHOT_DIR
from corpus.select.buckets import BucketDef, parse_buckets, predicate_sql, quantile_sql
from corpus.select.policy import PolicyConfig, decide_rows, missing_values
from corpus.select.provenance import COPY_COLUMNS
from corpus.select.selection import Selection, check_columns, selection_sql

VERSION_FORMAT = "corpus-version/1"
SELECTION_DIR = "selection"
BITS_SUFFIX = ".bits"


def pack_bits(selected: np.ndarray) -> bytes:
    return np.packbits(np.asarray(selected, dtype=bool), bitorder="little").tobytes()


def unpack_bits(data: bytes, n: int) -> np.ndarray:
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), count=n, bitorder="little")
    if bits.shape[0] != n:
        raise ValueError(f"bitmap holds {len(data) * 8} bits, the shard has {n} documents")
    return bits.astype(bool)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"{path.parent} is neither a build, a snapshot nor a version (no {path.name})"
        ) from None
    except ValueError as e:
        raise UserError(f"{path}: not JSON: {e}") from None


@dataclass(frozen=True)
class ShardRef:
    """One shard as a table reader needs it."""

    name: str
    bucket: str
    docs: int
    tokens: int
    sha256: str
    metadata: Path
    meta: Path
    #: how many builds back the shard was stored (:func:`build_age`; 0: the build's own shard)
    age: int = 0

    @property
    def metadata_sha256(self) -> str:
        """From the shard's ``.meta.json`` (written by write_shards, vouched for by the manifest)."""
        return json.loads(self.meta.read_text())["metadata_sha256"]


@dataclass(frozen=True)
class Version:
    """An opened build snapshot or version: the base snapshot, its shards, and the selection bits
    (``None`` for the base itself, which selects everything)."""

    base_dir: Path
    base: SnapshotManifest
    shards: tuple[ShardRef, ...]
    manifest: dict[str, Any] | None = None
    dir: Path | None = None

    @property
    def snapshot_id(self) -> str:
        return self.manifest["snapshot_id"] if self.manifest else self.base.snapshot_id

    @property
    def tombstones(self) -> dict[str, dict[str, Any]]:
        """Shards physically deleted since the build, by name: their files may be gone."""
        return {t["name"]: t for t in (self.manifest or {}).get("tombstones", [])}

    @property
    def live_shards(self) -> tuple[ShardRef, ...]:
        """The shards whose files are still there (not tombstoned)."""
        return tuple(s for s in self.shards if s.name not in self.tombstones)

    @property
    def bucket_names(self) -> tuple[str, ...]:
        """The buckets by predicate the version defines, in order; none: the build's physical buckets."""
        return tuple(b["name"] for b in (self.manifest or {}).get("buckets", []))

    def _entry(self, name: str) -> dict[str, Any]:
        return next(s for s in self.manifest["shards"] if s["name"] == name)

    def _bitmap(self, shard: ShardRef, entry: dict[str, Any], what: str) -> np.ndarray:
        data = (self.dir / entry["bitmap"]).read_bytes()
        if sha256_hex(data) != entry["bitmap_sha256"]:
            raise UserError(f"version {self.dir}: bitmap of {what} does not match its digest")
        return unpack_bits(data, shard.docs)

    def selected(self, shard: ShardRef) -> np.ndarray:
        if self.manifest is None:
            return np.ones(shard.docs, dtype=bool)
        if shard.name in self.tombstones:
            return np.zeros(shard.docs, dtype=bool)
        return self._bitmap(shard, self._entry(shard.name), f"shard {shard.name}")

    def bucket_selected(self, shard: ShardRef, bucket: str) -> np.ndarray:
        """The selected documents of ``shard`` in predicate bucket ``bucket`` (one bool per document)."""
        if shard.name in self.tombstones:
            return np.zeros(shard.docs, dtype=bool)
        entry = self._entry(shard.name)["buckets"][bucket]
        return self._bitmap(shard, entry, f"shard {shard.name} bucket {bucket}")

    def bucket_counts(self) -> Iterator[tuple[ShardRef, str, int, int]]:
        """(shard, bucket, docs, tokens) of every (shard, predicate bucket) pair, shard-major, buckets in
        the order defined (empty pairs included), as the manifest records them."""
        by_name = {s["name"]: s for s in self.manifest["shards"]}
        for s in self.shards:
            for b in self.bucket_names:
                c = by_name[s.name]["buckets"][b]
                yield s, b, c["docs"], c["tokens"]

    def selected_counts(self) -> Iterator[tuple[ShardRef, int, int]]:
        """(shard, selected docs, selected tokens) as the manifest records them."""
        if self.manifest is None:
            for s in self.shards:
                yield s, s.docs, s.tokens
            return
        by_name = {s["name"]: s for s in self.manifest["shards"]}
        for s in self.shards:
            yield s, by_name[s.name]["selected_docs"], by_name[s.name]["selected_tokens"]


def build_age(path: str) -> int:
    """How many builds back a shard of a candidates (or snapshot) manifest was stored: the number of
    leading ``base/`` components of its listed path (a delta's candidates list its base's shards through
    their ``base`` link, a base's base's through ``base/base/``: :func:`corpus.snapshot.inherit_base`).
    0 for the build's own shards, so every shard of a full build. A fact of the manifest (its relative
    paths, which its id digests), never of where the builds lie."""
    parts = PurePosixPath(path).parts
    age = 0
    while age < len(parts) - 1 and parts[age] == BASE_CANDIDATES:
        age += 1
    return age


def _shard_refs(snap_dir: Path, m: SnapshotManifest) -> tuple[ShardRef, ...]:
    refs = []
    for s in m.shards:
        name = Path(s.path).name.removesuffix(".bin")
        if "metadata" not in s.files:
            raise UserError(
                f"snapshot {m.snapshot_id} has no metadata table (shard {name}): it was built before "
                f"write_shards wrote one; rebuild it to query or select from it"
            )
        refs.append(
            ShardRef(
                name,
                s.bucket,
                s.docs,
                s.tokens,
                s.sha256,
                snap_dir / s.files["metadata"],
                snap_dir / s.files["meta"],
                build_age(s.path),
            )
        )
    return tuple(refs)


def is_version(ref: Path) -> bool:
    """Whether ``ref`` is a version directory (or its manifest), as ``corpus version`` writes them, or
    a build directory (whose ``snapshot/`` is its default version)."""
    ref = Path(ref)
    paths = [ref] if ref.name == MANIFEST else [ref / MANIFEST, ref / SNAPSHOT_DIR / MANIFEST]
    for path in paths:
        if path.is_file():
            try:
                return json.loads(path.read_text()).get("format") == VERSION_FORMAT
            except (OSError, ValueError, AttributeError):
                return False
    return False


def open_version(ref: Path) -> Version:
    """A build directory (its ``snapshot/``), a snapshot directory or a version directory."""
    ref = Path(ref)
    for candidate in (ref / MANIFEST, ref / SNAPSHOT_DIR / MANIFEST):
        if candidate.is_file():
            data = _read_json(candidate)
            break
    else:
        raise UserError(f"{ref} is neither a build, a snapshot nor a version (no {MANIFEST})")
    if data.get("format") == VERSION_FORMAT:
        vdir = candidate.parent
        digested = {k: v for k, v in data.items() if k not in ("snapshot_id", "run_info")}
        if json_digest(digested) != data.get("snapshot_id"):
            raise UserError(f"version {vdir}: manifest does not match its id {data.get('snapshot_id')}")
        base_dir = Path(data["run_info"]["base"])
        if not base_dir.is_absolute():
            base_dir = (vdir / base_dir).resolve()
        if not (base_dir / MANIFEST).is_file():
            raise UserError(f"version {vdir}: its build's snapshot is not at {base_dir} (moved or deleted)")
        base = _open_base(base_dir)
        refs = _shard_refs(base_dir, base)
        _check_shards(vdir, data, refs)
        if base.snapshot_id != data["base_snapshot_id"]:
            raise UserError(
                f"version {vdir}: its build at {base_dir} has changed (snapshot {base.snapshot_id}, "
                f"the version was made from {data['base_snapshot_id']})"
            )
        return Version(base_dir, base, refs, data, vdir)
    base = _open_base(candidate.parent)
    return Version(candidate.parent, base, _shard_refs(candidate.parent, base))


def _open_base(snap_dir: Path) -> SnapshotManifest:
    try:
        return SnapshotManifest.from_dict(_read_json(snap_dir / MANIFEST))
    except (KeyError, ValueError) as e:
        raise UserError(f"{snap_dir / MANIFEST}: {e}") from None


def _check_shards(vdir: Path, data: dict[str, Any], refs: tuple[ShardRef, ...]) -> None:
    """Refuse a version whose build's shards are not the ones it selected from (moved or changed)."""
    have = {r.name: r for r in refs}
    gone = {t["name"] for t in data.get("tombstones", [])}
    for s in data["shards"]:
        if s["name"] in gone:
            continue
        r = have.get(s["name"])
        if r is None:
            raise UserError(f"version {vdir}: shard {s['name']} is not in its build any more")
        if (r.sha256, r.metadata_sha256) != (s["sha256"], s["metadata_sha256"]):
            raise UserError(f"version {vdir}: shard {s['name']} of its build has changed (digests differ)")
        if not r.metadata.is_file():
            raise UserError(f"version {vdir}: shard {s['name']}'s metadata {r.metadata} is missing")


#: the table a connection holds besides ``stored``: (shard, build_age) of every shard (:func:`build_age`)
SHARD_AGES = "shard_ages"


def connect(version: Version) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the table ``docs`` (one row per stored document; on a version, with a
    boolean ``selected``) and ``shard_ages`` (each shard's build age: what keeps a delta's selection
    keep-first). Files are read where they lie, never loaded whole."""
    con = duckdb.connect()
    files = [str(s.metadata) for s in version.live_shards]
    if not files:
        raise UserError(f"snapshot {version.snapshot_id} has no shards")
    con.read_parquet(files, union_by_name=True).create_view("stored")
    _create_shard_ages(con, {s.name: s.age for s in version.shards})
    copies = [
        str(version.base_dir / p["path"])
        for p in version.base.extra.get("artifacts", {}).get("copies", {}).get("parts", [])
    ]
    if copies:
        con.read_json(copies, format="newline_delimited", columns=COPY_COLUMNS).create_view("copies")
    if version.manifest is None:
        con.execute("CREATE VIEW docs AS SELECT * FROM stored")
    else:
        bits = pa.table(
            {
                "shard": _shard_column(version.live_shards),
                "index": pa.array(
                    np.concatenate([np.arange(s.docs) for s in version.live_shards]), pa.int64()
                ),
                "selected": pa.array(np.concatenate([version.selected(s) for s in version.live_shards])),
            }
        )
        con.register("selection_bits", bits)
        con.execute(
            'CREATE VIEW docs AS SELECT stored.*, b.selected FROM stored JOIN selection_bits b USING (shard, "index")'
        )
    return con


def _create_shard_ages(con: duckdb.DuckDBPyConnection, ages: dict[str, int]) -> None:
    con.execute(
        f"CREATE OR REPLACE TABLE {SHARD_AGES} (shard VARCHAR PRIMARY KEY, build_age INTEGER NOT NULL)"
    )
    if ages:
        con.executemany(f"INSERT INTO {SHARD_AGES} VALUES (?, ?)", sorted(ages.items()))


def columns(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.execute("DESCRIBE stored").fetchall()]


def _shard_column(shards: tuple[ShardRef, ...]) -> pa.Array:
    """Each document's shard name, dictionary-encoded: 4 bytes a document, not a Python string each."""
    codes = np.repeat(np.arange(len(shards), dtype=np.int32), [s.docs for s in shards])
    return pa.DictionaryArray.from_arrays(pa.array(codes), pa.array([s.name for s in shards], pa.string()))


def _bits_table(
    shards: tuple[ShardRef, ...], bits: dict[str, np.ndarray], **more: dict[str, np.ndarray]
) -> pa.Table:
    """(shard, index, kept, and one column per ``more``) for every document of ``shards``: what a query
    joins the table ``stored`` with."""
    columns_ = {
        "shard": _shard_column(shards),
        "index": pa.array(np.concatenate([np.arange(s.docs) for s in shards]), pa.int64()),
        "kept": pa.array(np.concatenate([bits[s.name] for s in shards])),
    }
    for name, per_shard in more.items():
        columns_[name] = pa.array(np.concatenate([per_shard[s.name] for s in shards]))
    return pa.table(columns_)


def evaluate(
    version: Version, selection: Selection, policy_reasons: Counter | None = None
) -> dict[str, np.ndarray]:
    """The selected bits of every shard of the build under ``selection`` (a version's own selection is
    not applied first: a version is always a selection of the build, never of another version)."""
    base = Version(version.base_dir, version.base, version.live_shards)
    return select_rows(connect(base), selection, {s.name: s.docs for s in base.shards}, policy_reasons)


def select_rows(
    con: duckdb.DuckDBPyConnection,
    selection: Selection,
    docs: dict[str, int],
    policy_reasons: Counter | None = None,
) -> dict[str, np.ndarray]:
    """Run ``selection`` over the table ``stored`` of ``con``: per shard (``docs``: its document
    count), one bool per document. With a policy, ``policy_reasons`` (when given) is filled with the
    number of stored documents the policy rejects, by the first check each fails. Each shard's build
    age (keep-first within a near-duplicate group) is read from the table ``shard_ages`` that
    :func:`connect` makes; on a connection without one, every shard is the build's own (age 0)."""
    cols = columns(con)
    check_columns(selection, cols)
    if not con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'copies'").fetchall()[0][0]:
        empty = ", ".join(f"NULL::{t} AS {c}" for c, t in COPY_COLUMNS.items())
        con.execute(f"CREATE VIEW copies AS SELECT {empty} WHERE FALSE")  # a build without exact copies
    if not con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [SHARD_AGES]
    ).fetchall()[0][0]:
        _create_shard_ages(con, {})  # a table not made by connect(): every shard its build's own (age 0)
    table = "stored"
    if selection.policy is not None:
        con.register("policy_verdicts", policy_verdicts(con, selection.policy, cols, policy_reasons))
        con.execute(
            "CREATE OR REPLACE VIEW judged AS SELECT stored.*, v.policy_pass FROM stored "
            'JOIN policy_verdicts v USING (shard, "index")'
        )
        table = "judged"
    # a full build (every shard age 0) needs no age order: the query skips its join
    aged = con.execute(f"SELECT coalesce(max(build_age), 0) > 0 FROM {SHARD_AGES}").fetchall()[0][0]
    sql, params = selection_sql(selection, table, SHARD_AGES if aged else None)
    table = con.execute(sql, params).fetchnumpy()
    shard_col, index_col = table["shard"], table["index"]
    sel_col = table["selected"].astype(bool)
    out: dict[str, np.ndarray] = {}
    for name, n in sorted(docs.items()):
        mask = shard_col == name
        bits = np.zeros(n, dtype=bool)
        bits[index_col[mask]] = sel_col[mask]
        out[name] = bits
    return out


#: rows the policy judges at a time (a batch of the table in memory, never the table)
POLICY_BATCH_ROWS = 65_536


def policy_verdicts(
    con: duckdb.DuckDBPyConnection, policy: PolicyConfig, cols: list[str], reasons: Counter | None = None
) -> pa.Table:
    """(shard, index, policy_pass) for every row of ``stored``: :func:`corpus.select.policy.decide_rows` on the
    rows' language, tier and scores (a null score counts as its check's missing value, as an absent one
    on the document: :func:`corpus.select.policy.missing_values`), read in batches; each rejection's reason
    counted into ``reasons``."""
    missing = missing_values(policy)
    scores = sorted(set(missing) & set(cols))
    quoted = {c: '"' + c.replace('"', '""') + '"' for c in scores}
    select = ", ".join(
        [
            "shard",
            '"index"',
            "coalesce(nullif(lang, ''), 'und') AS lang",
            "coalesce(lang_confidence, 0.0)::DOUBLE AS lang_confidence",
            "coalesce(tier, '') AS tier",
            *(f"coalesce({q}, '{missing[c]}'::DOUBLE)::DOUBLE AS {q}" for c, q in quoted.items()),
        ]
    )
    reader = con.sql(f"SELECT {select} FROM stored").to_arrow_reader(POLICY_BATCH_ROWS)
    judged = []  # per batch: its own shard and index columns, and the verdicts (a bit a row)
    for batch in reader:
        names, first = decide_rows(
            batch.column("lang").to_numpy(zero_copy_only=False),
            batch.column("lang_confidence").to_numpy(),
            batch.column("tier").to_numpy(zero_copy_only=False),
            {c: batch.column(c).to_numpy() for c in scores},
            policy,
        )
        if reasons is not None:
            for i, n in zip(*np.unique(first[first >= 0], return_counts=True), strict=True):
                reasons[names[i]] += int(n)
        judged.append(
            pa.record_batch(
                [batch.column("shard"), batch.column("index"), pa.array(first < 0, pa.bool_())],
                names=["shard", "index", "policy_pass"],
            )
        )
    schema = pa.schema([("shard", pa.string()), ("index", pa.int64()), ("policy_pass", pa.bool_())])
    return pa.Table.from_batches(judged, schema=schema) if judged else schema.empty_table()


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


def _bucket_error(bucket: BucketDef, e: duckdb.Error) -> UserError:
    """A predicate DuckDB cannot run (a string compared with a number column...), one line naming its bucket."""
    return UserError(f"selection bucket {bucket.name} ({bucket.where}): {str(e).splitlines()[0]}")


def assign_buckets(
    con: duckdb.DuckDBPyConnection,
    defs: tuple[BucketDef, ...],
    shards: tuple[ShardRef, ...],
    bits: dict[str, np.ndarray],
) -> tuple[VersionBuckets, dict[str, np.ndarray]]:
    """The buckets of ``bits``' selected documents, and per shard the first bucket whose predicate each
    *stored* document satisfies (-1: none; what the kept table counts as stored per bucket).

    1. Each ``qNN`` is resolved over the selected documents that pass its bucket's other clauses.
    2. One pass over the table assigns every document the first bucket it satisfies (``CASE``: a NULL
       comparison is not true, so it falls through).
    3. A selected document keeps that bucket; an unselected one is in none."""
    if any(b.quantiles for b in defs):
        con.register("bucket_kept", _bits_table(shards, bits))
        con.execute(
            'CREATE OR REPLACE VIEW bucket_pool AS SELECT s.* FROM stored s JOIN bucket_kept k USING (shard, "index") '
            "WHERE k.kept"
        )
    resolved: list[dict[str, dict[str, Any]]] = []
    cases, params = [], []
    for k, b in enumerate(defs):
        r: dict[str, dict[str, Any]] = {}
        for c in b.quantiles:
            sql, p = quantile_sql(b, c, "bucket_pool")
            try:
                value = con.execute(sql, p).fetchall()[0][0]
            except duckdb.Error as e:
                raise _bucket_error(b, e) from None
            r.setdefault(c.column, {})[c.value.text] = _jsonable(value)
        resolved.append(r)
        sql, p = predicate_sql(b, r)
        try:  # each predicate on its own first, so an error names its bucket
            con.execute(f"SELECT count(*) FROM stored WHERE {sql}", p).fetchall()
        except duckdb.Error as e:
            raise _bucket_error(b, e) from None
        cases.append(f"WHEN {sql} THEN {k}")
        params += p
    # one row per shard: its documents' buckets in document order (row i of a shard's table is document i)
    per_shard = con.sql(
        f'SELECT shard, list(CASE {" ".join(cases)} ELSE -1 END ORDER BY "index") AS bucket FROM stored GROUP BY shard',
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
    return VersionBuckets(defs, tuple(resolved), of_doc), match


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


def token_counts(con: duckdb.DuckDBPyConnection, shard: ShardRef) -> np.ndarray:
    """Each document's tokens, in the shard's order, from its metadata table (one connection for all
    shards: opening one per shard was ~40 % of making a version of 40 shards)."""
    rows = con.execute(
        'SELECT tokens FROM read_parquet(?) ORDER BY "index"', [str(shard.metadata)]
    ).fetchnumpy()
    return rows["tokens"]


def _bits_for(name: str, docs: int, bits: dict[str, np.ndarray], gone: set[str]) -> np.ndarray:
    """A shard's selection: none at all once it is tombstoned."""
    return np.zeros(docs, dtype=bool) if name in gone else bits[name]


def version_manifest(
    version: Version,
    selection: Selection,
    bits: dict[str, np.ndarray],
    tombstones: list[dict[str, Any]],
    policy_reasons: dict[str, int] | None = None,
    buckets: VersionBuckets | None = None,
) -> dict[str, Any]:
    """The manifest (without ``run_info``) of the version selecting ``bits`` of ``version``'s build;
    a tombstoned shard selects nothing (its files may be gone). ``policy_reasons``: the stored documents
    its policy rejects, by reason (what the yield alarms and the data card read). ``buckets``: the
    selection's buckets by predicate (:func:`assign_buckets`); for a selection with buckets and none
    given, ``version``'s own as made (:func:`recorded_buckets`)."""
    if selection.buckets and buckets is None:
        buckets = recorded_buckets(version)
    shards = []
    gone = {t["name"] for t in tombstones}
    unbucketed = [0, 0]
    con = duckdb.connect()
    for s in version.shards:
        sel = _bits_for(s.name, s.docs, bits, gone)
        tokens = token_counts(con, s) if sel.any() else np.zeros(s.docs, dtype=np.int64)
        entry = {
            "name": s.name,
            "bucket": s.bucket,
            "sha256": s.sha256,
            "metadata_sha256": s.metadata_sha256 if s.name not in gone else None,
            "docs": s.docs,
            "selected_docs": int(sel.sum()),
            "selected_tokens": int(tokens[sel].sum()),
            "bitmap": f"{SELECTION_DIR}/{s.name}{BITS_SUFFIX}",
            "bitmap_sha256": sha256_hex(pack_bits(sel)),
        }
        if buckets is not None:
            entry["buckets"] = {}
            left = sel.copy()
            for k, b in enumerate(buckets.defs):
                pair = buckets.pair(s.name, s.docs, k, gone)
                left &= ~pair
                entry["buckets"][b.name] = {
                    "docs": int(pair.sum()),
                    "tokens": int(tokens[pair].sum()),
                    "bitmap": f"{SELECTION_DIR}/{s.name}.{b.name}{BITS_SUFFIX}",
                    "bitmap_sha256": sha256_hex(pack_bits(pair)),
                }
            unbucketed[0] += int(left.sum())
            unbucketed[1] += int(tokens[left].sum())
        shards.append(entry)
    digested = {
        "format": VERSION_FORMAT,
        "base_snapshot_id": version.base.snapshot_id,
        "selection": selection.canonical(),
        "selection_sha256": selection.digest,
        "shards": shards,
        "tombstones": sorted(tombstones, key=lambda t: t["name"]),
    }
    if policy_reasons is not None:
        digested["policy_reasons"] = dict(sorted(policy_reasons.items()))
    if buckets is not None:
        digested["buckets"] = [
            {"name": b.name, "where": b.where, "resolved": r}
            for b, r in zip(buckets.defs, buckets.resolved, strict=True)
        ]
        digested["unbucketed_docs"], digested["unbucketed_tokens"] = unbucketed
    return {**digested, "snapshot_id": json_digest(digested)}


def kept_table(
    con: duckdb.DuckDBPyConnection,
    version: Version,
    bits: dict[str, np.ndarray],
    buckets: tuple[BucketDef, ...] = (),
    match: dict[str, np.ndarray] | None = None,
) -> dict[str, dict[str, dict[str, int]]]:
    """Per group (bucket, source, lang), per value: documents and tokens stored and kept by ``bits``,
    over the live shards of ``con``'s table ``stored`` (one pass a group): a --dry-run's table. With
    ``buckets`` by predicate, also the group ``predicate_bucket``: per bucket (in order, then
    ``(unbucketed)``) the stored documents whose first matching bucket it is (``match``) and the kept."""
    shards = version.live_shards
    con.register("planned_bits", _bits_table(shards, bits, **({"match": match} if buckets else {})))
    con.register(
        "shard_buckets", pa.table({"shard": [s.name for s in shards], "bucket": [s.bucket for s in shards]})
    )
    out: dict[str, dict[str, dict[str, int]]] = {}
    for group in GROUPS:
        col = "b.bucket" if group == "bucket" else f"s.{group}"
        rows = con.execute(
            f"SELECT {col} AS g, count(*), coalesce(sum(s.tokens), 0), count(*) FILTER (WHERE p.kept), "
            "coalesce(sum(s.tokens) FILTER (WHERE p.kept), 0) FROM stored s "
            'JOIN planned_bits p USING (shard, "index") JOIN shard_buckets b USING (shard) GROUP BY 1'
        ).fetchall()
        out[group] = {
            str(g): {"stored_docs": int(n), "stored_tokens": int(t), "docs": int(k), "tokens": int(kt)}
            for g, n, t, k, kt in sorted(rows, key=lambda r: str(r[0]))
        }
    if buckets:
        rows = con.execute(
            "SELECT p.match, count(*), coalesce(sum(s.tokens), 0), count(*) FILTER (WHERE p.kept), "
            "coalesce(sum(s.tokens) FILTER (WHERE p.kept), 0) FROM stored s "
            'JOIN planned_bits p USING (shard, "index") GROUP BY 1'
        ).fetchall()
        counts = {int(g): (int(n), int(t), int(k), int(kt)) for g, n, t, k, kt in rows}
        names = [*(b.name for b in buckets), UNBUCKETED]
        out[PREDICATE_GROUP] = {
            name: dict(
                zip(
                    ("stored_docs", "stored_tokens", "docs", "tokens"),
                    counts.get(k, (0, 0, 0, 0)),
                    strict=True,
                )
            )
            for k, name in zip([*range(len(buckets)), -1], names, strict=True)
        }
    return out


def write_version(
    version: Version,
    manifest: dict[str, Any],
    bits: dict[str, np.ndarray],
    out: Path,
    base_dir: Path,
    run_info: dict[str, Any] | None = None,
    buckets: VersionBuckets | None = None,
) -> None:
    """Bitmaps first (a shard's, then its buckets'), the manifest last (its presence means complete);
    nothing of the build is touched. ``run_info`` (not covered by the id) records where the build lives
    and facts such as dates. ``buckets``: as for :func:`version_manifest`."""
    if "buckets" in manifest and buckets is None:
        buckets = recorded_buckets(version)
    out.mkdir(parents=True, exist_ok=True)
    (out / SELECTION_DIR).mkdir(exist_ok=True)
    gone = {t["name"] for t in manifest["tombstones"]}
    for s in manifest["shards"]:
        atomic_write_bytes(out / s["bitmap"], pack_bits(_bits_for(s["name"], s["docs"], bits, gone)))
        for k, b in enumerate(buckets.defs if "buckets" in s else ()):
            atomic_write_bytes(
                out / s["buckets"][b.name]["bitmap"], pack_bits(buckets.pair(s["name"], s["docs"], k, gone))
            )
    run_info = {**(run_info or {}), "base": os.path.relpath(base_dir.resolve(), out.resolve())}
    atomic_write_bytes(out / MANIFEST, canonical_json({**manifest, "run_info": run_info}) + b"\n")


def _groups(shard: ShardRef) -> dict[str, np.ndarray]:
    """Per document of one shard: its source, lang and tokens (read from the shard's metadata file;
    a shard deleted under a tombstone counts as source and lang "(tombstoned)", its tokens unknown)."""
    if not shard.metadata.is_file():
        unknown = np.full(shard.docs, "(tombstoned)", dtype=object)
        return {"source": unknown, "lang": unknown, "tokens": np.zeros(shard.docs, dtype=np.int64)}
    rows = (
        duckdb.connect()
        .execute('SELECT source, lang, tokens FROM read_parquet(?) ORDER BY "index"', [str(shard.metadata)])
        .fetchnumpy()
    )
    return {"source": rows["source"], "lang": rows["lang"], "tokens": rows["tokens"]}


def diff_versions(a: Version, b: Version) -> dict[str, Any]:
    """What changes from version ``a`` to version ``b`` of one build: the selection's keys, the
    tombstones, and the documents and tokens added and removed per bucket, source and language."""
    if a.base.snapshot_id != b.base.snapshot_id:
        raise UserError(
            f"versions of different builds ({a.base.snapshot_id} and {b.base.snapshot_id}): "
            f"compare the builds with corpus diff BUILD_A BUILD_B"
        )
    nothing = Selection().canonical()  # the build itself, compared key by key as the empty selection
    sel_a = (a.manifest or {}).get("selection", nothing)
    sel_b = (b.manifest or {}).get("selection", nothing)
    keys = sorted(sel_a.keys() | sel_b.keys())
    selection = [
        {"key": k, "a": sel_a.get(k), "b": sel_b.get(k)} for k in keys if sel_a.get(k) != sel_b.get(k)
    ]
    if (a.manifest is None) != (b.manifest is None):
        selection.insert(
            0,
            {
                "key": "(version)",
                "a": "the build" if a.manifest is None else "a selection",
                "b": "the build" if b.manifest is None else "a selection",
            },
        )
    tomb_a, tomb_b = a.tombstones, b.tombstones
    delta: dict[str, dict[str, dict[str, int]]] = {"bucket": {}, "source": {}, "lang": {}}
    for shard in a.shards:
        bits_a, bits_b = a.selected(shard), b.selected(shard)
        if np.array_equal(bits_a, bits_b):
            continue
        groups = _groups(shard)
        for sign, mask in (("added", bits_b & ~bits_a), ("removed", bits_a & ~bits_b)):
            for axis in ("bucket", "source", "lang"):
                keys_of = (
                    np.full(shard.docs, shard.bucket, dtype=object) if axis == "bucket" else groups[axis]
                )
                for key in sorted(set(keys_of[mask].tolist())):
                    m = mask & (keys_of == key)
                    cell = delta[axis].setdefault(
                        str(key), {"added_docs": 0, "added_tokens": 0, "removed_docs": 0, "removed_tokens": 0}
                    )
                    cell[f"{sign}_docs"] += int(m.sum())
                    cell[f"{sign}_tokens"] += int(groups["tokens"][m].sum())
    return {
        "a": a.snapshot_id,
        "b": b.snapshot_id,
        "identical": a.snapshot_id == b.snapshot_id,
        "selection": selection,
        "tombstones": {
            "added": [tomb_b[n] for n in sorted(tomb_b.keys() - tomb_a.keys())],
            "removed": [tomb_a[n] for n in sorted(tomb_a.keys() - tomb_b.keys())],
        },
        "documents": {axis: dict(sorted(rows.items())) for axis, rows in delta.items()},
    }


def diff_text(d: dict[str, Any]) -> str:
    lines = [f"a {d['a']}", f"b {d['b']}", "identical" if d["identical"] else "different"]
    for c in d["selection"]:
        lines.append(f"selection {c['key']}: {json.dumps(c['a'])} -> {json.dumps(c['b'])}")
    for t in d["tombstones"]["added"]:
        lines.append(f"tombstone added: {t['name']} ({t['reason']})")
    for t in d["tombstones"]["removed"]:
        lines.append(f"tombstone removed: {t['name']}")
    for axis, rows in d["documents"].items():
        for key, c in rows.items():
            lines.append(
                f"{axis} {key}: +{c['added_docs']:,} docs / +{c['added_tokens']:,} tokens, "
                f"-{c['removed_docs']:,} docs / -{c['removed_tokens']:,} tokens"
            )
    return "\n".join(lines)


GROUPS = ("bucket", "source", "lang")
#: the kept table's group of a selection's buckets by predicate
PREDICATE_GROUP = "predicate_bucket"


@dataclass(frozen=True)
class Planned:
    """A version worked out but not written: its bits, its manifest and what it keeps."""

    version: Version
    bits: dict[str, np.ndarray]
    manifest: dict[str, Any]
    #: per group (bucket, source, lang; predicate_bucket), per value: docs and tokens kept, and stored
    kept: dict[str, dict[str, dict[str, int]]]
    #: the selection's buckets by predicate, or None
    buckets: VersionBuckets | None = None

    @property
    def empty_buckets(self) -> list[str]:
        """The buckets the loader would stream of which the selection keeps nothing: the selection's own
        buckets by predicate when it defines them (then the build's buckets are not the loader's), else
        the build's buckets that have documents."""
        if self.buckets is not None:
            return [b.name for b in self.buckets.defs if self.kept[PREDICATE_GROUP][b.name]["docs"] == 0]
        return sorted(b for b, c in self.kept["bucket"].items() if c["docs"] == 0 and c["stored_docs"] > 0)


def plan_version(build: Path, selection: Selection) -> Planned:
    """What ``corpus version BUILD`` with ``selection`` would write (a version of a version keeps its
    tombstones)."""
    version = open_version(build)
    base = Version(version.base_dir, version.base, version.live_shards)
    con = connect(base)  # one connection: the table's files are opened once
    reasons: Counter = Counter()
    bits = select_rows(con, selection, {s.name: s.docs for s in base.shards}, reasons)
    buckets, match = (
        assign_buckets(con, selection.buckets, base.shards, bits) if selection.buckets else (None, None)
    )
    kept = kept_table(con, base, bits, selection.buckets, match)
    manifest = version_manifest(
        version,
        selection,
        bits,
        list(version.tombstones.values()),
        dict(reasons) if selection.policy is not None else None,
        buckets,
    )
    return Planned(version, bits, manifest, kept, buckets)


def make_version(build: Path, selection: Selection, out: Path) -> Planned:
    """Write the version (refused, before anything is written, when it empties a bucket)."""
    planned = plan_version(build, selection)
    if planned.empty_buckets:
        whose = "the selection defines" if planned.buckets is not None else "the build has"
        raise UserError(
            f"the selection keeps no document of bucket(s) {', '.join(planned.empty_buckets)}, which {whose}; "
            f"nothing written (check it with --dry-run)"
        )
    write_version(
        planned.version,
        planned.manifest,
        planned.bits,
        Path(out),
        planned.version.base_dir,
        buckets=planned.buckets,
    )
    return planned


def buckets_text(manifest: dict[str, Any]) -> str:
    """A version's buckets by predicate, each with its quantiles as resolved, and what no bucket took."""
    lines = []
    for b in manifest.get("buckets", []):
        values = ", ".join(f"{q} of {col} = {v}" for col, qs in b["resolved"].items() for q, v in qs.items())
        lines.append(
            f"bucket {b['name']}: {b['where'] or '(every selected document no earlier bucket took)'}"
            + (f" ({values})" if values else "")
        )
    if "buckets" in manifest:
        lines.append(
            f"unbucketed: {manifest['unbucketed_docs']:,} selected docs / {manifest['unbucketed_tokens']:,} tokens "
            "in no bucket (the loader does not read them)"
        )
    return "\n".join(lines)


def kept_text(kept: dict[str, dict[str, dict[str, int]]]) -> str:
    """The kept table as aligned text (a --dry-run, and after a version is written)."""
    lines = []
    for g, rows in kept.items():
        lines.append(f"{g:<24} {'docs kept':>12} {'of':>10} {'tokens kept':>14} {'of':>14}")
        for k, c in rows.items():
            lines.append(
                f"  {k:<22} {c['docs']:>12,} {c['stored_docs']:>10,} {c['tokens']:>14,} {c['stored_tokens']:>14,}"
            )
    return "\n".join(lines)
