"""Reading a unit's selected documents from the stored candidates: tokens, metadata row, lineage, text.

Everything read is checked against what the version vouches for: each 4 MiB block of tokens a document
touches against the shard's block digests (once per block), and, for the text formats, the text decoded
from the tokens against the document's ``text_digest`` (the build's tokenizer is byte-level, so decoding
a document's tokens without its EOS gives back its stored text exactly). A document whose decoded text
does not match is not exported: it is quarantined with that reason and counted, so exported +
quarantined = selected for every unit. Memory: one batch of documents and the shard's block digests.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from corpus.export.units import ExportUnit
from corpus.formats.block_layout import shard_block_layout
from corpus.formats.megatron import IndexedShard, read_block_file
from corpus.model import SnapshotManifest, SnapshotShard
from corpus.model.digest import text_digest
from corpus.model.errors import UserError
from corpus.version.open import Version

#: documents read, checked and decoded at a time (the tokenizer decodes a batch in parallel)
BATCH_DOCS = 1024
#: why a document is quarantined by an export
TEXT_MISMATCH = "decoded_text_digest_mismatch"


@dataclass(frozen=True)
class SelectedDocument:
    """One exported document, as stored."""

    index: int  # its place in the stored shard
    tokens: np.ndarray  # as stored, the EOS included when the build appends one
    row: dict[str, Any]  # its metadata row (docs/versions.md, "The metadata table")
    lineage: bytes  # its lineage record, one JSON line without the newline
    text: str | None  # its text, decoded and checked (None when the format needs no text)


def stored_shard(base: SnapshotManifest, name: str) -> SnapshotShard:
    return next(s for s in base.shards if Path(s.path).name.removesuffix(".bin") == name)


class BlockCheck:
    """The shard's token blocks, each checked against its digest the first time a document touches it."""

    def __init__(self, root: Path, shard: SnapshotShard, tokens: np.ndarray) -> None:
        self.bytes = tokens.view(np.uint8) if tokens.size else np.zeros(0, np.uint8)
        self.layout = shard_block_layout(root, shard) if shard.blocks_sha256 else None
        self.digests = None
        if self.layout is not None:
            self.digests = read_block_file(root / shard.files["blocks"], shard.blocks_sha256)
        self.checked: set[int] = set()
        self.name = Path(shard.path).name

    def check(self, lo: int, hi: int) -> None:
        """Bytes [lo, hi) of the shard are about to be exported."""
        if self.digests is None or self.layout is None:
            return
        for b in self.layout.covering(lo, hi):
            if b in self.checked:
                continue
            start, end = self.layout.span(b)
            if hashlib.sha256(self.bytes[start:end]).digest() != bytes(self.digests[b]):
                raise UserError(f"{self.name}: block {b} does not match its digest (the shard has changed)")
            self.checked.add(b)


class UnitReader:
    """The selected documents of one unit, in stored order, in batches."""

    def __init__(self, version: Version, unit: ExportUnit, tokenizer: Any | None, eos_id: int | None) -> None:
        self.unit, self.tokenizer, self.eos_id = unit, tokenizer, eos_id
        root = version.base_dir
        self.stored = stored_shard(version.readable_base, unit.shard.name)  # takedowns' digests
        self.shard = IndexedShard(root / self.stored.path.removesuffix(".bin"))
        self.blocks = BlockCheck(root, self.stored, self.shard.tokens)
        self.lineage_path = root / self.stored.files["lineage"]
        self.offsets = np.load(root / self.stored.files["lineage_offsets"], mmap_mode="r")
        self.metadata = pq.ParquetFile(unit.shard.metadata)
        self.selected = unit.selected(version)
        self.quarantined: list[dict[str, Any]] = []

    @property
    def schema(self) -> pa.Schema:
        return self.metadata.schema_arrow

    def batches(self) -> Iterator[list[SelectedDocument]]:
        """Lists of at most :data:`BATCH_DOCS` documents, stored order; quarantined ones left out."""
        start = 0
        with open(self.lineage_path, "rb") as lineage:
            for table in self.metadata.iter_batches(batch_size=BATCH_DOCS):
                rows = table.to_pylist()
                picked = np.flatnonzero(self.selected[start : start + len(rows)])
                docs = [self._read(start + int(i), rows[int(i)], lineage) for i in picked]
                start += len(rows)
                if docs:
                    yield self._with_text(docs)

    def _read(self, i: int, row: dict[str, Any], lineage: Any) -> SelectedDocument:
        tokens = self.shard.document(i)
        lo = int(self.shard.index.offsets[i])
        self.blocks.check(lo, lo + tokens.nbytes)
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        lineage.seek(a)
        return SelectedDocument(i, np.array(tokens), row, lineage.read(b - a).rstrip(b"\n"), None)

    def _with_text(self, docs: list[SelectedDocument]) -> list[SelectedDocument]:
        if self.tokenizer is None:
            return docs
        ids = [self._body(d.tokens).tolist() for d in docs]
        texts = self.tokenizer.decode_batch(ids, skip_special_tokens=False)
        kept = []
        for d, text in zip(docs, texts, strict=True):
            if text_digest(text) != d.row["text_digest"]:
                self.quarantined.append({"doc_id": d.row["doc_id"], "reason": TEXT_MISMATCH})
                continue
            kept.append(SelectedDocument(d.index, d.tokens, d.row, d.lineage, text))
        return kept

    def _body(self, tokens: np.ndarray) -> np.ndarray:
        if self.eos_id is not None and tokens.size and int(tokens[-1]) == self.eos_id:
            return tokens[:-1]
        return tokens


def build_tokenizer(version: Version) -> tuple[Any, int | None]:
    """The build's own tokenizer (the candidates' copy, checked against the manifest), and its EOS id
    when the build appends one to every document. Loaded and checked once per process, not per unit."""
    info = version.base.tokenizer
    eos = info.get("eos_id") if info.get("documents_end_with_eos") else None
    return _tokenizer(str(version.base_dir / info["path"]), info["sha256"].removeprefix("sha256:")), eos


@functools.lru_cache(maxsize=2)
def _tokenizer(path: str, sha256: str) -> Any:
    from tokenizers import Tokenizer

    if hashlib.sha256(Path(path).read_bytes()).hexdigest() != sha256:
        raise UserError(f"{path}: the tokenizer does not match the candidates' manifest")
    return Tokenizer.from_file(path)
