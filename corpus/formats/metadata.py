"""The per-document metadata table: one Parquet file per token shard, row i = document i of the shard.

A version (a selection of documents) is made from stored values alone, in minutes, without reading text
or tokens: every value a selection can name is a column here (identity and position, origin, licence,
language, scores, near-duplicate and repository clusters, exact copies, contamination). DuckDB reads the
files of a build as one table ``docs`` (``corpus query``). The table is a pure function of the lineage
record write_shards stores for each document (the document without its text) and the token count of
its ``.idx`` entry, so it is the same on any number of ranks. Columns: docs/versions.md.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from corpus.dedup.order import encode_representative, representative_fields
from corpus.model.annotations import (
    CONTAMINATED_FUZZY,
    CONTAMINATED_FUZZY_ITEM,
    CONTAMINATED_ITEM,
    CONTAMINATED_RUN,
    DECONTAMINATE,
    EXACT_COPIES,
    EXACT_DEDUP,
    EXACT_KEEPER_ID,
    MINHASH_DEDUP,
    REPO_CLUSTER,
    REPO_CLUSTER_SIZE,
    REPO_RANK,
)
from corpus.model.tiers import source_rank
from corpus.select.licences import licence_class
from corpus.select.provenance import crawl_day, host_of

#: the fixed columns, in order; every score follows as a float64 column of its own name
FIXED_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("shard", pa.string()),
        ("index", pa.int64()),
        ("tokens", pa.int64()),
        ("url", pa.string()),
        ("host", pa.string()),
        ("source", pa.string()),
        ("tier", pa.string()),
        ("tier_rank", pa.int32()),
        ("licence", pa.string()),
        ("licence_class", pa.string()),
        ("crawl_date", pa.date32()),
        ("lang", pa.string()),
        ("lang_confidence", pa.float64()),
        ("dup_cluster_id", pa.string()),
        ("dup_cluster_size", pa.int64()),
        ("dup_of", pa.string()),
        ("representative_key", pa.string()),
        ("repo_cluster_id", pa.string()),
        ("repo_cluster_size", pa.int64()),
        ("repo_rank", pa.int64()),
        ("copies", pa.int64()),
        ("exact_keeper_id", pa.string()),
        ("contaminated_benchmark", pa.string()),
        ("contaminated_run", pa.int64()),
        ("contaminated_item", pa.string()),
        ("fuzzy_benchmark", pa.string()),
        ("fuzzy_share", pa.float64()),
        ("fuzzy_item", pa.string()),
        ("text_bytes", pa.int64()),
        ("text_digest", pa.string()),
        ("derived_from", pa.string()),
    ]
)
FIXED_COLUMNS: tuple[str, ...] = tuple(FIXED_SCHEMA.names)
METADATA_SUFFIX = ".parquet"
#: rows per Parquet row group, and per batch a writer holds as parsed records
ROW_GROUP = 1024


def _of_stage(annotations: Iterable[dict[str, Any]], stage: str) -> list[tuple[str, Any]]:
    """(name, value) of each annotation of ``stage``, in order (one cheap pass: this runs per row)."""
    return [(a.get("name", ""), a.get("value")) for a in annotations if a.get("stage") == stage]


def _best_of(
    annotations: Iterable[dict[str, Any]], value_prefix: str, item_prefix: str, number: type
) -> tuple[str | None, Any, str | None]:
    """The largest value a document carries under ``value_prefix`` (per benchmark), with its benchmark
    and the item ``item_prefix`` names: (benchmark, value, item id); ties by benchmark name."""
    notes = _of_stage(annotations, DECONTAMINATE)
    items = {name[len(item_prefix) :]: str(v) for name, v in notes if name.startswith(item_prefix)}
    best: tuple[str | None, Any, str | None] = (None, None, None)
    for name, value in notes:
        if name.startswith(value_prefix):
            bench, v = name[len(value_prefix) :], number(value or 0)
            if best[1] is None or (v, bench) > (best[1], best[0] or ""):
                best = (bench, v, items.get(bench))
    return best


def _contamination(annotations: Iterable[dict[str, Any]]) -> tuple[str | None, int | None, str | None]:
    """The longest contamination run a document carries: (benchmark, run length, item id)."""
    return _best_of(annotations, CONTAMINATED_RUN.prefix, CONTAMINATED_ITEM.prefix, int)


def _fuzzy(annotations: Iterable[dict[str, Any]]) -> tuple[str | None, float | None, str | None]:
    """The fuzzy tier's largest share a document carries (only where no exact run was found for that
    benchmark): (benchmark, share, item id)."""
    return _best_of(annotations, CONTAMINATED_FUZZY.prefix, CONTAMINATED_FUZZY_ITEM.prefix, float)


def _copies(annotations: Iterable[dict[str, Any]]) -> tuple[int, str | None]:
    """How many exact copies the document stands for (exact_dedup's ``copies``; 1 when it had none) and
    the doc_id it had when exact dedup kept it (``keeper_id``: what its copies' records point at; a
    later stage that changes the text gives the document a new doc_id)."""
    latest = dict(_of_stage(annotations, EXACT_DEDUP))
    keeper = str(latest[EXACT_KEEPER_ID.name]) if EXACT_KEEPER_ID.name in latest else None
    return int(latest.get(EXACT_COPIES.name) or 1), keeper


def _repo_cluster(annotations: Iterable[dict[str, Any]]) -> tuple[str | None, int | None, int | None]:
    """A code document's repository cluster (minhash_dedup's ``repo_cluster``, ``repo_cluster_size``,
    ``repo_rank``: 0 is the representative repository), or nulls for a document in none."""
    latest = dict(_of_stage(annotations, MINHASH_DEDUP))
    if REPO_CLUSTER.name not in latest:
        return None, None, None
    cluster, size, rank = (latest[n.name] for n in (REPO_CLUSTER, REPO_CLUSTER_SIZE, REPO_RANK))
    return str(cluster), int(size), int(rank)


def metadata_row(record: dict[str, Any], shard: str, index: int, tokens: int) -> dict[str, Any]:
    """One row of the table from a lineage record (``Document.to_dict`` without its text)."""
    notes = record.get("annotations") or []
    bench, run, item = _contamination(notes)
    fuzzy_bench, fuzzy_share, fuzzy_item = _fuzzy(notes)
    copies, keeper_id = _copies(notes)
    repo_cluster, repo_size, repo_rank = _repo_cluster(notes)
    date = record.get("crawl_date") or ""
    representative = representative_fields(
        record.get("source_tier", ""),
        (record.get("scores") or {}).get("quality", 0.0),
        date,
        record["doc_id"],
    )
    return {
        "doc_id": record["doc_id"],
        "shard": shard,
        "index": index,
        "tokens": tokens,
        "url": record.get("url", ""),
        "host": host_of(record.get("url", "")),
        "source": record.get("source", ""),
        "tier": record.get("source_tier", ""),
        "tier_rank": source_rank(record.get("source_tier", "")),
        "licence": record.get("license_hint", ""),
        "licence_class": licence_class(record.get("license_hint", "")),
        "crawl_date": crawl_day(date),
        "lang": record.get("lang", ""),
        "lang_confidence": float(record.get("lang_confidence") or 0.0),
        "dup_cluster_id": record.get("dup_cluster_id", ""),
        "dup_cluster_size": int(record.get("dup_cluster_size") or 1),
        "dup_of": record.get("dup_of", ""),
        # minhash_dedup's representative order (tier, quality descending, date, doc_id) as hex of its
        # byte encoding, whose text order is the key order: the smallest key of a cluster is its pick
        "representative_key": encode_representative(representative).hex(),
        "repo_cluster_id": repo_cluster,
        "repo_cluster_size": repo_size,
        "repo_rank": repo_rank,
        "copies": copies,
        "exact_keeper_id": keeper_id,
        "contaminated_benchmark": bench,
        "contaminated_run": run,
        "contaminated_item": item,
        "fuzzy_benchmark": fuzzy_bench,
        "fuzzy_share": fuzzy_share,
        "fuzzy_item": fuzzy_item,
        "text_bytes": int(record.get("text_bytes") or 0),
        "text_digest": record.get("text_digest", ""),
        "derived_from": record.get("derived_from", ""),
    }


def metadata_table(
    records: Sequence[dict[str, Any]], shard: str, token_counts: Sequence[int], first_index: int = 0
) -> pa.Table:
    """The metadata table of one token shard: row i describes document ``first_index + i`` (its
    lineage record ``records[i]`` and its ``token_counts[i]`` tokens). Scores become float64 columns
    named by the score, in name order; a score a document lacks is null."""
    if len(records) != len(token_counts):
        raise ValueError(f"shard {shard}: {len(records)} lineage records but {len(token_counts)} documents")
    rows = [
        metadata_row(r, shard, first_index + i, int(n))
        for i, (r, n) in enumerate(zip(records, token_counts, strict=True))
    ]
    score_names = sorted({k for r in records for k in (r.get("scores") or {})})
    clash = sorted(set(score_names) & set(FIXED_COLUMNS))
    if clash:
        raise ValueError(f"score names {clash} collide with metadata columns; rename the scores")
    columns = {name: [row[name] for row in rows] for name in FIXED_COLUMNS}
    arrays = [pa.array(columns[f.name], type=f.type) for f in FIXED_SCHEMA]
    fields = list(FIXED_SCHEMA)
    for name in score_names:
        values = [(r.get("scores") or {}).get(name) for r in records]
        arrays.append(pa.array([None if v is None else float(v) for v in values], type=pa.float64()))
        fields.append(pa.field(name, pa.float64()))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def write_metadata(table: pa.Table, path: Path) -> None:
    """Write one shard's table. Parquet's own statistics and dictionary encoding keep it small; the
    file is written without a creation timestamp so its bytes depend only on the table."""
    pq.write_table(table, path, compression="zstd", write_statistics=True, store_schema=False)


def read_metadata(path: Path) -> pa.Table:
    return pq.read_table(path)


class MetadataWriter:
    """One shard's table written in bounded memory, a document at a time, as write_shards streams it.

    Rows are buffered :data:`ROW_GROUP` at a time and each full batch goes to a spool file (Arrow IPC)
    beside the output; at :meth:`finish`, when every score name of the shard is known, the batches are
    read back one at a time, given the shard's full column set (missing scores null) and written as
    Parquet row groups. Memory: one batch of parsed lineage records (~5 MB), whatever the shard's size.
    The batch is fixed, not derived from the memory budget: the file's bytes (its row groups) depend
    only on the records, so the snapshot id does not depend on the budget.
    """

    def __init__(self, shard: str, spool: Path, batch: int = ROW_GROUP) -> None:
        self.shard, self.spool, self.batch = shard, Path(spool), batch
        shutil.rmtree(self.spool, ignore_errors=True)  # a spool left by an interrupted run
        self.spool.mkdir(parents=True)
        self._records: list[dict[str, Any]] = []
        self._tokens: list[int] = []
        self._files: list[Path] = []
        self._scores: set[str] = set()
        self.rows = 0

    def add(self, record: dict[str, Any], tokens: int) -> None:
        self._records.append(record)
        self._tokens.append(tokens)
        if len(self._records) == self.batch:
            self._flush()

    def _flush(self) -> None:
        if not self._records:
            return
        table = metadata_table(self._records, self.shard, self._tokens, first_index=self.rows)
        self.rows += table.num_rows
        self._scores |= set(table.column_names[len(FIXED_COLUMNS) :])
        path = self.spool / f"{len(self._files):06d}.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
            out.write_table(table)
        self._files.append(path)
        self._records, self._tokens = [], []

    def finish(self, out: Any) -> None:
        """Write the Parquet file to ``out`` (anything with ``write(bytes)``) and remove the spool."""
        self._flush()
        schema = pa.schema([*FIXED_SCHEMA, *(pa.field(n, pa.float64()) for n in sorted(self._scores))])
        tmp = self.spool / "table.parquet"
        with pq.ParquetWriter(tmp, schema, compression="zstd", store_schema=False) as writer:
            for path in self._files:
                with pa.memory_map(str(path)) as source:
                    table = pa.ipc.open_file(source).read_all()
                cols = [
                    table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
                    for f in schema
                ]
                writer.write_table(pa.Table.from_arrays(cols, schema=schema), row_group_size=self.batch)
            if not self._files:
                writer.write_table(schema.empty_table())
        with open(tmp, "rb") as f:
            while chunk := f.read(1 << 20):
                out.write(chunk)
        shutil.rmtree(self.spool)
