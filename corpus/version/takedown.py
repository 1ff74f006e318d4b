"""Taking documents down: found by id or URL, deselected in a new version, their tokens zeroed in place.

A takedown rewrites only the shards that hold the documents, and only their bytes: each document's
token range in the ``.bin`` is overwritten with zeros (every hard link of the file, the build's stage
output included, sees it), so the ``.idx`` and every other document's offsets stay as they are and a
run reading the version moves onto the new one at a checkpoint as onto any narrower version. The new
block digests go to a new ``.blocks`` file; the build's manifest (whose digest is its id) is never
changed: the version records, per shard rewritten, the documents' ids and indices, the reason and the
digests before and after (``takedowns``), and readers check the bytes against those. See
docs/versions.md ("Taking documents down").
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from corpus.formats.block_layout import BlockLayout, LayoutHasher, shard_block_layout
from corpus.formats.docshard import atomic_write_bytes
from corpus.formats.megatron import block_file_bytes, read_index
from corpus.model.digest import canonical_json, sha256_hex
from corpus.model.errors import UserError
from corpus.version.open import Version

#: bytes read and written at a time while a shard is hashed or zeroed
_CHUNK = 4 << 20
#: the build's own record of its takedowns, beside its candidates' manifest (one JSON record a line,
#: appended): what a build made against it (``--base``) reads, so the next crawl's build reads the
#: rewritten shards against their new digests and never selects the documents again
TAKEDOWN_LOG = "takedowns.jsonl"


def locate(version: Version, doc_ids: list[str], urls: list[str]) -> dict[str, list[tuple[int, str]]]:
    """Per shard (by name), the (index, doc_id) of each live document whose id is in ``doc_ids`` or
    whose URL is in ``urls``, ascending; one that is not found, or already taken down, is refused in
    one line (a takedown never misses a document silently)."""
    con = duckdb.connect()
    con.register("wanted_ids", pa.table({"v": pa.array(sorted(set(doc_ids)), pa.string())}))
    con.register("wanted_urls", pa.table({"v": pa.array(sorted(set(urls)), pa.string())}))
    files = [str(s.metadata) for s in version.live_shards]
    rows = con.execute(
        'SELECT shard, "index", doc_id, url FROM read_parquet(?, union_by_name = true) '
        "WHERE doc_id IN (SELECT v FROM wanted_ids) OR url IN (SELECT v FROM wanted_urls) "
        'ORDER BY shard, "index"',
        [files],
    ).fetchall()
    found_ids, found_urls = {r[2] for r in rows}, {r[3] for r in rows}
    missing = sorted(set(doc_ids) - found_ids) + sorted(set(urls) - found_urls)
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise UserError(
            f"not in {version.snapshot_id}'s live shards: {', '.join(missing[:5])}{more}; nothing taken down"
        )
    removed = version.removed
    out: dict[str, list[tuple[int, str]]] = {}
    for shard, index, doc_id, _ in rows:
        if index in removed.get(shard, ()):
            raise UserError(f"document {doc_id} (shard {shard}) is already taken down")
        out.setdefault(shard, []).append((int(index), doc_id))
    return out


def byte_ranges(idx_path: Path, indices: list[int]) -> list[tuple[int, int]]:
    """The ``[start, end)`` bytes of the ``.bin`` holding documents ``indices``, from the shard's index."""
    index = read_index(idx_path, mmap=True)
    size = np.dtype(index.dtype).itemsize
    return [(int(index.offsets[i]), int(index.offsets[i]) + int(index.lengths[i]) * size) for i in indices]


@dataclass(frozen=True)
class Rewrite:
    """One shard's bytes as they are and as they will be with the documents' ranges zeroed."""

    name: str
    bin_path: Path
    ranges: tuple[tuple[int, int], ...]
    sha256_now: str
    sha256_after: str
    blocks_after: bytes  # the .blocks file's bytes after (empty: the shard has no block digests)


def _zeroed(chunk: bytearray, at: int, ranges: tuple[tuple[int, int], ...]) -> None:
    """Zero the parts of ``ranges`` that fall in ``chunk`` (which starts at byte ``at`` of the file)."""
    for lo, hi in ranges:
        a, b = max(lo, at), min(hi, at + len(chunk))
        if a < b:
            chunk[a - at : b - at] = bytes(b - a)


def plan_rewrite(
    name: str, bin_path: Path, ranges: list[tuple[int, int]], layout: BlockLayout | None
) -> Rewrite:
    """Read the shard once: its digest now, and its digests (whole file and ``layout``'s blocks) once
    zeroed."""
    now, after = hashlib.sha256(), hashlib.sha256()
    blocks = LayoutHasher(layout) if layout is not None else None
    spans = tuple(sorted(ranges))
    with open(bin_path, "rb") as f:
        at = 0
        while chunk := bytearray(f.read(_CHUNK)):
            now.update(chunk)
            _zeroed(chunk, at, spans)
            after.update(chunk)
            if blocks is not None:
                blocks.update(chunk)
            at += len(chunk)
    block_bytes = block_file_bytes(blocks.block_digests()) if blocks is not None else b""
    return Rewrite(name, bin_path, spans, now.hexdigest(), after.hexdigest(), block_bytes)


def takedown_record(
    rewrite: Rewrite,
    located: list[tuple[int, str]],
    reason: str,
    before: dict[str, Any],
    rel: dict[str, str],
) -> dict[str, Any]:
    """The version's record of one shard's takedown; ``before``: the shard's digests as the version
    being taken down from reads it (``sha256``, ``blocks_sha256``); ``rel``: where the rewritten shard's
    new ``blocks`` and ``meta`` files go (relative to the build's snapshot directory)."""
    return {
        "name": rewrite.name,
        "doc_ids": [d for _, d in located],
        "indices": [i for i, _ in located],
        "reason": reason,
        "old_sha256": before["sha256"],
        "old_blocks_sha256": before["blocks_sha256"],
        "sha256": rewrite.sha256_after,
        "blocks": rel["blocks"] if rewrite.blocks_after else "",
        "blocks_sha256": sha256_hex(rewrite.blocks_after) if rewrite.blocks_after else "",
        "meta": rel["meta"],
        "bytes_zeroed": sum(hi - lo for lo, hi in rewrite.ranges),
    }


def plan_takedown(
    version: Version, located: dict[str, list[tuple[int, str]]], reason: str
) -> list[tuple[dict[str, Any], Rewrite, dict[str, bytes]]]:
    """Per shard holding documents of ``located`` (:func:`locate`), in name order: its record, its
    rewrite, and its new files (relative path -> bytes). Reads each shard once; writes nothing."""
    readable = {PurePosixPath(s.path).name.removesuffix(".bin"): s for s in version.readable_base.shards}
    out = []
    for name in sorted(located):
        shard = readable[name]
        if shard.block_sha256:
            raise UserError(
                f"shard {name} lists its block digests in the manifest (an old build): rebuild it"
            )
        ranges = byte_ranges(version.base_dir / shard.files["idx"], [i for i, _ in located[name]])
        rewrite = plan_rewrite(
            name, version.base_dir / shard.path, ranges, shard_block_layout(version.base_dir, shard)
        )
        if rewrite.sha256_now not in (shard.sha256, rewrite.sha256_after):
            raise UserError(f"shard {name}'s bytes are not the ones {version.dir} reads (digests differ)")
        prefix = f"{PurePosixPath(shard.path).parent}/{name}.{rewrite.sha256_after[:16]}"
        rel = {"blocks": f"{prefix}.blocks", "meta": f"{prefix}.meta.json"}
        before = {"sha256": shard.sha256, "blocks_sha256": shard.blocks_sha256}
        record = takedown_record(rewrite, located[name], reason, before, rel)
        meta = json.loads((version.base_dir / shard.files["meta"]).read_text())
        files = {rel["blocks"]: rewrite.blocks_after, rel["meta"]: rewritten_meta(meta, record)}
        out.append((record, rewrite, files))
    return out


def rewritten_meta(meta: dict[str, Any], record: dict[str, Any]) -> bytes:
    """The shard's ``.meta.json`` after the takedown: the digests of its bytes now, the rest as written
    (a validator checks the .bin and its block digests against it)."""
    new = {**meta, "sha256": record["sha256"], "blocks_sha256": record["blocks_sha256"]}
    return json.dumps(new, indent=1, sort_keys=True).encode() + b"\n"


def read_log(snapshot_dir: Path) -> list[dict[str, Any]]:
    """The takedowns recorded beside a build's candidates (:data:`TAKEDOWN_LOG`), oldest first."""
    try:
        lines = (Path(snapshot_dir) / TAKEDOWN_LOG).read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def append_log(snapshot_dir: Path, records: list[dict[str, Any]]) -> None:
    """Append the records not in the log yet (a rerun appends nothing), fsynced."""
    have = {canonical_json(r) for r in read_log(snapshot_dir)}
    new = [canonical_json(r) for r in records if canonical_json(r) not in have]
    if new:
        with open(Path(snapshot_dir) / TAKEDOWN_LOG, "ab") as f:
            f.write(b"".join(line + b"\n" for line in new))
            f.flush()
            os.fsync(f.fileno())


def write_new_file(path: Path, data: bytes) -> None:
    """A rewritten shard's new block digests or meta, beside the old file (which stays: digests only)."""
    if data and not (path.is_file() and path.read_bytes() == data):
        atomic_write_bytes(path, data)


def zero_in_place(rewrite: Rewrite) -> bool:
    """Overwrite the documents' ranges with zeros and fsync; whether anything was written (a rerun
    after a crash finds the bytes zeroed already). Refused when the file is neither as planned nor as
    rewritten (it changed since :func:`plan_rewrite` read it)."""
    with open(rewrite.bin_path, "r+b") as f:
        current = hashlib.sha256()
        while chunk := f.read(_CHUNK):
            current.update(chunk)
        digest = current.hexdigest()
        if digest == rewrite.sha256_after:
            return False
        if digest != rewrite.sha256_now:
            raise UserError(f"{rewrite.bin_path} changed while it was being taken down; run it again")
        for lo, hi in rewrite.ranges:
            f.seek(lo)
            f.write(bytes(hi - lo))
        f.flush()
        os.fsync(f.fileno())
    return True
