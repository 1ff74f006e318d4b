"""Opening a snapshot by path or id, and its index-based lookups (no scan of the data).

``--snapshot REF``: a snapshot directory, its ``manifest.json`` or a build directory is used as is;
anything else is an id (``sha256:<hex>`` or a unique hex prefix of 8 or more) looked up under
``--root`` or ``$CORPUS_SNAPSHOTS``. A version opens the candidates it selects from. See docs/snapshot.md
("Naming a snapshot", "Lineage").
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from corpus.decont.doc_grams import DocGramIndex
from corpus.formats.doc_index import PartitionedDocIndex
from corpus.formats.megatron import read_index
from corpus.model import SnapshotManifest
from corpus.model.errors import UserError
from corpus.model.facts import PartitionedIndex, SnapshotFacts
from corpus.model.layout import MANIFEST
from corpus.snapshot.layout import REPORT
from corpus.version.open import is_version, open_version

SNAPSHOTS_ENV = "CORPUS_SNAPSHOTS"


def _manifest_in(path: Path) -> Path | None:
    for candidate in (path / MANIFEST, path / "snapshot" / MANIFEST):
        if candidate.is_file():
            return candidate
    return path if path.is_file() and path.name == MANIFEST else None


def _normalize_id(ref: str) -> str:
    hexpart = ref.removeprefix("sha256:").lower()
    if len(hexpart) < 8 or any(c not in "0123456789abcdef" for c in hexpart):
        raise UserError(
            f"--snapshot {ref!r} is neither a snapshot directory nor a snapshot id "
            f"(sha256:<hex> or at least 8 hex characters)"
        )
    return hexpart


def resolve_snapshot(ref: str, root: str | Path | None = None) -> Path:
    """The directory of the snapshot that ``ref`` names (the rules: this module's docstring)."""
    found = _manifest_in(Path(ref))
    if found is not None:
        return found.parent
    hexpart = _normalize_id(ref)
    root = root or os.environ.get(SNAPSHOTS_ENV)
    if not root:
        raise UserError(
            f"snapshot {ref} is an id: say where snapshots live with --root DIR or ${SNAPSHOTS_ENV}"
        )
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"snapshots root {root} is not a directory")
    candidates = [
        root / MANIFEST,
        *sorted(root.glob(f"*/{MANIFEST}")),
        *sorted(root.glob(f"*/snapshot/{MANIFEST}")),
    ]
    hits = []
    for c in candidates:
        if c.is_file():
            try:
                sid = json.loads(c.read_text()).get("snapshot_id", "")
            except (OSError, ValueError):
                continue
            if sid.removeprefix("sha256:").startswith(hexpart):
                hits.append(c.parent)
    ids = {json.loads((h / MANIFEST).read_text())["snapshot_id"] for h in hits}
    if not hits:
        raise UserError(f"no snapshot {ref} under {root}")
    if len(ids) > 1:
        raise UserError(f"snapshot id prefix {ref} is ambiguous under {root}: {', '.join(sorted(ids))}")
    return hits[0]


class Snapshot:
    """An opened snapshot: its manifest and index-based lookups (no scans of the data). Opening a
    version (a build's default version included) opens the stored candidates it selects from."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        if is_version(self.dir):  # a version (a build's snapshot/ is one): its files are its build's
            self.dir = open_version(self.dir).base_dir
        try:
            self.manifest = SnapshotManifest.from_dict(
                json.loads((self.dir / MANIFEST).read_text()), self.dir
            )
        except FileNotFoundError as e:
            raise UserError(f"{self.dir} is not a snapshot (no {MANIFEST})") from e
        except ValueError as e:
            raise UserError(f"{self.dir / MANIFEST}: {e}") from e
        self.names = [Path(s.path).name.removesuffix(".bin") for s in self.manifest.shards]
        self._starts: dict[int, np.ndarray] = {}

    @classmethod
    def open(cls, ref: str, root: str | Path | None = None) -> Snapshot:
        return cls(resolve_snapshot(ref, root))

    @property
    def snapshot_id(self) -> str:
        return self.manifest.snapshot_id

    def shard_number(self, shard: str | int) -> int:
        if isinstance(shard, int) or str(shard).isdigit():
            i = int(shard)
            if not 0 <= i < len(self.names):
                raise UserError(f"shard {i} out of range: the snapshot has {len(self.names)} shards")
            return i
        name = str(shard).removeprefix("shards/").removesuffix(".bin")
        if name not in self.names:
            raise UserError(
                f"no shard {shard!r} in snapshot {self.snapshot_id}; shards: "
                f"{', '.join(self.names[:8])}{' …' if len(self.names) > 8 else ''}"
            )
        return self.names.index(name)

    def token_starts(self, i: int) -> np.ndarray:
        if i not in self._starts:
            self._starts[i] = read_index(self.dir / self.manifest.shards[i].files["idx"]).token_starts()
        return self._starts[i]

    def lineage(self, i: int, doc: int) -> dict[str, Any]:
        files = self.manifest.shards[i].files
        offsets = np.load(self.dir / files["lineage_offsets"], mmap_mode="r")
        start, end = int(offsets[doc]), int(offsets[doc + 1])
        with open(self.dir / files["lineage"], "rb") as f:
            f.seek(start)
            return json.loads(f.read(end - start))

    def trace(self, shard: str | int, offset: int) -> dict[str, Any]:
        """The document behind token ``offset`` of a shard, with its lineage."""
        i = self.shard_number(shard)
        starts = self.token_starts(i)
        total = int(starts[-1])
        if not 0 <= offset < total:
            raise UserError(f"offset {offset} out of range: shard {self.names[i]} holds {total} tokens")
        doc = int(np.searchsorted(starts, offset, side="right")) - 1
        sh = self.manifest.shards[i]
        tokens = np.memmap(self.dir / sh.path, dtype=self.manifest.token_dtype, mode="r")
        token = int(tokens[offset])
        return {
            "snapshot_id": self.snapshot_id,
            "shard": self.names[i],
            "bucket": sh.bucket,
            "offset": offset,
            "token_id": token,
            "is_eos": token == self.manifest.tokenizer.get("eos_id"),
            "doc_index": doc,
            "doc_token_start": int(starts[doc]),
            "doc_tokens": int(starts[doc + 1] - starts[doc]),
            "offset_in_doc": offset - int(starts[doc]),
            "doc": describe_doc(self.lineage(i, doc)),
        }

    def locate(self, doc_id: str) -> tuple[str, int] | None:
        """(shard name, document number) of a doc_id: one memory-mapped part of each doc_id index (a
        delta's candidates: its bases' too, oldest first, so a document keeps the place it was first
        stored at), one binary search each until one holds it."""
        for index in self.doc_indexes():
            found = index.locate(doc_id)
            if found is not None:
                return self.names[found[0]], found[1]
        return None

    def doc_index(self) -> PartitionedDocIndex:
        """The doc_id index of the documents this build stored (a delta's new ones only)."""
        return self._opened(SnapshotFacts.of(self.manifest).doc_indexes()[-1])

    def doc_indexes(self) -> list[PartitionedDocIndex]:
        """Every doc_id index the shard list is addressed by: the inherited ones (oldest first), then
        this build's. Their shard numbers are places in this manifest's shard list."""
        return [self._opened(index) for index in SnapshotFacts.of(self.manifest).doc_indexes()]

    def _opened(self, index: PartitionedIndex) -> PartitionedDocIndex:
        return PartitionedDocIndex([self.dir / ref.path for ref, _ in index.parts], index.prefix_bits)

    def doc_gram_index(self) -> tuple[DocGramIndex, dict[str, Any]]:
        """The per-document 8-gram index the build kept (its memory-mapped parts: a check reads the pages
        its binary searches touch) and its listing: ``rule``, ``n``, ``min_run``, ``min_item_words`` (what a
        check after the build applies), ``rows``, ``prefix_bits``, ``parts``. Read from this directory
        only, so a snapshot copied away from its build is checked the same."""
        art = SnapshotFacts.of(self.manifest).doc_gram_index
        if art is None:
            version = self.manifest.stage_versions.get("decontaminate", {}).get("version", "?")
            raise UserError(
                f"snapshot {self.snapshot_id} carries no per-document 8-gram index (decontaminate version "
                f"{version}; a snapshot carries it from version 6): rebuild from decontaminate"
            )
        paths = [self.dir / p["path"] for p in art["parts"]]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise UserError(
                f"the per-document 8-gram index of {self.dir} is incomplete: {', '.join(missing[:3])} missing"
            )
        return DocGramIndex(paths, int(art["prefix_bits"])), art

    def contamination_report(self) -> dict[str, Any]:
        return json.loads((self.dir / REPORT).read_text())


def describe_doc(record: dict[str, Any]) -> dict[str, Any]:
    """A lineage record as ``corpus trace`` shows it: identity, origin, filter values, dedup, license."""
    filters = {
        f"{a['stage']}.{a['name']}": {"value": a["value"], "verdict": a["verdict"]}
        for a in record.get("annotations", [])
    }
    keys = (
        "doc_id",
        "source",
        "source_tier",
        "url",
        "crawl_date",
        "lang",
        "lang_confidence",
        "license_hint",
        "dup_cluster_id",
        "dup_cluster_size",
        "dup_of",
        "derived_from",
        "raw_digest",
        "text_digest",
        "text_bytes",
    )
    return {**{k: record.get(k) for k in keys}, "scores": record.get("scores", {}), "filter_values": filters}
