"""A build's lock and its commit record: what makes a rerun of a complete build a no-op, and what orders builds.

Two runs into one build directory (two ``corpus build``, a DAG's finalize beside a build by hand) would
interleave candidates, default version and index commit: every step of a build holds the directory's
lock. The commit record (``committed.json``), written last, says what the build was finished from; a
rerun that finds the same stages and config writes nothing, so its files keep their bytes, inodes and
mtimes. Its sequence number, not a file's mtime, says which build is the latest base (docs/incremental.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from corpus.formats.docshard import atomic_write_json
from corpus.model import StageManifest
from corpus.model.digest import file_sha256
from corpus.model.errors import UserError
from corpus.model.layout import (
    DEDUP_INDEX_DIR,
    STAGES_DIR,
    base_build_of,
    build_config_path,
    candidates_dir,
    committed_path,
    manifest_path,
    snapshot_dir,
)
from runtime.logline import LogRecord, emit
from runtime.output_lock import LockHeld, holding


@contextmanager
def build_lock(out: Path) -> Iterator[None]:
    """The build directory's one-writer lock (``OUT/.writer.lock``, runtime.output_lock) for the block:
    a second build, finish or prepare of the same directory is refused in one line while a live process
    holds it. Taken again inside, it is held until the outermost block ends. Taking it sweeps what killed
    writers left beside the build's files (the stages and the indexes keep their own)."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        with holding(out, say, sweep_skip=(STAGES_DIR, DEDUP_INDEX_DIR)):
            yield
    except LockHeld as e:
        raise UserError(str(e)) from None


#: who speaks in the build's own lines (``corpus build: stage 1/9 ingest on 2 rank(s)``)
BUILD = "corpus build"


def say(line: str, event: str = "log", stage: str | None = None, **fields: Any) -> None:
    """One line of the build (not of a stage's ranks): ``corpus build: line``, or its JSON object."""
    emit(LogRecord(message=line, event=event, source=BUILD, stage=stage, fields=fields))


def commit_facts(out: Path, manifests: list[StageManifest]) -> dict[str, Any]:
    """What a build's commit record says it was finished from, and the digests of what it wrote."""
    base = base_build_of(out)
    return {
        "stages": {m.stage: m.digest for m in manifests},
        "build_config_sha256": file_sha256(build_config_path(out)),
        "base_label": base[1] if base is not None else None,
        "candidates_sha256": file_sha256(manifest_path(candidates_dir(out))),
        "snapshot_sha256": file_sha256(manifest_path(snapshot_dir(out))),
    }


def committed_as(out: Path, manifests: list[StageManifest]) -> dict[str, Any] | None:
    """The build's commit record if it was finished from ``manifests`` and the config as they are now,
    and its candidates and default version are the ones it wrote; else None (finish it)."""
    record = build_commit(out)
    if record is None:
        return None
    try:
        facts = commit_facts(out, manifests)
    except OSError:
        return None
    return record if all(record.get(k) == v for k, v in facts.items()) else None


def build_commit(build_dir: Path) -> dict[str, Any] | None:
    """A build's commit record (``committed.json``: written last, once its index is committed), or None
    for a build not finished (or finished before builds kept one)."""
    try:
        record = json.loads(committed_path(build_dir).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("sequence"), int) else None


def next_sequence(out: Path) -> int:
    """The sequence number of a commit now: above every committed build beside ``out`` and above its
    base's (wherever that lies). Two builds committed at once beside each other may share one; the
    directory name then orders them (:func:`runtime.build.latest_build`)."""
    here = out.resolve()
    others = [d for d in here.parent.iterdir() if d != here]
    base = base_build_of(out)
    seen = [build_commit(d) for d in [*others, *([base[0]] if base else [])]]
    return 1 + max((r["sequence"] for r in seen if r is not None), default=0)


def record_commit(out: Path, manifests: list[StageManifest], snapshot_id: str) -> dict[str, Any]:
    """The build's last write: its commit record, with the next sequence number (:func:`next_sequence`)."""
    record = commit_facts(out, manifests) | {"sequence": next_sequence(out), "snapshot_id": snapshot_id}
    atomic_write_json(committed_path(out), record)
    return record
