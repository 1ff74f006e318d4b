"""Validation: every way a snapshot on disk differs from its manifest.

:func:`validate_snapshot` re-hashes every file, streamed, in threads; :func:`snapshot_problems` without
``rehash`` checks only what costs no data read (presence, sizes, each shard's index), as assembly does.
See docs/snapshot.md ("The snapshot").
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from corpus.decont.doc_grams import DOC_GRAM_INDEX, DOC_GRAM_RECORD
from corpus.formats.doc_index import DOC_INDEX_RECORD
from corpus.formats.megatron import IndexedShard
from corpus.model import SnapshotManifest, SnapshotShard
from corpus.model.digest import file_sha256
from corpus.model.facts import SnapshotFacts
from corpus.snapshot.layout import BASE_DOC_INDEX
from corpus.snapshot.lookup import Snapshot


def validate_snapshot(directory: Path, workers: int | None = None) -> list[str]:
    """Every way the snapshot on disk differs from its manifest (empty when it is intact): every file
    re-hashed, streamed, ``workers`` files at a time (hashlib releases the GIL on large buffers)."""
    snap = Snapshot(directory)
    return snapshot_problems(snap.dir, snap.manifest, rehash=True, workers=workers)


#: the partitioned artifacts of fixed-width records: (record size, what a part listing counts)
_RECORD_PARTS = {
    DOC_GRAM_INDEX: (DOC_GRAM_RECORD.itemsize, "rows"),
    "doc_index": (DOC_INDEX_RECORD.itemsize, "docs"),
    BASE_DOC_INDEX: (DOC_INDEX_RECORD.itemsize, "docs"),
}


def _artifact_files(m: SnapshotManifest) -> list[tuple[str, str, str, int | None]]:
    """(artifact name, path, sha256, size it must have or None) of every artifact file."""
    files = []
    for name, art in sorted(SnapshotFacts.of(m).artifacts.items()):
        if "parts" in art:
            itemsize, count = _RECORD_PARTS.get(name, (None, ""))
            for part in art["parts"]:
                size = itemsize * part[count] if itemsize and count in part else None
                files.append((name, part["path"], part["sha256"], size))
        else:
            files.append((name, art["path"], art["sha256"], None))
    return files


def _shard_problems(
    directory: Path,
    s: SnapshotShard,
    token_dtype: str,
    problems: list[str],
    to_hash: list[tuple[Path, str, str]],
) -> None:
    """One shard's checks that cost no data read, into ``problems``; the files to re-hash into ``to_hash``."""
    bin_path = directory / s.path
    if not bin_path.is_file():
        problems.append(f"{s.path}: missing")
        return
    to_hash.append((bin_path, s.sha256, f"{s.path}: sha256 does not match the manifest"))
    meta_path = directory / s.files["meta"]
    if not meta_path.is_file():
        problems.append(f"{s.files['meta']}: missing")
        return
    meta = json.loads(meta_path.read_text())
    if meta.get("sha256") != s.sha256:
        problems.append(f"{s.files['meta']}: its .bin sha256 is not the manifest's")
    for role, key in (
        ("idx", "idx_sha256"),
        ("lineage", "lineage_sha256"),
        ("lineage_offsets", "lineage_offsets_sha256"),
    ):
        p = directory / s.files[role]
        if not p.is_file():
            problems.append(f"{s.files[role]}: missing or its sha256 does not match {s.files['meta']}")
        else:
            to_hash.append(
                (p, meta[key], f"{s.files[role]}: missing or its sha256 does not match {s.files['meta']}")
            )
    if s.blocks_sha256:  # the block digests the loader verifies reads with
        p = directory / s.files["blocks"]
        why = f"{s.files['blocks']}: missing or its sha256 does not match the manifest"
        if not p.is_file():
            problems.append(why)
        else:
            to_hash.append((p, s.blocks_sha256, why))
    try:
        shard = IndexedShard(bin_path.with_suffix(""))
    except ValueError as e:
        problems.append(str(e))
        return
    if len(shard) != s.docs or shard.index.num_tokens != s.tokens:
        problems.append(
            f"{s.path}: {len(shard)} docs / {shard.index.num_tokens} tokens, manifest says "
            f"{s.docs} / {s.tokens}"
        )
    if shard.index.dtype != np.dtype(token_dtype):
        problems.append(f"{s.path}: dtype {shard.index.dtype}, manifest says {token_dtype}")


def snapshot_problems(
    directory: Path, m: SnapshotManifest, rehash: bool = True, workers: int | None = None
) -> list[str]:
    """Every way the files under ``directory`` differ from manifest ``m``. With ``rehash`` every file is
    re-hashed against its recorded sha256 (in ``workers`` threads); without, only what costs no data
    read is checked: presence, sizes, each shard's index and metadata (one shard at a time)."""
    problems: list[str] = []
    to_hash: list[tuple[Path, str, str]] = []  # (file, expected sha256, what to say when it differs)
    for s in m.shards:
        _shard_problems(directory, s, m.token_dtype, problems, to_hash)
    for name, rel, sha, size in _artifact_files(m):
        p = directory / rel
        if not p.is_file():
            problems.append(f"required artifact {name} ({rel}) is missing")
            continue
        if size is not None and p.stat().st_size != size:
            problems.append(f"artifact {name} ({rel}): {p.stat().st_size} bytes, the manifest says {size}")
        to_hash.append((p, sha, f"artifact {name} ({rel}): sha256 does not match the manifest"))
    if SnapshotFacts.of(m).contamination_report is None:
        problems.append("the snapshot has no contamination report")
    tok = directory / m.tokenizer.get("path", "")
    if not tok.is_file():
        problems.append(f"tokenizer {m.tokenizer.get('path')}: missing or not the pinned artifact")
    else:
        to_hash.append(
            (
                tok,
                m.tokenizer.get("sha256", ""),
                f"tokenizer {m.tokenizer.get('path')}: missing or not the pinned artifact",
            )
        )
    if rehash:
        with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool:
            digests = pool.map(lambda item: file_sha256(item[0]), to_hash)
            problems += [say for (_, want, say), got in zip(to_hash, digests, strict=True) if got != want]
    return problems
