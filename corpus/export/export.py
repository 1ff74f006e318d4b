"""An export of a version: its request, one unit at a time, and the manifest that makes it whole.

``corpus export VERSION --format F --out DIR`` (hpc_jobs/export runs it across ranks). The request
(version id, format, options) is recorded in ``DIR/.parts/request.json`` before anything is written, so
a rerun into DIR resumes that export and refuses another. Each unit is written by one rank
(:func:`export_unit`); rank 0 then writes the manifest (:func:`finish_export`): a ``corpus-snapshot/1``
manifest for Megatron (the export is a snapshot of the selected documents), else ``corpus-export/1``
listing every file with its sha256. Either way its id covers the version id, the options and every
file's digest, and never where the export lies. docs/export.md.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from corpus.export import jsonl, megatron, parquet
from corpus.export.documents import UnitReader, build_tokenizer
from corpus.export.files import PARTS, PartWriter, read_part_record
from corpus.export.units import ExportUnit
from corpus.formats.snapshot_manifest import write_snapshot_manifest
from corpus.model import SnapshotManifest, SnapshotShard
from corpus.model.digest import json_digest
from corpus.model.errors import UserError
from corpus.model.layout import MANIFEST
from corpus.version.open import Version

FORMATS = ("megatron", "parquet", "jsonl")
EXPORT_FORMAT = "corpus-export/1"
#: the export step's version, in a Megatron export's stage_versions
EXPORT_VERSION = "1"
REQUEST = "request.json"


def request(
    version: Version, fmt: str, added: str | None, weights: dict[str, float] | None
) -> dict[str, Any]:
    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}: one of {', '.join(FORMATS)}")
    return {
        "format": fmt,
        "version_id": version.snapshot_id,
        "base_snapshot_id": version.base.snapshot_id,
        "options": {"added": added, "weights": weights},
    }


def begin(out: Path, req: dict[str, Any]) -> bool:
    """Record the request in ``out`` (new, empty, or holding the same export); False when the same
    export is complete there already."""
    out = Path(out)
    done = out / MANIFEST
    if done.is_file():
        manifest = json.loads(done.read_text())
        have = manifest.get("export") or manifest.get("extra", {}).get("export")
        if have == req:
            return False
        what = f"{have['format']} of {have['version_id']}" if have else "something else"
        raise UserError(f"{out} holds another export ({what}); use a new --out")
    path = out / PARTS / REQUEST
    if path.is_file():
        if json.loads(path.read_text()) != req:
            raise UserError(f"{out} holds the parts of another export; use a new --out or remove it")
        return True
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} is not empty; an export goes in a new or empty directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(req, sort_keys=True) + "\n")
    return True


def export_unit(
    version: Version, unit: ExportUnit, req: dict[str, Any], out: Path, scores: list[str]
) -> dict[str, Any]:
    """Write one unit (unless its record says it is done); its record. ``scores``: the score columns of
    every exported shard (:func:`corpus.export.parquet.score_columns`), for the Parquet schema."""
    done = read_part_record(out, unit.name)
    if done is not None:
        return done
    fmt = req["format"]
    tokenizer, eos = build_tokenizer(version) if fmt != "megatron" else (None, None)
    reader = UnitReader(version, unit, tokenizer, eos)
    writer = PartWriter(out, unit.name)
    if fmt == "megatron":
        result = {"shard": megatron.write_unit(reader, writer, version.base.token_dtype)}
    elif fmt == "parquet":
        result = parquet.write_unit(reader, writer, scores)
    else:
        result = jsonl.write_unit(reader, writer, req["options"]["added"])
    if reader.quarantined:
        lines = "".join(
            json.dumps({**q, "unit": unit.name}, sort_keys=True) + "\n" for q in reader.quarantined
        )
        writer.write(f"quarantine/{unit.name}.jsonl", lines.encode())
    shard = result.get("shard", result)
    return writer.finish(
        {
            "unit": unit.name,
            "bucket": unit.bucket,
            "shard": unit.shard.name,
            "selected": unit.docs,
            "docs": shard["docs"],
            "tokens": shard["tokens"],
            "quarantined": len(reader.quarantined),
            **result,
        }
    )


def _counts(records: list[dict[str, Any]]) -> dict[str, Any]:
    buckets: dict[str, dict[str, int]] = {}
    for r in records:
        b = buckets.setdefault(r["bucket"], {"docs": 0, "tokens": 0})
        b["docs"] += r["docs"]
        b["tokens"] += r["tokens"]
    return {
        "buckets": dict(sorted(buckets.items())),
        "docs": sum(r["docs"] for r in records),
        "tokens": sum(r["tokens"] for r in records),
        "selected": sum(r["selected"] for r in records),
        "quarantined": sum(r["quarantined"] for r in records),
    }


def finish_export(version: Version, req: dict[str, Any], out: Path, records: list[dict[str, Any]]) -> str:
    """Write the manifest (and the format's extras) from the units' records, in unit order; the id."""
    out = Path(out)
    counts = _counts(records)
    if req["format"] == "megatron":
        export_id = _finish_megatron(version, req, out, records, counts)
    else:
        files = [
            {"path": path, **entry, "unit": r["unit"], "bucket": r["bucket"]}
            for r in records
            for path, entry in r["files"].items()
        ]
        digested = {"format": EXPORT_FORMAT, "export": req, **counts, "files": files}
        export_id = json_digest(digested)
        if req["format"] == "parquet":
            card = parquet.dataset_card(
                export_id, req["version_id"], list(counts["buckets"]), counts["docs"], counts["tokens"]
            )
            (out / "README.md").write_text(card)
        _write_manifest(out, {**digested, "export_id": export_id})
    shutil.rmtree(out / PARTS)
    return export_id


def _finish_megatron(
    version: Version, req: dict[str, Any], out: Path, records: list[dict[str, Any]], counts: dict[str, Any]
) -> str:
    tok = dict(version.base.tokenizer)
    tok_src = version.base_dir / tok["path"]
    (out / tok["path"]).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tok_src, out / tok["path"])
    shards = [r["shard"] for r in records]
    weighted = megatron.blend(shards, req["options"]["weights"])
    report = megatron.contamination_report(version, out, shards)
    manifest = SnapshotManifest(
        shards=tuple(SnapshotShard(**s) for s in shards),
        stage_versions={
            **version.base.stage_versions,
            "export": {"version": EXPORT_VERSION, "from_version": req["version_id"]},
        },
        seed=version.base.seed,
        token_dtype=version.base.token_dtype,
        tokenizer=tok,
        extra={
            "export": req,
            **counts,
            "blend": [[w, p] for w, p in weighted],
            "artifacts": {"contamination_report": report},
        },
        split=True,
    )
    (out / "megatron").mkdir(exist_ok=True)
    # where the export lies now: a convenience for Megatron's --data-args-path, outside the manifest
    args = " ".join(f"{w} {(out / p).resolve()}" for w, p in weighted)
    (out / "megatron" / "data-args.txt").write_text(args + "\n")
    write_snapshot_manifest(out, manifest)
    return manifest.snapshot_id


def _write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    tmp = out / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    tmp.replace(out / MANIFEST)
