"""The JSONL export: zstd-compressed JSON lines in the shape Dolma and datatrove read.

One file per unit, ``data/BUCKET/SHARD.jsonl.zst``, one document a line, keys in this order: ``id`` (the
doc_id), ``text``, ``source``, ``added`` (the export's ``--added`` date, else null: no clock enters an
export), ``created`` (the crawl date, else null) and ``metadata`` (every other column of the metadata
table, and the bucket). Compressed with one zstd frame per file at a fixed level, single-threaded, so the
bytes depend only on the documents.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import zstandard

from corpus.export.documents import SelectedDocument, UnitReader
from corpus.export.files import PartWriter
from corpus.export.parquet import unit_path

ZSTD_LEVEL = 3
#: metadata columns that become the record's own keys
PROMOTED = ("doc_id", "source", "crawl_date")


def _plain(value: Any) -> Any:
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def record(d: SelectedDocument, bucket: str, added: str | None) -> dict[str, Any]:
    """The Dolma-shaped record of one document."""
    created = d.row.get("crawl_date")
    metadata = {k: _plain(v) for k, v in d.row.items() if k not in PROMOTED}
    metadata["bucket"] = bucket
    return {
        "id": d.row["doc_id"],
        "text": d.text,
        "source": d.row["source"],
        "added": added,
        "created": created.isoformat() if created is not None else None,
        "metadata": metadata,
    }


def write_unit(reader: UnitReader, out: PartWriter, added: str | None) -> dict[str, int]:
    """Write one unit's file; its documents and tokens."""
    unit = reader.unit
    target = out.open(unit_path(unit.bucket, unit.shard.name, ".jsonl.zst"))
    docs = tokens = 0
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=0)
    with compressor.stream_writer(target, closefd=False) as z:
        for batch in reader.batches():
            for d in batch:
                line = json.dumps(record(d, unit.bucket, added), ensure_ascii=False, allow_nan=False)
                z.write(line.encode() + b"\n")
                docs += 1
                tokens += int(d.tokens.shape[0])
    return {"docs": docs, "tokens": tokens}
