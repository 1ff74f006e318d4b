"""The Parquet export: the selected documents' text beside every metadata column, for DuckDB, Spark and
Hugging Face ``datasets``.

One file per unit, ``data/BUCKET/SHARD.parquet``: ``doc_id``, ``text``, ``bucket``, then the metadata
table's columns as stored (``shard`` and ``index`` name the document's place in the candidates). Row
groups close at :data:`ROW_GROUP_TEXT_BYTES` of text, so a reader (and the writer) holds one row group
at a time whatever the shard's size. The export's ``README.md`` carries the YAML header ``datasets``
reads (:func:`dataset_card`), so ``load_dataset(EXPORT_DIR)`` finds the files.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from corpus.export.documents import UnitReader
from corpus.export.files import PartWriter
from corpus.formats.metadata import FIXED_COLUMNS, FIXED_SCHEMA

DATA = "data"
#: text bytes per row group: large enough for efficient scans, small enough to hold one in memory
ROW_GROUP_TEXT_BYTES = 64 << 20
#: the columns the export adds in front of the metadata table's
LEADING = ("doc_id", "text", "bucket")


def unit_path(bucket: str, shard: str, suffix: str) -> str:
    return f"{DATA}/{bucket}/{shard}{suffix}"


def export_schema(scores: list[str]) -> pa.Schema:
    """One schema for every file of the export (a dataset's files must agree): the fixed metadata
    columns, then every score any exported shard has (a file without one holds nulls), sorted."""
    rest = [f for f in FIXED_SCHEMA if f.name not in LEADING]
    return pa.schema(
        [
            FIXED_SCHEMA.field("doc_id"),
            ("text", pa.string()),
            ("bucket", pa.string()),
            *rest,
            *(pa.field(s, pa.float64()) for s in sorted(scores)),
        ]
    )


def score_columns(metadata: Path) -> set[str]:
    """The score columns of one stored shard's metadata table (its footer only)."""
    return {n for n in pq.read_schema(metadata).names if n not in FIXED_COLUMNS}


def write_unit(reader: UnitReader, out: PartWriter, scores: list[str]) -> dict[str, int]:
    """Write one unit's file; its documents and tokens."""
    unit = reader.unit
    schema = export_schema(scores)
    path = out.path(unit_path(unit.bucket, unit.shard.name, ".parquet"))
    docs = tokens = 0
    rows: list[dict] = []
    held = 0
    with pq.ParquetWriter(path, schema, compression="zstd", store_schema=False) as writer:
        for batch in reader.batches():
            for d in batch:
                rows.append({**d.row, "text": d.text, "bucket": unit.bucket})
                held += len(d.text.encode())
                docs += 1
                tokens += int(d.tokens.shape[0])
                if held >= ROW_GROUP_TEXT_BYTES:
                    writer.write_table(pa.Table.from_pylist(rows, schema=schema), row_group_size=len(rows))
                    rows, held = [], 0
        if rows or not docs:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema), row_group_size=max(len(rows), 1))
    return {"docs": docs, "tokens": tokens}


def dataset_card(export_id: str, version_id: str, buckets: list[str], docs: int, tokens: int) -> str:
    """The export's ``README.md``: the ``configs`` YAML header ``datasets`` reads (one split, ``train``;
    one config per bucket besides ``default``), then what the export is."""
    configs = [("default", f"{DATA}/*/*.parquet")] + [(b, f"{DATA}/{b}/*.parquet") for b in buckets]
    header = ["---", "configs:"]
    for name, glob in configs:
        header += [f"- config_name: {name}", "  data_files:", "  - split: train", f'    path: "{glob}"']
    header.append("---")
    body = [
        "",
        "# Export of a corpus-pipeline version",
        "",
        f"- export id: `{export_id}`",
        f"- version: `{version_id}`",
        f"- {docs} documents, {tokens} tokens (the build's tokenizer, EOS included)",
        "",
        "The selected documents of the version only: rejected, near-duplicate and contaminated",
        "documents are not here. Columns: `doc_id`, `text`, `bucket`, then the version's metadata",
        "table (docs/versions.md of corpus-pipeline).",
        "",
    ]
    return "\n".join(header + body)
