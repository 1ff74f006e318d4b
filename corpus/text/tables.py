"""Tables as inputs: Parquet files and Hugging Face datasets saved to disk, a row a record.

Each row is read as a JSONL line is (:func:`corpus.text.curated.record_from_dict`, through the source's
field mapping), so a table and a JSONL file of the same records give the same documents; a date or
timestamp column reads as its ISO text. A row's raw digest is the sha256 of its canonical JSON, a pure
function of its values. Rows are
read a batch at a time (:data:`BATCH_ROWS`); a row whose ``text`` is over ``max_record_bytes`` is
quarantined as ``record_too_large``; a file that cannot be read is ``unreadable_file`` after the rows
read so far. A Hugging Face dataset directory (``Dataset.save_to_disk``) is read with pyarrow alone:
its ``state.json`` lists its Arrow files in order.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from corpus.text.curated import CuratedError, CuratedRecord, mapped, record_from_dict
from corpus.text.inputs import open_regular

BATCH_ROWS = 256


def _row_digest(row: dict[str, Any]) -> str:
    data = json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


def _plain(value: Any) -> Any:
    """A table's dates and timestamps as ISO text (a JSON line holds them so), in nested values too."""
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _rows(batches: Iterator[pa.RecordBatch], url_prefix: str, fields: Mapping[str, str], max_bytes: int):
    index = -1
    for batch in batches:
        for row in batch.to_pylist():
            row = _plain(row)
            index += 1
            digest = _row_digest(row)
            text = mapped(row, fields).get("text")
            if isinstance(text, str) and len(text.encode("utf-8", "surrogatepass")) > max_bytes:
                yield CuratedError(
                    index, "record_too_large", f"text over max_record_bytes {max_bytes}", digest
                )
                continue
            yield record_from_dict(index, row, digest, url_prefix, fields)


def _guarded(read: Iterator[CuratedRecord | CuratedError]) -> Iterator[CuratedRecord | CuratedError]:
    index = -1
    try:
        for rec in read:
            index = rec.index
            yield rec
    except (OSError, pa.ArrowException, ValueError, KeyError) as e:
        yield CuratedError(index + 1, "unreadable_file", f"{type(e).__name__}: {e}"[:300], "")


def iter_parquet(
    path: Path, url_prefix: str, max_bytes: int, fields: Mapping[str, str]
) -> Iterator[CuratedRecord | CuratedError]:
    """Every row of a Parquet file, in order."""

    def read() -> Iterator[CuratedRecord | CuratedError]:
        with open_regular(path) as f:  # a FIFO put in a listed file's place is refused, not waited on
            batches = pq.ParquetFile(f).iter_batches(batch_size=BATCH_ROWS)
            yield from _rows(batches, url_prefix, fields, max_bytes)

    return _guarded(read())


def iter_hf_dataset(
    path: Path, url_prefix: str, max_bytes: int, fields: Mapping[str, str]
) -> Iterator[CuratedRecord | CuratedError]:
    """Every row of a dataset saved with ``datasets.Dataset.save_to_disk``, its Arrow files in order."""

    def read() -> Iterator[CuratedRecord | CuratedError]:
        state = json.loads((path / "state.json").read_text())
        files = [path / f["filename"] for f in state["_data_files"]]
        yield from _rows((b for f in files for b in _arrow_batches(f)), url_prefix, fields, max_bytes)

    return _guarded(read())


def _arrow_batches(path: Path) -> Iterator[pa.RecordBatch]:
    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_stream(source)
        for batch in reader:
            for start in range(0, batch.num_rows, BATCH_ROWS):
                yield batch.slice(start, BATCH_ROWS)
