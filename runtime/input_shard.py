"""A stage's unit of work (:class:`InputShard`): a previous stage's shard, a raw input file, a piece of
a large file, or a bundle of small files that ingest reads as one unit.

A raw input is named by its stem and content digest, and recorded in a manifest by its file name only,
so neither names nor digests depend on where the inputs or the build live. A bundle is recorded as
its files, so a manifest lists every file read, bundled or not (``corpus build --base`` skips a file a
base ingested by its digest).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from corpus.model import ShardRef
from corpus.model.digest import canonical_json, sha256_hex
from corpus.text.inputs import display_name, open_regular
from runtime.progress import unit_weight


@dataclass(frozen=True)
class InputShard:
    """One unit of work: a document shard of the previous stage, a raw input (a file, a piece of one)
    or a bundle of raw input files."""

    name: str  # the output shard takes this name
    path: Path
    sha256: str
    records: int = -1  # -1 where unknown (raw files)
    #: the bytes [start, end) of ``path`` this unit reads (a large file cut at record boundaries), or None
    span: tuple[int, int] | None = None
    #: a raw input's input root (a path given to ``--in``; the input itself when named directly), which
    #: its declarations and globs are relative to (corpus.text.inputs); None for a previous stage's shard
    root: Path | None = None
    #: a bundle's files, read in this order (``path`` and ``root`` are the first one's); () otherwise
    members: tuple[InputShard, ...] = ()
    #: a previous stage's shard's text bytes, as that stage's manifest counts them; -1 for a raw input
    text_bytes: int = -1

    @property
    def content_id(self) -> str:
        """What the unit reads: the file's sha256, and the span where it is a piece of a file (the units
        of one file differ; identical files, or one span of identical files, share it). The start is
        zero-padded, so ids order as the units lie in the file."""
        return self.sha256 if self.span is None else f"{self.sha256}:{self.span[0]:016d}-{self.span[1]:016d}"

    @property
    def files(self) -> tuple[InputShard, ...]:
        """The inputs the unit reads, in order: a bundle's members, else the unit itself."""
        return self.members or (self,)

    @cached_property
    def weight(self) -> int:
        """The bytes the unit reads (its progress weight): its files' sizes, looked at once (the bundler,
        the assignment and the progress board each ask: a stat per file each time at 10^4 files). A
        bundle's is its members' as they carry it (each sized by the rank that digested it, the value
        travelling with it), so no rank stats a bundle's files again."""
        if self.members:
            return sum(m.weight for m in self.members)
        return unit_weight(self.path, self.span)

    @property
    def size(self) -> int:
        """What ranks are dealt by (:func:`runtime.runner.assign`): a previous stage's shard's text bytes
        (known without a stat), else the bytes the unit reads."""
        return self.text_bytes if self.text_bytes >= 0 else self.weight


def raw_input_shard(path: Path) -> InputShard:
    """A raw input file as a unit of work, named by its stem and content digest (stable anywhere; a
    name that is not UTF-8 loses those bytes in the stem, never in the digest). Read only if it is a
    regular file when opened (corpus.text.inputs.open_regular): a FIFO is refused, never waited on."""
    with open_regular(path) as f:
        sha = hashlib.file_digest(f, "sha256").hexdigest()
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", path.name.split(".")[0]).strip("-") or "input"
    return InputShard(name=f"{stem}-{sha[:12]}", path=path, sha256=sha)


def bundle(files: list[InputShard]) -> InputShard:
    """Raw input files as one unit, named by its first file's stem, its file count and a digest of its
    files' names and contents (a file alone stays itself)."""
    if len(files) == 1:
        return files[0]
    sha = sha256_hex(canonical_json([[f.name, f.content_id] for f in files]))
    stem = files[0].name.rsplit("-", 1)[0]
    first = files[0]
    return InputShard(
        name=f"{stem}-x{len(files)}-{sha[:12]}",
        path=first.path,
        sha256=sha,
        root=first.root,
        members=tuple(files),
    )


def input_refs(shard: InputShard, stages_root: Path) -> list[ShardRef]:
    """What a manifest records of a unit's inputs: a previous stage's shard by its path in the build; a
    raw input by its file name only (its display form where it is not UTF-8), so the manifest (and the
    snapshot id) never depends on where the inputs or the build directory live; a bundle as its files."""
    root = stages_root.resolve()
    refs, dirs = [], {}
    for f in shard.files:
        path = resolved(f.path, dirs)  # one spelling: a link or `..` is not another place
        shown = (
            display_name(str(path.relative_to(root)))
            if path.is_relative_to(root)
            else display_name(f.path.name)
        )
        refs.append(ShardRef(path=shown, sha256=f.sha256, records=f.records))
    return refs


def resolved(path: Path, dirs: dict[Path, Path]) -> Path:
    """``path.resolve()`` with its directory resolved once for the files of one unit (``dirs``: resolving
    walks every component, a system call each, and a bundle's files share a directory); the file itself
    followed where it is a link."""
    if path.name in ("", ".", "..") or path.is_symlink():
        return path.resolve()
    if path.parent not in dirs:
        dirs[path.parent] = path.parent.resolve()
    return dirs[path.parent] / path.name
