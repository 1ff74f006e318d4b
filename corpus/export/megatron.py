"""The Megatron export: the selected documents only, as a snapshot of their own that Megatron reads.

Each unit becomes one Megatron prefix ``shards/BUCKET__SHARD`` (``.bin``/``.idx``, read by Megatron-Core's
``IndexedDataset``) with the companions of the snapshot format (docs/snapshot.md): block digests, the
documents' lineage records and metadata rows (renumbered to the exported shard), and ``.meta.json``. The
export's ``manifest.json`` is therefore a ``corpus-snapshot/1`` manifest, its id the export's content
address: ``corpus trace``, ``corpus query`` and this project's loader read an export as they read a
build. :func:`blend` gives the weights Megatron's ``--data-path`` takes.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from corpus.export.documents import UnitReader
from corpus.export.files import PartWriter
from corpus.formats.megatron import BLOCK_SIZE, BlockHasher, block_file_bytes, index_bytes
from corpus.model.digest import sha256_hex
from corpus.model.errors import UserError
from corpus.model.facts import SnapshotFacts
from corpus.version.open import Version

SHARDS, LINEAGE, METADATA = "shards", "lineage", "metadata"
REPORT = "decont/report.json"


def shard_files(name: str) -> dict[str, str]:
    """The companions of exported shard ``name``, by role, relative to the export (the snapshot's roles)."""
    return {
        "blocks": f"{SHARDS}/{name}.blocks",
        "idx": f"{SHARDS}/{name}.idx",
        "meta": f"{SHARDS}/{name}.meta.json",
        "lineage": f"{LINEAGE}/{name}.jsonl",
        "lineage_offsets": f"{LINEAGE}/{name}.offsets.npy",
        "metadata": f"{METADATA}/{name}.parquet",
    }


def write_unit(reader: UnitReader, out: PartWriter, token_dtype: str) -> dict[str, Any]:
    """Write one unit's prefix and companions; its ``SnapshotShard`` fields for the export's manifest."""
    name, unit = reader.unit.name, reader.unit
    files = shard_files(name)
    bin_hash, bin_file = BlockHasher(BLOCK_SIZE), out.open(f"{SHARDS}/{name}.bin")
    lineage = out.open(files["lineage"])
    lengths, offsets, doc_ids, rows = [], [0], [], []
    for batch in reader.batches():
        for d in batch:
            data = np.ascontiguousarray(d.tokens, dtype=token_dtype).tobytes()
            bin_file.write(data)
            bin_hash.update(data)
            lineage.write(d.lineage + b"\n")
            offsets.append(offsets[-1] + len(d.lineage) + 1)
            lengths.append(d.tokens.shape[0])
            doc_ids.append(d.row["doc_id"])
            rows.append({**d.row, "shard": name, "index": len(rows)})
    lengths_arr = np.array(lengths, dtype=np.int32)
    idx = index_bytes(lengths_arr, token_dtype)
    out.write(files["idx"], idx)
    block_file = block_file_bytes(bin_hash.block_digests())
    out.write(files["blocks"], block_file)
    offsets_npy = _npy(np.array(offsets, dtype=np.int64))
    out.write(files["lineage_offsets"], offsets_npy)
    table = pa.Table.from_pylist(rows, schema=reader.schema)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=True, store_schema=False)
    out.write(files["metadata"], buf.getvalue())
    tokens = int(lengths_arr.sum(dtype=np.int64))
    meta = {
        "name": name,
        "bucket": unit.bucket,
        "docs": len(doc_ids),
        "tokens": tokens,
        "token_dtype": token_dtype,
        "sha256": bin_file.sha256(),
        "block_size": BLOCK_SIZE,
        "blocks_sha256": sha256_hex(block_file),
        "idx_sha256": sha256_hex(idx),
        "lineage_sha256": lineage.sha256(),
        "lineage_offsets_sha256": sha256_hex(offsets_npy),
        "metadata_sha256": sha256_hex(buf.getvalue()),
        "doc_ids": doc_ids,
        "exported_from": {"shard": unit.shard.name, "sha256": unit.shard.sha256},
    }
    out.write(files["meta"], (json.dumps(meta, sort_keys=True, indent=1) + "\n").encode())
    return {
        "path": f"{SHARDS}/{name}.bin",
        "sha256": meta["sha256"],
        "bucket": unit.bucket,
        "docs": len(doc_ids),
        "tokens": tokens,
        "files": files,
        "block_size": BLOCK_SIZE,
        "blocks_sha256": meta["blocks_sha256"],
    }


def contamination_report(version: Version, out: Path, shards: list[dict[str, Any]]) -> dict[str, str]:
    """The candidates' contamination report, its flagged documents narrowed to the exported ones (a
    version that includes contaminated documents exports them, and says so here); its file reference."""
    facts = SnapshotFacts.of(version.base).contamination_report
    report = json.loads((version.base_dir / facts.path).read_text())
    exported = set()
    for s in shards:
        exported |= set(json.loads((out / s["files"]["meta"]).read_text())["doc_ids"])
    flagged = [d for d in report["flagged_docs"] if d["doc_id"] in exported]
    report = {**report, "flagged_docs": flagged, "docs_flagged_exported": len(flagged)}
    data = (json.dumps(report, indent=1, sort_keys=True) + "\n").encode()
    (out / REPORT).parent.mkdir(parents=True, exist_ok=True)
    (out / REPORT).write_bytes(data)
    return {"path": REPORT, "sha256": sha256_hex(data)}


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def check_weights(weights: dict[str, float], buckets: set[str]) -> None:
    """Weights name only buckets the export has, and at least one is positive."""
    unknown = sorted(set(weights) - buckets)
    if unknown or not any(weights.get(b, 0.0) > 0 for b in buckets):
        raise UserError(
            f"--weights: {'unknown bucket(s) ' + ', '.join(unknown) if unknown else 'every weight is 0'}; "
            f"the export's buckets: {', '.join(sorted(buckets))}"
        )


def blend(
    shards: list[dict[str, Any]], bucket_weights: dict[str, float] | None = None
) -> list[tuple[float, str]]:
    """(weight, prefix) pairs for Megatron's ``--data-path``: each bucket's weight (its share of the
    tokens when none is given) split over its prefixes by their tokens, so sampling by the blend reads
    the bucket as one dataset would. Weights are rounded to 12 digits and sum to 1 up to that rounding."""
    by_bucket: dict[str, int] = {}
    for s in shards:
        by_bucket[s["bucket"]] = by_bucket.get(s["bucket"], 0) + s["tokens"]
    total = sum(by_bucket.values())
    if bucket_weights is None:
        bucket_weights = {b: t / total for b, t in by_bucket.items()}
    check_weights(bucket_weights, set(by_bucket))
    norm = sum(bucket_weights.get(b, 0.0) for b in by_bucket)
    return [
        (
            round(bucket_weights.get(s["bucket"], 0.0) / norm * s["tokens"] / by_bucket[s["bucket"]], 12),
            str(Path(s["path"]).with_suffix("")),
        )
        for s in shards
    ]
