"""A version's manifest and its directory: bitmaps and the shard table first, the manifest (whose presence
means complete) last.

The id (``snapshot_id``) digests everything in the manifest but ``run_info``, the shard table through its
facts (:mod:`corpus.version.table`), so the same selection of the same build has the same id wherever the
directories are. See docs/versions.md ("Versions").
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from corpus.formats.docshard import atomic_write_bytes
from corpus.model.digest import canonical_json, json_digest, sha256_hex
from corpus.model.errors import UserError
from corpus.model.layout import (
    BUILD_CONFIG,
    MANIFEST,
    STAGES_DIR,
    VERSIONS_DIR,
    beside,
    fsync_dir,
    install_dir,
)
from corpus.model.shard_table import KEYS, LINES
from corpus.select.selection import Selection
from corpus.version.buckets import VersionBuckets, recorded_buckets
from corpus.version.open import BITS_SUFFIX, SELECTION_DIR, VERSION_FORMAT, StoredShard, Version, pack_bits
from corpus.version.table import table_bytes


def token_counts(con: duckdb.DuckDBPyConnection, shard: StoredShard) -> np.ndarray:
    """Each document's tokens, in the shard's order, from its metadata table (one connection for all
    shards: one per shard costs ~40 % of making a version of 40 shards)."""
    rows = con.execute(
        'SELECT tokens FROM read_parquet(?) ORDER BY "index"', [str(shard.metadata)]
    ).fetchnumpy()
    return rows["tokens"]


def _bits_for(name: str, docs: int, bits: dict[str, np.ndarray], gone: set[str]) -> np.ndarray:
    """A shard's selection: none at all once it is tombstoned."""
    return np.zeros(docs, dtype=bool) if name in gone else bits[name]


def shard_entry(
    s: StoredShard,
    sel: np.ndarray,
    con: duckdb.DuckDBPyConnection,
    buckets: VersionBuckets | None,
    gone: set[str],
) -> tuple[dict[str, Any], tuple[int, int]]:
    """One shard's manifest entry (``sel``: its selection; tokens read from its metadata table only when
    it selects something), and the (documents, tokens) it selects that no bucket by predicate takes."""
    tokens = token_counts(con, s) if sel.any() else np.zeros(s.docs, dtype=np.int64)
    entry = {
        "name": s.name,
        "bucket": s.bucket,
        "sha256": s.sha256,
        "metadata_sha256": s.metadata_sha256 if s.name not in gone else None,
        "docs": s.docs,
        "selected_docs": int(sel.sum()),
        "selected_tokens": int(tokens[sel].sum()),
        "bitmap": f"{SELECTION_DIR}/{s.name}{BITS_SUFFIX}",
        "bitmap_sha256": sha256_hex(pack_bits(sel)),
    }
    if buckets is None:
        return entry, (0, 0)
    entry["buckets"] = {}
    left = sel.copy()
    for k, b in enumerate(buckets.defs):
        pair = buckets.pair(s.name, s.docs, k, gone)
        left &= ~pair
        entry["buckets"][b.name] = {
            "docs": int(pair.sum()),
            "tokens": int(tokens[pair].sum()),
            "bitmap": f"{SELECTION_DIR}/{s.name}.{b.name}{BITS_SUFFIX}",
            "bitmap_sha256": sha256_hex(pack_bits(pair)),
        }
    return entry, (int(left.sum()), int(tokens[left].sum()))


def shard_entries(
    shards: tuple[StoredShard, ...],
    bits: dict[str, np.ndarray],
    gone: set[str],
    buckets: VersionBuckets | None,
) -> list[tuple[dict[str, Any], tuple[int, int]]]:
    """:func:`shard_entry` of each of ``shards``, in order, on one connection."""
    con = duckdb.connect()
    return [shard_entry(s, _bits_for(s.name, s.docs, bits, gone), con, buckets, gone) for s in shards]


def version_manifest(
    version: Version,
    selection: Selection,
    bits: dict[str, np.ndarray],
    tombstones: list[dict[str, Any]],
    policy_reasons: dict[str, int] | None = None,
    buckets: VersionBuckets | None = None,
    takedowns: list[dict[str, Any]] | None = None,
    blocklisted: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The manifest (without ``run_info``) of the version selecting ``bits`` of ``version``'s build;
    a tombstoned shard selects nothing (its files may be gone). ``policy_reasons``: the stored documents
    its policy rejects, by reason (what the yield alarms and the data card read). ``buckets``: the
    selection's buckets by predicate (:func:`assign_buckets`); for a selection with buckets and none
    given, ``version``'s own as made (:func:`recorded_buckets`). ``takedowns``: the documents taken
    down (none given: ``version``'s own, which every version made from it keeps). ``blocklisted``: per
    category of the selection's blocklists, the stored documents it lists."""
    if selection.buckets and buckets is None:
        buckets = recorded_buckets(version)
    gone = {t["name"] for t in tombstones}
    entries = shard_entries(version.shards, bits, gone, buckets)
    return assemble_manifest(
        version, selection, entries, tombstones, policy_reasons, buckets, takedowns, blocklisted
    )


def assemble_manifest(
    version: Version,
    selection: Selection,
    entries: list[tuple[dict[str, Any], tuple[int, int]]],
    tombstones: list[dict[str, Any]],
    policy_reasons: dict[str, int] | None,
    buckets: VersionBuckets | None,
    takedowns: list[dict[str, Any]] | None = None,
    blocklisted: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The manifest from every shard's entry (:func:`shard_entry`, in ``version.shards``' order, made by
    one process or by the ranks owning the shards) and its id. ``takedowns``: as for
    :func:`version_manifest`; recorded only when there are some (so a version without any keeps the id
    it had before takedowns existed). The entries are its ``shards``, which :func:`finish_version_dir`
    writes to the shard table beside ``manifest.json``; the id digests the table's facts."""
    takedowns = version.takedowns if takedowns is None else takedowns
    listed = [entry for entry, _ in entries]
    names = [b.name for b in buckets.defs] if buckets is not None else []
    digested = {
        "format": VERSION_FORMAT,
        "base_snapshot_id": version.base.snapshot_id,
        "selection": selection.canonical(),
        "selection_sha256": selection.digest,
        "shard_table": table_bytes(listed, names, {t["name"] for t in tombstones})[2],
        # the totals a report reads without the table
        "selected_docs": sum(e["selected_docs"] for e in listed),
        "selected_tokens": sum(e["selected_tokens"] for e in listed),
        "tombstones": sorted(tombstones, key=lambda t: t["name"]),
    }
    if takedowns:
        digested["takedowns"] = takedowns  # in the order they were made: a shard's last is its current
    if blocklisted is not None:
        digested["blocklisted"] = dict(sorted(blocklisted.items()))
    if policy_reasons is not None:
        digested["policy_reasons"] = dict(sorted(policy_reasons.items()))
    if buckets is not None:
        digested["buckets"] = [
            {"name": b.name, "where": b.where, "resolved": r}
            for b, r in zip(buckets.defs, buckets.resolved, strict=True)
        ]
        digested["unbucketed_docs"] = sum(docs for _, (docs, _) in entries)
        digested["unbucketed_tokens"] = sum(tokens for _, (_, tokens) in entries)
    return {**digested, "snapshot_id": json_digest(digested), "shards": listed}


def begin_version_dir(out: Path) -> Path:
    """The directory beside ``out`` a version is written into (then renamed to ``out`` whole), made."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    new = beside(out)
    (new / SELECTION_DIR).mkdir(parents=True)
    return new


def write_bitmaps(
    new: Path,
    entries: list[dict[str, Any]],
    bits: dict[str, np.ndarray],
    gone: set[str],
    buckets: VersionBuckets | None,
) -> None:
    """The bitmaps of the shards of ``entries`` (manifest entries), each shard's then its buckets',
    written and fsynced into ``new``: all of them by one process, or each rank its own shards'."""
    for s in entries:
        _write_durably(new / s["bitmap"], pack_bits(_bits_for(s["name"], s["docs"], bits, gone)))
        for k, b in enumerate(buckets.defs if "buckets" in s else ()):
            pair = buckets.pair(s["name"], s["docs"], k, gone)
            _write_durably(new / s["buckets"][b.name]["bitmap"], pack_bits(pair))


def finish_version_dir(
    new: Path,
    out: Path,
    manifest: dict[str, Any],
    base_dir: Path,
    run_info: dict[str, Any] | None = None,
    replace: bool = False,
) -> bool:
    """The shard table and then the manifest written into ``new`` (its bitmaps all there), then ``new``
    renamed to ``out`` (:func:`write_version` says when); whether ``out`` was written."""
    out = Path(out)
    fsync_dir(new / SELECTION_DIR)
    names = [b["name"] for b in manifest.get("buckets", [])]
    gone = {t["name"] for t in manifest["tombstones"]}
    keys, lines, facts = table_bytes(manifest["shards"], names, gone)
    if facts != manifest["shard_table"]:
        raise ValueError("a version's entries are not the ones its manifest's id digests")
    _write_durably(new / LINES, lines)
    _write_durably(new / KEYS, keys)
    # the same path from ``out`` as from ``new``: they are siblings
    run_info = {**(run_info or {}), "base": os.path.relpath(base_dir.resolve(), out.resolve())}
    written = {k: v for k, v in manifest.items() if k != "shards"}
    atomic_write_bytes(new / MANIFEST, canonical_json({**written, "run_info": run_info}) + b"\n")
    if replace:
        return install_dir(new, out)
    try:
        os.rename(new, out)  # onto a missing or empty directory only
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            raise
        raise UserError(f"{out} is not empty: a version is written into a new directory") from None
    fsync_dir(out.parent)
    return True


def write_version(
    version: Version,
    manifest: dict[str, Any],
    bits: dict[str, np.ndarray],
    out: Path,
    base_dir: Path,
    run_info: dict[str, Any] | None = None,
    buckets: VersionBuckets | None = None,
    replace: bool = False,
) -> bool:
    """Bitmaps first (a shard's, then its buckets'), the manifest last (its presence means complete), all
    in a directory beside ``out`` renamed to ``out`` whole; nothing of the build is touched. ``out`` must
    be new or empty (:class:`UserError` otherwise) unless ``replace`` (a build's default version, under
    the build's lock): then an ``out`` with the same manifest bytes is left untouched, another one
    replaced. Whether ``out`` was written. ``run_info`` (not covered by the id) records where the build
    lives and facts such as dates. ``buckets``: as for :func:`version_manifest`."""
    if "buckets" in manifest and buckets is None:
        buckets = recorded_buckets(version)
    new = begin_version_dir(out)
    try:
        gone = {t["name"] for t in manifest["tombstones"]}
        write_bitmaps(new, manifest["shards"], bits, gone, buckets)
        return finish_version_dir(new, out, manifest, base_dir, run_info, replace)
    finally:
        shutil.rmtree(new, ignore_errors=True)


def _write_durably(path: Path, data: bytes) -> None:
    """A file of a directory no reader sees yet (renamed in whole once complete): written and fsynced."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def refuse_version_out(out: Path, holding_a_version: bool = False) -> None:
    """A version is written into a new (or empty) directory of its own: refused, in one line, inside a
    build (but under its ``versions/``) and inside a snapshot, version or stage directory, where it would
    replace or mix with what is there (``--out BUILD/candidates`` would replace the build's manifest).
    ``holding_a_version``: ``out`` holds a version (the caller checks it is the same one)."""
    target = Path(out).resolve()
    if not holding_a_version and target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UserError(f"--out {out} is not empty: a version is written into a new directory")
    for d in target.parents:
        if (d / BUILD_CONFIG).is_file() or (d / STAGES_DIR).is_dir():
            rel = target.relative_to(d).parts
            if rel[0] != VERSIONS_DIR or len(rel) != 2:
                raise UserError(
                    f"--out {out} is inside build {d}: a version of a build goes in a directory of its own "
                    f"(or in {d / VERSIONS_DIR}/NAME)"
                )
            return
        if (d / MANIFEST).is_file():
            raise UserError(f"--out {out} is inside {d}, which holds a manifest: use a directory of its own")
