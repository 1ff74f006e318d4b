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
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from corpus.formats.docshard import atomic_write_bytes
from corpus.formats.megatron import BlockHasher, block_file_bytes, read_index
from corpus.model.digest import sha256_hex
from corpus.model.errors import UserError
from corpus.version.open import Version

#: bytes read and written at a time while a shard is hashed or zeroed
_CHUNK = 4 << 20


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


def plan_rewrite(name: str, bin_path: Path, ranges: list[tuple[int, int]], block_size: int) -> Rewrite:
    """Read the shard once: its digest now, and its digests (whole file and blocks) once zeroed."""
    now, after = hashlib.sha256(), hashlib.sha256()
    blocks = BlockHasher(block_size) if block_size > 0 else None
    spans = tuple(sorted(ranges))
    with open(bin_path, "rb") as f:
        at = 0
        while chunk := bytearray(f.read(_CHUNK)):
            now.update(chunk)
            _zeroed(chunk, at, spans)
            after.update(chunk)
            if blocks is not None:
                blocks.update(bytes(chunk))
            at += len(chunk)
    block_bytes = block_file_bytes(blocks.block_digests()) if blocks is not None else b""
    return Rewrite(name, bin_path, spans, now.hexdigest(), after.hexdigest(), block_bytes)


def takedown_record(
    rewrite: Rewrite,
    located: list[tuple[int, str]],
    reason: str,
    before: dict[str, Any],
    blocks_rel: str,
) -> dict[str, Any]:
    """The version's record of one shard's takedown; ``before``: the shard's digests as the version
    being taken down from reads it (``sha256``, ``blocks_sha256``)."""
    return {
        "name": rewrite.name,
        "doc_ids": [d for _, d in located],
        "indices": [i for i, _ in located],
        "reason": reason,
        "old_sha256": before["sha256"],
        "old_blocks_sha256": before["blocks_sha256"],
        "sha256": rewrite.sha256_after,
        "blocks": blocks_rel if rewrite.blocks_after else "",
        "blocks_sha256": sha256_hex(rewrite.blocks_after) if rewrite.blocks_after else "",
        "bytes_zeroed": sum(hi - lo for lo, hi in rewrite.ranges),
    }


def write_blocks(path: Path, rewrite: Rewrite) -> None:
    """The rewritten shard's block digests, a new file beside the old one (which stays: digests only)."""
    if rewrite.blocks_after and not (path.is_file() and path.read_bytes() == rewrite.blocks_after):
        atomic_write_bytes(path, rewrite.blocks_after)


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
