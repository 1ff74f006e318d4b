"""Writing an export's parts so that a killed rank never leaves a file half-written under its name.

A unit's files are written under a scratch directory of their own (``.parts/UNIT.tmp``), hashed as they
are written, fsynced, then renamed to their places; the unit's record (``.parts/UNIT.json``: its files'
sha256 and counts) is written last, so a record means the unit is complete and a rerun skips it. A
rerun removes what an interrupted one left in scratch and writes the unit again, with the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from corpus.model.digest import file_sha256
from corpus.model.layout import fsync_dir

PARTS = ".parts"


class HashedFile:
    """A file being written, with the sha256 of what was written."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(path, "wb")  # noqa: SIM115 (closed by PartWriter.finish)
        self.h = hashlib.sha256()
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.f.write(data)
        self.h.update(data)
        self.bytes += len(data)

    def flush(self) -> None:
        self.f.flush()

    def sha256(self) -> str:
        return self.h.hexdigest()

    def close(self) -> None:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()


class PartWriter:
    """The files of one unit, written under scratch and put in place by :meth:`finish`."""

    def __init__(self, root: Path, unit: str) -> None:
        self.root, self.unit = Path(root), unit
        self.scratch = self.root / PARTS / f"{unit}.tmp"
        shutil.rmtree(self.scratch, ignore_errors=True)  # what an interrupted run left
        self.files: dict[str, HashedFile] = {}
        self.paths: list[str] = []

    def open(self, rel: str) -> HashedFile:
        self.files[rel] = HashedFile(self.scratch / rel)
        return self.files[rel]

    def write(self, rel: str, data: bytes) -> None:
        self.open(rel).write(data)

    def path(self, rel: str) -> Path:
        """A scratch path for a writer that needs one of its own (Parquet); hashed at :meth:`finish`."""
        self.paths.append(rel)
        (self.scratch / rel).parent.mkdir(parents=True, exist_ok=True)
        return self.scratch / rel

    def finish(self, record: dict[str, Any]) -> dict[str, Any]:
        """Rename every file into place, then write the unit's record (with each file's sha256 and size)."""
        listed = {}
        for f in self.files.values():
            f.close()
        for rel in self.paths:
            listed[rel] = {
                "sha256": file_sha256(self.scratch / rel),
                "bytes": (self.scratch / rel).stat().st_size,
            }
        listed |= {rel: {"sha256": f.sha256(), "bytes": f.bytes} for rel, f in self.files.items()}
        for rel in sorted(listed):
            final = self.root / rel
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.scratch / rel, final)
        for d in sorted({(self.root / rel).parent for rel in listed}):
            fsync_dir(d)
        record = {**record, "files": dict(sorted(listed.items()))}
        done = part_record_path(self.root, self.unit)
        tmp = done.with_name(done.name + ".tmp")
        tmp.write_text(json.dumps(record, sort_keys=True) + "\n")
        os.replace(tmp, done)
        fsync_dir(done.parent)
        shutil.rmtree(self.scratch, ignore_errors=True)
        return record


def part_record_path(root: Path, unit: str) -> Path:
    return Path(root) / PARTS / f"{unit}.json"


def read_part_record(root: Path, unit: str) -> dict[str, Any] | None:
    """The unit's record, or None while it is not complete."""
    path = part_record_path(root, unit)
    return json.loads(path.read_text()) if path.is_file() else None
