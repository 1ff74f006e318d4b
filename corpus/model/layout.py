"""The build directory layout: every directory and file name a build, a stage and a snapshot use.

One module knows where things live, so a stage, the runner, snapshot assembly, the report and the CLI
never spell a path of their own. The tree, directory by directory: docs/architecture.md (*The build
directory*).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path

MANIFEST = "manifest.json"
BUILD_CONFIG = "build-config.json"
STAGES_DIR = "stages"
SNAPSHOT_DIR = "snapshot"
CANDIDATES_DIR = "candidates"
#: in a delta's candidates: the relative symbolic link to its base's candidates, which the listed paths
#: of the base's files go through (corpus.snapshot)
BASE_CANDIDATES = "base"
#: the build's persistent dedup indexes, one directory per kind (``exact``, ``band``, ``recrawl``)
DEDUP_INDEX_DIR = "dedup_index"
#: which base build the indexes were forked from, and the labels its index held then
DEDUP_BASE = "base.json"
#: the build's commit record, written last: its sequence among builds (what orders the latest base), the
#: stage manifests and config it was finished from and its manifests' digests (a rerun that finds them
#: unchanged writes nothing)
COMMITTED = "committed.json"
#: the one place inside a build where a version may be written (``<build>/versions/<name>``)
VERSIONS_DIR = "versions"
#: the jobs ``corpus submit`` queued for a build, in order (what ``corpus status`` asks SLURM about), and
#: the directory of their logs and exit records
SUBMITTED = "submitted.json"
JOB_LOGS = "logs"

# inside a stage directory
SHARDS = "shards"
FILTERED = "filtered"
QUARANTINE = "quarantine"
STATS = "stats"
WORK = "work"
#: the one-writer lock of a stage directory (held while a job writes it; runtime.output_lock)
WRITER_LOCK = ".writer.lock"
#: the per-input-shard document outputs of every stage, in the order the runner writes them
DOC_OUTPUT_KINDS = (SHARDS, FILTERED, QUARANTINE)
# write_shards' artifacts
MEGATRON = "megatron"
LINEAGE = "lineage"
#: write_shards' per-document metadata tables (one Parquet file per token shard; the same in the snapshot)
METADATA = "metadata"
#: the doc_id index parts (write_shards, under LINEAGE; the snapshot keeps the same relative path)
DOC_INDEX_DIR = "doc_index"
DOC_INDEX_SUFFIX = ".docidx"


def stage_dir(build_dir: Path, stage: str) -> Path:
    return Path(build_dir) / STAGES_DIR / stage


def snapshot_dir(build_dir: Path) -> Path:
    return Path(build_dir) / SNAPSHOT_DIR


def candidates_dir(build_dir: Path) -> Path:
    return Path(build_dir) / CANDIDATES_DIR


def dedup_index_dir(build_dir: Path, kind: str) -> Path:
    """The build's persistent dedup index of ``kind`` (``exact``, ``band`` or ``recrawl``)."""
    return Path(build_dir) / DEDUP_INDEX_DIR / kind


#: the artifact of index records a stage writes inside a build (``index_records/PART.KIND.rec``): the
#: build's own generation of that kind's persistent index, which the build's last step commits
INDEX_RECORDS = "index_records"


def dedup_base_path(build_dir: Path) -> Path:
    return Path(build_dir) / DEDUP_INDEX_DIR / DEDUP_BASE


def base_build_of(build_dir: Path) -> tuple[Path, str] | None:
    """The base a build was made against (``corpus build --base``) and its label (the base candidates'
    id), from ``dedup_index/base.json``; None for a build without one. The path is stored relative to the
    build, so the two builds can move together."""
    record = dedup_base_path(build_dir)
    if not record.is_file():
        return None
    found = json.loads(record.read_text())
    return Path(build_dir) / found["base"], found["label"]


def base_chain(build_dir: Path) -> list[Path]:
    """The builds a build was made against, nearest first: its base, the base's base, ... (each once:
    a chain that loops back ends there)."""
    chain, seen, build = [], {Path(build_dir).resolve()}, Path(build_dir)
    while (found := base_build_of(build)) is not None and found[0].resolve() not in seen:
        build = found[0]
        seen.add(build.resolve())
        chain.append(build)
    return chain


def build_dir_of_stage(stage_directory: Path) -> Path | None:
    """The build a stage directory belongs to (``<build>/stages/<stage>``), or None for a stage run on
    its own elsewhere: a stage finds the build's dedup index through it, never through its config, so
    where a build lives never enters a config hash."""
    parent = Path(stage_directory).resolve().parent
    return parent.parent if parent.name == STAGES_DIR else None


def committed_path(build_dir: Path) -> Path:
    return Path(build_dir) / COMMITTED


def manifest_path(directory: Path) -> Path:
    """The manifest of a stage directory or of a snapshot directory."""
    return Path(directory) / MANIFEST


def submitted_path(build_dir: Path) -> Path:
    return Path(build_dir) / SUBMITTED


def build_config_path(build_dir: Path) -> Path:
    return Path(build_dir) / BUILD_CONFIG


def stats_path(stage_directory: Path, shard_name: str) -> Path:
    return Path(stage_directory) / STATS / f"{shard_name}.json"


def work_dir(stage_directory: Path) -> Path:
    return Path(stage_directory) / WORK


def link_file(src: Path, dst: Path) -> None:
    """Give ``src`` the published name ``dst``: a hard link (a copy where links are impossible), made
    under a temporary name and renamed, so a reader sees the old file or the new one. Stages only ever
    replace files, never rewrite them, so a link keeps the bytes it was made with."""
    src, dst = Path(src), Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists() and os.path.samefile(src, dst):
        return
    tmp = dst.with_name(f".{dst.name}.link.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def fsync_dir(path: Path) -> None:
    """Make the names in directory ``path`` durable (a rename is not, until its directory is fsynced)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def beside(final: Path, what: str = "tmp") -> Path:
    """A new name beside ``final`` for a directory written whole, then renamed in (``.NAME.tmp.PID.RANDOM``:
    a lock's sweep removes one of a process that is gone, runtime.output_lock)."""
    final = Path(final)
    return final.with_name(f".{final.name}.{what}.{os.getpid()}.{secrets.token_hex(4)}")


def install_dir(new: Path, final: Path) -> bool:
    """Put directory ``new`` (written beside ``final``) in ``final``'s place, unless ``final`` already has
    the same ``manifest.json`` bytes (then ``final`` is left untouched; the caller removes ``new``); whether
    it did. An older ``final`` is renamed aside and removed once ``new`` is in, so a reader of ``final``
    finds the old directory or the new one, whole. The caller holds the build's lock."""
    final = Path(final)
    old = manifest_path(final)
    if old.is_file() and old.read_bytes() == manifest_path(new).read_bytes():
        return False
    aside = beside(final, "old") if final.exists() else None
    if aside is not None:
        os.rename(final, aside)
    os.rename(new, final)
    fsync_dir(final.parent)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return True
