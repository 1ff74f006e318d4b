"""The metadata table of a version as DuckDB views, and a selection run over it as SQL.

``connect`` opens the table where its files lie (never loaded whole); ``select_rows`` turns a
:class:`~corpus.select.selection.Selection` into one bool per stored document, its policy judged in
Python batch by batch (:func:`policy_verdicts`). See docs/versions.md ("The metadata table", "Selections").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import duckdb
import numpy as np
import pyarrow as pa

from corpus.model.errors import UserError
from corpus.model.facts import SnapshotFacts
from corpus.select.blocklists import FileFacts, build_hosts, build_urls, matched_entries, register
from corpus.select.policy import PolicyConfig, decide_rows, missing_values
from corpus.select.provenance import COPY_COLUMNS
from corpus.select.selection import Selection, check_columns, selection_sql
from corpus.version.open import StoredShard, Version

#: fixed columns newer than some builds' metadata tables, with their types: read as nulls there
ADDED_COLUMNS = {"fuzzy_benchmark": "VARCHAR", "fuzzy_share": "DOUBLE", "fuzzy_item": "VARCHAR"}
#: the table a connection holds besides ``stored``: (shard, build_age) of every shard (:func:`build_age`)
SHARD_AGES = "shard_ages"


def connect(
    version: Version,
    missing_scores: tuple[str, ...] = (),
    removed: dict[str, np.ndarray] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the table ``docs`` (one row per stored document; on a version, with a
    boolean ``selected``) and ``shard_ages`` (each shard's build age: what keeps a delta's selection
    keep-first). Files are read where they lie, never loaded whole. ``missing_scores``: score columns
    none of these shards has but others of the build do (one rank's shards), added as nulls.
    ``removed``: documents taken down, by shard (:attr:`Version.removed`; none given: ``version``'s
    own): not in the table at all, so no rule, quantile or group ever sees them."""
    con = duckdb.connect()
    files = [str(s.metadata) for s in version.live_shards]
    if not files:
        raise UserError(f"snapshot {version.snapshot_id} has no shards")
    stored = con.read_parquet(files, union_by_name=True)
    absent = [c for c in ADDED_COLUMNS if c not in stored.columns]
    if absent:  # a build older than the column: none of its documents has a value
        stored = stored.project(", ".join(["*", *(f"NULL::{ADDED_COLUMNS[c]} AS {c}" for c in absent)]))
    if missing_scores:
        stored = stored.project(", ".join(["*", *(f"NULL::DOUBLE AS {_quoted(c)}" for c in missing_scores)]))
    removed = version.removed if removed is None else removed
    if removed:
        names = sorted(removed)
        gone = pa.table(
            {
                "shard": pa.array(np.repeat(names, [removed[n].shape[0] for n in names]), pa.string()),
                "index": pa.array(np.concatenate([removed[n] for n in names]), pa.int64()),
            }
        )
        con.register("taken_down", gone)
        stored.create_view("stored_with_taken_down")
        con.execute(
            'CREATE VIEW stored AS SELECT s.* FROM stored_with_taken_down s ANTI JOIN taken_down USING (shard, "index")'
        )
    else:
        stored.create_view("stored")
    _create_shard_ages(con, {s.name: s.age for s in version.shards})
    copies = [str(version.base_dir / c.path) for c in SnapshotFacts.of(version.base).copies]
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


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def columns(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.execute("DESCRIBE stored").fetchall()]


def _shard_column(shards: tuple[StoredShard, ...]) -> pa.Array:
    """Each document's shard name, dictionary-encoded: 4 bytes a document, not a Python string each."""
    codes = np.repeat(np.arange(len(shards), dtype=np.int32), [s.docs for s in shards])
    return pa.DictionaryArray.from_arrays(pa.array(codes), pa.array([s.name for s in shards], pa.string()))


def bits_table(
    shards: tuple[StoredShard, ...], bits: dict[str, np.ndarray], **more: dict[str, np.ndarray]
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
    return select_rows(
        connect(base, removed=version.removed),
        selection,
        {s.name: s.docs for s in base.shards},
        policy_reasons,
    )


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
    table = prepare_rules(con, selection, columns(con), policy_reasons)
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


def prepare_rules(
    con: duckdb.DuckDBPyConnection,
    selection: Selection,
    cols: list[str],
    policy_reasons: Counter | None = None,
) -> str:
    """Make ready what the row rules of ``selection`` read on ``con`` (``cols``: the table's columns,
    checked against the selection): the views ``copies`` and ``shard_ages`` where :func:`connect` made
    none, and with a policy its verdicts (``policy_reasons`` filled as for :func:`select_rows`). The
    table the rules run over: ``stored``, or ``judged`` (with ``policy_pass``)."""
    check_columns(selection, cols)
    if not con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'copies'").fetchall()[0][0]:
        empty = ", ".join(f"NULL::{t} AS {c}" for c, t in COPY_COLUMNS.items())
        con.execute(f"CREATE VIEW copies AS SELECT {empty} WHERE FALSE")  # a build without exact copies
    if not con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [SHARD_AGES]
    ).fetchall()[0][0]:
        _create_shard_ages(con, {})  # a table not made by connect(): every shard its build's own (age 0)
    if selection.blocklists:
        register(con, selection.blocklists)
    if selection.policy is None:
        return "stored"
    con.register("policy_verdicts", policy_verdicts(con, selection.policy, cols, policy_reasons))
    con.execute(
        "CREATE OR REPLACE VIEW judged AS SELECT stored.*, v.policy_pass FROM stored "
        'JOIN policy_verdicts v USING (shard, "index")'
    )
    return "judged"


def resolve_blocklists(
    con: duckdb.DuckDBPyConnection | None, selection: Selection
) -> tuple[Selection, list[FileFacts]]:
    """``selection`` with each blocklist named by its files resolved against ``con``'s table (the
    entries that match its hosts and URLs, :func:`corpus.select.blocklists.matched_entries`; ``con``
    None: a rank without shards, which matches nothing), and what was read of each file."""
    if not any(b.files for b in selection.blocklists):
        return selection, []
    hosts = build_hosts(con) if con is not None else set()
    resolved, facts = [], []
    for b in selection.blocklists:
        if b.files:
            b, read = matched_entries(b, hosts, lambda on: build_urls(con, on) if con is not None else [])
            facts += read
        resolved.append(b)
    return replace(selection, blocklists=tuple(resolved)), facts


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
