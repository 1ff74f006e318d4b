"""The immutable snapshot: assembly from a finished build, validation, lookup by id, and lineage.

Layout of ``<build>/snapshot/`` (self-contained: copy the directory and it still opens)::

    manifest.json                        SnapshotManifest; snapshot_id = digest of its canonical form
    shards/<bucket>-<NNNNN>.bin / .idx   Megatron-LM indexed dataset, one sequence per document
    shards/<bucket>-<NNNNN>.meta.json    bucket, counts, doc_ids in order, sha256s, validation numbers
    lineage/<shard>.jsonl / .offsets.npy each document's metadata (no text) and its byte offset
    metadata/<shard>.parquet             the per-document metadata table (corpus.formats.metadata; versions)
    lineage/doc_index/dNNNNN.docidx      doc_id -> (shard, document), part NNNNN of the doc_id prefixes
    copies/<input shard>.jsonl.zst       each exact copy's provenance, pointing at its stored keeper
    decont/report.json                   the per-benchmark contamination report (required)
    decont/8gram_docs/gNNNNN.dgr         the per-document 8-gram index, part NNNNN of the hash prefixes
    tokenizer/<name>                     the pinned tokenizer artifact (the tokenize stage's copy)

A delta build's candidates (``corpus build --base``, docs/incremental.md) also list the base candidates'
shards, copies and doc_id indexes, *by reference*: ``base`` in the candidates directory is a relative
symbolic link to the base's candidates (``../../BASE/candidates``: the two builds move together) and
the listed paths go through it (``base/shards/…``), their sha256 the base's, nothing copied or
rewritten. Through the link, the paths (which the id digests) do not depend on where the builds lie,
and every reader's ``dir / path`` finds the base's files. The base's shards come first (write_shards
numbered the delta's after them) and ``extra.base`` names the base candidates. A base that was itself
a delta passes its own base's on (``base/base/…``), so the list starts with the oldest build's shards.

Both indexes (the doc_id index, and the per-document 8-gram index a contamination check reads) are
built range-partitioned by the stages (write_shards' and decontaminate's global phases) and only
*linked* here: assembly holds one shard's metadata at a time, never an index, and takes every digest
from the stage manifests (computed by the writing ranks as they wrote), so it reads no data file.
:func:`validate_snapshot` re-hashes every file, in parallel threads, each one streamed.

Files are hard-linked from the build's stage directories (copied where links are impossible; stages
only ever replace files, never rewrite them, so a link keeps the bytes it was made with); the tokenizer
is the tokenize stage's copy (``tokenizer/<name>``), linked likewise: nothing outside the build is read,
and no path from a config enters the manifest. A rebuild into the same build directory replaces
``snapshot/``: to keep a snapshot, move or copy it under a snapshots root.

How ``--snapshot REF`` resolves (:func:`resolve_snapshot`): a path to a snapshot directory, to its
``manifest.json`` or to a build directory (``<build>/snapshot``) is used as is; anything else is a
snapshot id (``sha256:<hex>``, or a unique prefix of the hex of at least 8 characters) looked up under
the snapshots root, ``--root DIR`` or else ``$CORPUS_SNAPSHOTS``: every ``ROOT/manifest.json``,
``ROOT/*/manifest.json`` and ``ROOT/*/snapshot/manifest.json`` whose recorded id matches.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from corpus.decont.doc_grams import DOC_GRAM_INDEX, DOC_GRAM_RECORD, DocGramIndex
from corpus.decont.report import FLAGGED, build_report
from corpus.formats.doc_index import DOC_INDEX_RECORD, PartitionedDocIndex
from corpus.formats.docshard import SUFFIX, atomic_write_bytes, iter_docs
from corpus.formats.megatron import IndexedShard, read_index
from corpus.model import SnapshotManifest, SnapshotShard, StageManifest
from corpus.model.digest import file_sha256, sha256_hex
from corpus.model.errors import UserError
from corpus.model.facts import (
    DecontaminationFacts,
    MissingFacts,
    PartitionedIndex,
    WriteShardsFacts,
    tokenizer_facts,
)
from corpus.model.layout import (
    BASE_CANDIDATES,
    MANIFEST,
    SNAPSHOT_DIR,
    base_build_of,
    candidates_dir,
    link_file,
    stage_dir,
)
from corpus.version import is_version, open_version

REPORT = "decont/report.json"
#: exact_dedup's copies/ (one file per input shard with copies), under the same name in the snapshot
COPIES_DIR = "copies"
#: decontaminate's per-document 8-gram index parts (its ``doc_gram_index/``), linked
GRAM_DOCS_DIR = "decont/8gram_docs"
DOC_INDEX_DIR = "lineage/doc_index"
#: the doc_id indexes of the base candidates a delta's candidates inherit (oldest first; each part says
#: which index it belongs to, ``prefix_bits`` lists each index's)
BASE_DOC_INDEX = "base_doc_index"
SNAPSHOTS_ENV = "CORPUS_SNAPSHOTS"
REQUIRED_STAGES = ("decontaminate", "tokenize", "write_shards")
#: the shard files and where they go in the snapshot (suffix -> role in SnapshotShard.files, directory)
_SHARD_FILES = {
    ".bin": (None, "shards"),
    ".idx": ("idx", "shards"),
    ".meta.json": ("meta", "shards"),
    ".jsonl": ("lineage", "lineage"),
    ".offsets.npy": ("lineage_offsets", "lineage"),
    ".parquet": ("metadata", "metadata"),
}
#: which sha256 of a shard's .meta.json vouches for each of its files
_META_DIGESTS = {
    ".bin": "sha256",
    ".idx": "idx_sha256",
    ".jsonl": "lineage_sha256",
    ".offsets.npy": "lineage_offsets_sha256",
    ".parquet": "metadata_sha256",
}


def _link_parts(src_dir: Path, index: PartitionedIndex, snap: Path, dest: str) -> list[dict[str, Any]]:
    """Link a stage's index parts into ``snap/dest``; their listing with snapshot-relative paths."""
    listed = []
    for ref, n in index.parts:
        name = Path(ref.path).name
        link_file(src_dir / ref.path, snap / dest / name)
        listed.append({"path": f"{dest}/{name}", "sha256": ref.sha256, index.unit: n})
    return listed


@dataclass(frozen=True)
class Inherited:
    """What a delta's candidates take over from its base's candidates, paths through the delta's
    ``base`` link: the shards (the base's first), the exact copies' provenance files, the
    doc_id indexes (oldest first, each as (parts, prefix bits)) and ``extra.base``."""

    base: dict[str, Any]
    shards: list[SnapshotShard]
    copies: list[dict[str, Any]]
    doc_indexes: list[tuple[list[dict[str, Any]], int]]


def inherit_base(
    build_dir: Path, snap: Path, write_shards: StageManifest, tokenizer: dict[str, Any]
) -> Inherited | None:
    """The base candidates of a build made with ``--base`` (found through the build layout), or None;
    links ``snap/base`` to them (relative). Refused in one line when write_shards did not number its shards after these very candidates (its
    doc_id index would point at other shards) or when the base was tokenized otherwise (one shard list
    holds one tokenizer's ids)."""
    found = base_build_of(build_dir)
    if found is None:
        return None
    base_dir, label = found
    base_cand = candidates_dir(base_dir)
    try:
        m = SnapshotManifest.from_dict(json.loads((base_cand / MANIFEST).read_text()))
    except FileNotFoundError:
        raise UserError(f"the build's base {base_dir} has no candidates (moved or deleted?)") from None
    numbered = write_shards.extra.get("base", {})
    if m.snapshot_id != label or numbered.get("label") != label or numbered.get("shards") != len(m.shards):
        raise UserError(
            f"write_shards of {build_dir} did not number its shards after the base candidates {label} "
            f"(found {m.snapshot_id} at {base_cand}): rerun the build from write_shards"
        )
    if (m.tokenizer.get("sha256"), m.token_dtype) != (tokenizer["sha256"], tokenizer["token_dtype"]):
        raise UserError(
            f"the base {base_dir} was tokenized with {m.tokenizer.get('name')} ({m.token_dtype}), this build "
            f"with {tokenizer['name']} ({tokenizer['token_dtype']}): one candidates list holds one tokenizer's "
            "ids; rebuild without --base"
        )
    os.symlink(os.path.relpath(base_cand.resolve(), snap.resolve()), snap / BASE_CANDIDATES)

    def moved(path: str) -> str:
        return f"{BASE_CANDIDATES}/{path}"

    def moved_parts(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**p, "path": moved(p["path"])} for p in parts]

    artifacts = m.extra.get("artifacts", {})
    earlier = artifacts.get(BASE_DOC_INDEX)
    doc_indexes = []
    if earlier is not None:
        for k, bits in enumerate(earlier["prefix_bits"]):
            parts = [
                {q: v for q, v in p.items() if q != "index"} for p in earlier["parts"] if p["index"] == k
            ]
            doc_indexes.append((moved_parts(parts), bits))
    doc_indexes.append((moved_parts(artifacts["doc_index"]["parts"]), artifacts["doc_index"]["prefix_bits"]))
    return Inherited(
        base={
            "snapshot_id": label,
            "shards": len(m.shards),
            "docs": m.extra["docs"],
            "tokens": m.extra["tokens"],
        },
        shards=[
            replace(s, path=moved(s.path), files={r: moved(f) for r, f in s.files.items()}) for s in m.shards
        ],
        copies=moved_parts(artifacts.get("copies", {}).get("parts", [])),
        doc_indexes=doc_indexes,
    )


def assemble(
    build_dir: Path,
    manifests: list[StageManifest],
    seed: int,
    stage_versions: dict[str, dict[str, str]],
    snapshot_dir: str = SNAPSHOT_DIR,
) -> SnapshotManifest:
    """Lay out ``<build>/snapshot`` from the finished stages and return its manifest (not yet written)."""
    from corpus.text.tokenizer import TOKENIZER_DIR, PinnedTokenizer

    by_stage = {m.stage: m for m in manifests}
    missing = [s for s in REQUIRED_STAGES if s not in by_stage]
    if missing:
        raise UserError(
            f"a snapshot needs the stages {', '.join(missing)}; the build ran {', '.join(by_stage)}"
        )
    decont, tokenize, ws_manifest = by_stage["decontaminate"], by_stage["tokenize"], by_stage["write_shards"]
    try:
        ws_facts, decont_facts = WriteShardsFacts.of(ws_manifest), DecontaminationFacts.of(decont)
        tok_info = tokenizer_facts(tokenize)
    except MissingFacts as e:
        raise UserError(str(e)) from e
    snap = build_dir / snapshot_dir
    shutil.rmtree(snap, ignore_errors=True)
    snap.mkdir(parents=True)

    # the shards and their lineage: linked, one shard's metadata in memory at a time
    ws = stage_dir(build_dir, "write_shards")
    shards = []
    for listing in ws_facts.token_shards:  # one shard's .meta.json (its doc_ids) in memory at a time
        name = listing.name
        meta = json.loads((ws / listing.files[".meta.json"].path).read_text())
        files = {}
        for suffix, (role, directory) in _SHARD_FILES.items():
            src = listing.files[suffix]
            if suffix in _META_DIGESTS and meta[_META_DIGESTS[suffix]] != src.sha256:
                raise UserError(
                    f"{ws / src.path}: its .meta.json and the stage manifest disagree: rerun write_shards"
                )
            link_file(ws / src.path, snap / directory / f"{name}{suffix}")
            if role:
                files[role] = f"{directory}/{name}{suffix}"
        shards.append(
            SnapshotShard(
                path=f"shards/{name}.bin",
                sha256=meta["sha256"],
                bucket=meta["bucket"],
                docs=meta["docs"],
                tokens=meta["tokens"],
                files=files,
                block_size=meta.get("block_size", 0),
                block_sha256=tuple(meta.get("block_sha256", ())),
            )
        )
    doc_index = ws_facts.doc_index
    doc_parts = _link_parts(ws, doc_index, snap, DOC_INDEX_DIR)
    own_tokens = sum(s.tokens for s in shards)  # what decontaminate scanned: this build's documents
    inherited = inherit_base(build_dir, snap, ws_manifest, tok_info.to_dict())
    if inherited is not None:
        shards = inherited.shards + shards

    # the provenance of every exact copy the build stored once (exact_dedup's copies/, when it ran)
    copies = list(inherited.copies) if inherited is not None else []
    if "exact_dedup" in by_stage:
        exact_dir = stage_dir(build_dir, "exact_dedup")
        for s in by_stage["exact_dedup"].side_outputs:
            if s.path.startswith(f"{COPIES_DIR}/") and s.path.endswith(SUFFIX) and s.records > 0:
                link_file(exact_dir / s.path, snap / s.path)
                copies.append({"path": s.path, "sha256": s.sha256, "records": s.records})

    # the tokenizer: the copy the tokenize stage kept (tokenizer/<name>), never a path from its config
    tok_rel = f"{TOKENIZER_DIR}/{tok_info.name}"
    kept = {s.path: s.sha256 for s in tokenize.side_outputs}
    if kept.get(tok_rel) != tok_info.sha256:
        raise UserError(
            f"the tokenize stage (version {tokenize.stage_version}) kept no copy of its tokenizer "
            f"{tok_info.name} ({tok_rel} with sha256 {tok_info.sha256[:12]}…): rerun the build from tokenize"
        )
    tok_file = stage_dir(build_dir, "tokenize") / tok_rel
    tok = PinnedTokenizer(tok_file, tok_info.eos_token)
    if tok.info != tok_info:
        raise UserError(
            f"{tok_file} is not the tokenizer the tokenize stage encoded with "
            f"({tok.info.sha256[:12]}… vs {tok_info.sha256[:12]}…): rerun the build from tokenize"
        )
    link_file(tok_file, snap / tok_rel)  # the stage only ever replaces it, never rewrites it

    # the per-document 8-gram index (linked parts) and the contamination report
    decont_dir = stage_dir(build_dir, "decontaminate")
    doc_grams = decont_facts.doc_gram_index
    doc_gram_parts = _link_parts(decont_dir, doc_grams, snap, GRAM_DOCS_DIR)
    flagged = [
        doc
        for s in decont.side_outputs
        if s.path.startswith(f"{FLAGGED}/")
        for doc in iter_docs(decont_dir / s.path)
    ]
    tokens_stored = sum(s.tokens for s in shards)
    matching = decont_facts.matching
    report = build_report(
        flagged,
        benchmarks=decont_facts.eval_registry,
        docs_scanned=decont.yield_counts().total().docs_in,
        tokens_scanned=own_tokens,
        count_tokens=tok.count_tokens,
        settings={"eval_registry_hash": decont_facts.eval_registry_hash, **matching},
    )
    report_bytes = (json.dumps(report, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()
    atomic_write_bytes(snap / REPORT, report_bytes)

    buckets: dict[str, dict[str, int]] = {}
    for s in shards:
        b = buckets.setdefault(s.bucket, {"shards": 0, "docs": 0, "tokens": 0})
        b["shards"] += 1
        b["docs"] += s.docs
        b["tokens"] += s.tokens
    extra = {
        "buckets": buckets,
        "docs": sum(s.docs for s in shards),
        "tokens": tokens_stored,
        "artifacts": {
            "contamination_report": {"path": REPORT, "sha256": sha256_hex(report_bytes)},
            DOC_GRAM_INDEX: {
                "parts": doc_gram_parts,
                "prefix_bits": doc_grams.prefix_bits,
                "record": doc_grams.record,
                "rows": doc_grams.count,
                "scheme": doc_grams.scheme,
                **decont_facts.rule_settings(),  # rule, n, min_run, min_item_words: what a check applies
            },
            "copies": {"parts": copies, "record": "corpus.provenance.COPY_COLUMNS, JSON lines, zstd"},
            "doc_index": {
                "parts": doc_parts,
                "prefix_bits": doc_index.prefix_bits,
                "record": "doc_id S32, shard <u4, doc <u4",
                "docs": doc_index.count,
            },
        },
        "contamination": {
            "eval_registry_hash": decont_facts.eval_registry_hash,
            "docs_flagged": report["docs_flagged"],
            "tokens_flagged": report["tokens_flagged"],
        },
    }
    if inherited is not None:
        extra["base"] = inherited.base
        extra["artifacts"][BASE_DOC_INDEX] = {
            "parts": [{**p, "index": k} for k, (parts, _) in enumerate(inherited.doc_indexes) for p in parts],
            "prefix_bits": [bits for _, bits in inherited.doc_indexes],
            "record": "doc_id S32, shard <u4, doc <u4",
            "docs": sum(p["docs"] for parts, _ in inherited.doc_indexes for p in parts),
        }
    tokenizer = {
        "path": tok_rel,
        "name": tok_info.name,
        "sha256": tok_info.sha256,
        "vocab_size": tok_info.vocab_size,
        "eos_id": tok_info.eos_id,
        "eos_token": tok_info.eos_token,
        "documents_end_with_eos": True,  # tokenize appended EOS: a reader must not add another
    }
    manifest = SnapshotManifest(
        shards=tuple(shards),
        stage_versions=stage_versions,
        seed=seed,
        token_dtype=tok_info.token_dtype,
        tokenizer=tokenizer,
        extra=extra,
    )
    problems = snapshot_problems(snap, manifest, rehash=False)
    if problems:
        raise UserError(f"the assembled snapshot in {snap} is not sound: " + "; ".join(problems[:10]))
    return manifest


# --- opening a snapshot ------------------------------------------------------------------------------


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
    """The directory of the snapshot that ``ref`` names (see the module docstring)."""
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
            self.manifest = SnapshotManifest.from_dict(json.loads((self.dir / MANIFEST).read_text()))
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
        art = self.manifest.extra["artifacts"]["doc_index"]
        return PartitionedDocIndex([self.dir / p["path"] for p in art["parts"]], art["prefix_bits"])

    def doc_indexes(self) -> list[PartitionedDocIndex]:
        """Every doc_id index the shard list is addressed by: the inherited ones (oldest first), then
        this build's. Their shard numbers are places in this manifest's shard list."""
        earlier = self.manifest.extra["artifacts"].get(BASE_DOC_INDEX)
        indexes = [
            PartitionedDocIndex([self.dir / p["path"] for p in earlier["parts"] if p["index"] == k], bits)
            for k, bits in enumerate(earlier["prefix_bits"] if earlier else [])
        ]
        return [*indexes, self.doc_index()]

    def doc_gram_index(self) -> tuple[DocGramIndex, dict[str, Any]]:
        """The per-document 8-gram index the build kept (its memory-mapped parts: a check reads the pages
        its binary searches touch) and its listing: ``rule``, ``n``, ``min_run``, ``min_item_words`` (what a
        check after the build applies), ``rows``, ``prefix_bits``, ``parts``. Read from this directory
        only, so a snapshot copied away from its build is checked the same."""
        art = self.manifest.extra.get("artifacts", {}).get(DOC_GRAM_INDEX)
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
    for name, art in sorted(m.extra.get("artifacts", {}).items()):
        if "parts" in art:
            itemsize, count = _RECORD_PARTS.get(name, (None, ""))
            for part in art["parts"]:
                size = itemsize * part[count] if itemsize and count in part else None
                files.append((name, part["path"], part["sha256"], size))
        else:
            files.append((name, art["path"], art["sha256"], None))
    return files


def snapshot_problems(
    directory: Path, m: SnapshotManifest, rehash: bool = True, workers: int | None = None
) -> list[str]:
    """Every way the files under ``directory`` differ from manifest ``m``. With ``rehash`` every file is
    re-hashed against its recorded sha256 (in ``workers`` threads); without, only what costs no data
    read is checked: presence, sizes, each shard's index and metadata (one shard at a time)."""
    problems: list[str] = []
    to_hash: list[tuple[Path, str, str]] = []  # (file, expected sha256, what to say when it differs)
    for s in m.shards:
        bin_path = directory / s.path
        if not bin_path.is_file():
            problems.append(f"{s.path}: missing")
            continue
        to_hash.append((bin_path, s.sha256, f"{s.path}: sha256 does not match the manifest"))
        meta_path = directory / s.files["meta"]
        if not meta_path.is_file():
            problems.append(f"{s.files['meta']}: missing")
            continue
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
        try:
            shard = IndexedShard(bin_path.with_suffix(""))
        except ValueError as e:
            problems.append(str(e))
            continue
        if len(shard) != s.docs or shard.index.num_tokens != s.tokens:
            problems.append(
                f"{s.path}: {len(shard)} docs / {shard.index.num_tokens} tokens, manifest says "
                f"{s.docs} / {s.tokens}"
            )
        if shard.index.dtype != np.dtype(m.token_dtype):
            problems.append(f"{s.path}: dtype {shard.index.dtype}, manifest says {m.token_dtype}")
    for name, rel, sha, size in _artifact_files(m):
        p = directory / rel
        if not p.is_file():
            problems.append(f"required artifact {name} ({rel}) is missing")
            continue
        if size is not None and p.stat().st_size != size:
            problems.append(f"artifact {name} ({rel}): {p.stat().st_size} bytes, the manifest says {size}")
        to_hash.append((p, sha, f"artifact {name} ({rel}): sha256 does not match the manifest"))
    if "contamination_report" not in m.extra.get("artifacts", {}):
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
