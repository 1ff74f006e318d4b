"""Step ``signatures`` (and ``holdout_signatures``): a part per input shard (per holdout file) with
its documents' doc_ids, representative keys, MinHash signatures and band rows sorted by bucket part.

A code document gets the empty text signature, so it is never banded with text; its line-set
signature and files go to the repository graph instead (``.code_docs``, ``.code_files``). A part whose
files no longer match its marker's digests is redone. docs/dedup.md "MinHash".
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from corpus.code.repo_dedup import (
    FILE_ROUTE,
    code_doc_dtype,
    document_files,
    document_rank_fields,
    file_hashes,
    line_hashes,
)
from corpus.decont.holdout import HoldoutFile
from corpus.dedup.candidates import part_of_hash
from corpus.dedup.order import doc_id_bytes, encode_representative_key
from corpus.dedup.records import BAND_ROW, DOC_ID_BYTES, REP_KEY_BYTES, graph_nodes, shard_tag
from corpus.formats.docshard import iter_docs
from corpus.model import Document
from hpc_jobs.minhash_dedup.base_links import base_partition_of
from hpc_jobs.minhash_dedup.phase import (
    BAND_OFFSETS,
    BANDS,
    HELD_SIGNATURES,
    PASS_FILES,
    SIG_FILES,
    SIGNATURES,
    Run,
)
from mpi_kernels.minhash import MinHasher, is_empty
from runtime.global_phase import PartWriter
from runtime.input_shard import InputShard
from runtime.runner import assign

#: the tier whose documents are repositories: deduplicated as repositories, never as text
CODE_TIER = "code"
#: the shard tag of a held-out page's node is the tag of this prefix + its holdout file's name
HELD_TAG = "holdout/"
#: a signature part's code documents (``code_doc_dtype`` rows) and their files' content hashes
CODE_DOCS, CODE_FILES = ".code_docs", ".code_files"


def signatures(run: Run) -> None:
    """Step ``signatures``, a part per input shard (a part whose files are damaged is redone)."""
    phase, groups = run.phase, len(run.text.groups)
    # 1. each rank forgets its damaged parts (files unlike their marker's digests)
    for shard in assign(run.inputs, phase.ctx.rank, phase.ctx.size):
        phase.verified_part(SIGNATURES, shard.name)
    # 2. the parts missing
    phase.map(SIGNATURES, run.inputs, lambda s, w: write_signatures(run, s, w, groups))


def holdout_signatures(run: Run) -> None:
    """Step ``holdout_signatures``: the held-out pages, a part per holdout file."""
    groups = len(run.text.groups)
    run.phase.map(
        HELD_SIGNATURES,
        run.held,
        lambda f, w: write_signatures(run, f, w, groups, HELD_TAG + f.name, "holdout_"),
    )


def write_signatures(
    run: Run, shard: InputShard | HoldoutFile, writer: PartWriter, groups: int, tag: str = "", facts: str = ""
) -> dict[str, Any]:
    """A signature part: doc_ids, representative keys, signatures and sorted band rows of the
    documents of ``shard``, their nodes tagged ``tag`` (the shard's name by default); the facts'
    names begin with ``facts``. A code document (an input shard's) gets the empty text signature,
    so it is never banded with text, and goes to the repository graph instead: its line-set
    signature and rank fields (``.code_docs``) and its files' content hashes (``.code_files``)."""
    hasher = run.hasher
    ids, rep, sigs, batch, cells, text_bytes = [], [], [], [], [], []
    code = CodeRows(hasher, len(run.repo.names), shard.name) if not tag else None
    for i, doc in enumerate(iter_docs(shard.path)):
        ids.append(doc_id_bytes(doc.doc_id))
        rep.append(encode_representative_key(doc))
        cells.append("\t".join(doc.group))
        text_bytes.append(len(doc.text.encode("utf-8")))
        if code is not None and doc.source_tier == CODE_TIER:
            code.add(i, doc)
            batch.append("")  # no units: the empty signature
        else:
            batch.append(doc.text)
        if len(batch) >= run.config.batch_docs:
            sigs.append(hasher.signatures(batch))
            batch = []
    if batch or not sigs:
        sigs.append(hasher.signatures(batch))
    if code is not None:
        code.write(writer)
    arrays = (
        np.frombuffer(b"".join(ids), np.uint8).reshape(-1, DOC_ID_BYTES),
        np.frombuffer(b"".join(rep), np.uint8).reshape(-1, REP_KEY_BYTES),
        np.concatenate(sigs),
    )
    for suffix, array in zip(SIG_FILES, arrays, strict=True):
        np.save(writer.open(suffix), array, allow_pickle=False)
    passing = (np.array(cells, dtype=np.str_), np.array(text_bytes, dtype=np.int64))
    for suffix, array in zip(PASS_FILES, passing, strict=True):
        np.save(writer.open(suffix), array, allow_pickle=False)
    part_of = partial(base_partition_of, run.index.base) if run.probed else None
    rows = band_rows(hasher, arrays[0], arrays[2], tag or shard.name, groups, part_of)
    write_band_rows(writer, rows, groups)
    code_docs = code.count if code is not None else 0
    return {
        f"{facts}docs": len(ids),
        f"{facts}docs_without_shingles": int(is_empty(arrays[2]).sum()) - code_docs,
        **({"code_docs": code_docs} if code is not None else {}),
    }


def band_rows(
    hasher: MinHasher,
    ids: np.ndarray,
    sigs: np.ndarray,
    shard_name: str,
    groups: int,
    part_of: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """Every band key of every document with shingles, as BAND_ROW rows sorted by (part, key, node): a
    bucket part reads one contiguous run of them. A key's part is ``part_of(keys)`` ((n, 18) bytes)
    when given (against a base: the band index's partition), else a hash of it mod ``groups``."""
    live = np.flatnonzero(~is_empty(sigs))
    keys = hasher.band_keys(sigs[live])  # (n, bands, 18): band index (2 bytes), then a hash
    bands = keys.shape[1]
    flat = keys.reshape(-1, keys.shape[2])
    rows = np.empty(len(flat), dtype=BAND_ROW)
    rows["part"] = part_of(flat) if part_of is not None else part_of_hash(flat[:, 2:], groups)
    rows["key"] = np.ascontiguousarray(flat).view(f"V{flat.shape[1]}").reshape(-1)
    rows["node"] = np.repeat(graph_nodes(ids[live], live, shard_name), bands)
    return rows[np.argsort(rows.view(f"V{BAND_ROW.itemsize}").reshape(-1), kind="stable")]


def write_band_rows(writer: PartWriter, rows: np.ndarray, groups: int) -> None:
    """A signature part's band rows (sorted by part) and where each bucket part's run of them begins."""
    writer.open(BANDS).write(rows.tobytes())
    offsets = np.searchsorted(rows["part"], np.arange(groups + 1)).astype(np.int64)
    np.save(writer.open(BAND_OFFSETS), offsets, allow_pickle=False)


class CodeRows:
    """The code documents of one shard as the repository graph needs them: a ``code_doc_dtype`` row per
    document (its part = its repository's, by a hash of the repository id) and a FILE_ROUTE row per
    distinct file content hash. Held for one shard, as the shard's text signatures are: a document's
    line set is reduced to its signature as soon as it is read."""

    def __init__(self, hasher: MinHasher, parts: int, shard_name: str) -> None:
        self.hasher, self.parts, self.tag = hasher, parts, shard_tag(shard_name)
        self.dtype = code_doc_dtype(hasher.params.num_perm)
        self.docs: list[tuple] = []
        self.sigs: list[np.ndarray] = []
        self.files: list[np.ndarray] = []

    @property
    def count(self) -> int:
        return len(self.docs)

    def add(self, ordinal: int, doc: Document) -> None:
        files = document_files(doc)
        repo, tier, release = document_rank_fields(doc)
        self.docs.append((repo, tier, release, ordinal, len(files)))
        lines = line_hashes(files)
        self.sigs.append(self.hasher.set_signatures(lines, np.array([0, len(lines)]))[0])
        self.files.append(file_hashes(files))

    def write(self, writer: PartWriter) -> None:
        n = len(self.docs)
        rows = np.empty(n, dtype=self.dtype)
        if n:
            sigs = np.stack(self.sigs)
            repos = np.frombuffer(b"".join(d[0] for d in self.docs), np.uint8).reshape(n, -1)
            rows["part"] = part_of_hash(repos, self.parts)
            rows["repo"] = repos.view(f"V{repos.shape[1]}").reshape(-1)
            rows["tier"] = [d[1] for d in self.docs]
            rows["release"] = np.frombuffer(b"".join(d[2] for d in self.docs), f"V{len(self.docs[0][2])}")
            rows["ordinal"] = [d[3] for d in self.docs]
            rows["shard_tag"] = np.void(self.tag)
            rows["files"] = [d[4] for d in self.docs]
            rows["sig"] = np.ascontiguousarray(sigs).view(self.dtype["sig"]).reshape(-1)
        writer.open(CODE_DOCS).write(rows.tobytes())
        counts = [len(f) for f in self.files]
        files = np.empty(sum(counts), dtype=FILE_ROUTE)
        if len(files):
            files["part"] = np.repeat(rows["part"], counts)
            files["repo"] = np.repeat(rows["repo"], counts)
            files["hash"] = np.concatenate(self.files)
        writer.open(CODE_FILES).write(files.tobytes())
