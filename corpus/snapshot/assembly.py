"""Assembly: ``<build>/snapshot`` laid out from the finished stages, linked, never re-hashed.

Files are hard-linked from the stage directories (copied where links are impossible); both indexes
are linked as the stages built them, partitioned; every digest comes from the stage manifests, so
assembly holds one shard's metadata at a time and reads no data file. Its check costs no data read
(:func:`corpus.snapshot.validate.snapshot_problems` without rehash). See docs/snapshot.md ("The snapshot").
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from corpus.decont.doc_grams import DOC_GRAM_INDEX
from corpus.decont.report import FLAGGED, build_report
from corpus.formats.docshard import SUFFIX, atomic_write_bytes, iter_docs
from corpus.model import SnapshotManifest, SnapshotShard, StageManifest
from corpus.model.digest import sha256_hex
from corpus.model.errors import UserError
from corpus.model.facts import (
    DecontaminationFacts,
    MissingFacts,
    PartitionedIndex,
    WriteShardsFacts,
    tokenizer_facts,
)
from corpus.model.layout import SNAPSHOT_DIR, link_file, stage_dir
from corpus.snapshot.inherit import inherit_base
from corpus.snapshot.layout import BASE_DOC_INDEX, COPIES_DIR, DOC_INDEX_DIR, GRAM_DOCS_DIR, REPORT
from corpus.snapshot.validate import snapshot_problems

REQUIRED_STAGES = ("decontaminate", "tokenize", "write_shards")
#: the shard files and where they go in the snapshot (suffix -> role in SnapshotShard.files, directory)
_SHARD_FILES = {
    ".bin": (None, "shards"),
    ".idx": ("idx", "shards"),
    ".meta.json": ("meta", "shards"),
    ".blocks": ("blocks", "shards"),
    ".jsonl": ("lineage", "lineage"),
    ".offsets.npy": ("lineage_offsets", "lineage"),
    ".parquet": ("metadata", "metadata"),
}
#: which sha256 of a shard's .meta.json vouches for each of its files
_META_DIGESTS = {
    ".bin": "sha256",
    ".idx": "idx_sha256",
    ".blocks": "blocks_sha256",
    ".jsonl": "lineage_sha256",
    ".offsets.npy": "lineage_offsets_sha256",
    ".parquet": "metadata_sha256",
}

#: what the shards hold, in the manifest, for anyone who finds them: every candidate, not a training set
HOLDS = (
    "every stored candidate, documents the default version rejects, near duplicates and contaminated "
    "ones included: train on a version (this project's loader) or on `corpus export VERSION`"
)
CANDIDATES_README = f"""These Megatron shards hold {HOLDS}.

Pointing Megatron-LM or NeMo at shards/ trains on documents the quality policy rejected, on near
duplicates and on documents that contain benchmark text. Read a version instead: this project's loader
(SnapshotLoader on BUILD/snapshot or BUILD/versions/NAME), or an export of one:

    corpus export BUILD --format megatron --out DIR    # then Megatron's --data-args-path DIR/megatron/data-args.txt

docs/export.md of corpus-pipeline says more.
"""


def _link_parts(src_dir: Path, index: PartitionedIndex, snap: Path, dest: str) -> list[dict[str, Any]]:
    """Link a stage's index parts into ``snap/dest``; their listing with snapshot-relative paths."""
    listed = []
    for ref, n in index.parts:
        name = Path(ref.path).name
        link_file(src_dir / ref.path, snap / dest / name)
        listed.append({"path": f"{dest}/{name}", "sha256": ref.sha256, index.unit: n})
    return listed


def _link_shards(ws: Path, ws_facts: WriteShardsFacts, snap: Path) -> list[SnapshotShard]:
    """Link write_shards' shards and their lineage into ``snap``, each file's digest checked against the
    shard's ``.meta.json``; one shard's ``.meta.json`` (its doc_ids) in memory at a time."""
    shards = []
    for listing in ws_facts.token_shards:
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
                block_size=meta["block_size"],
                blocks_sha256=meta["blocks_sha256"],
                block_layout=meta.get("block_layout", ""),
            )
        )
    return shards


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
    shards = _link_shards(ws, ws_facts, snap)
    doc_index = ws_facts.doc_index
    doc_parts = _link_parts(ws, doc_index, snap, DOC_INDEX_DIR)
    own_tokens = sum(s.tokens for s in shards)  # what decontaminate scanned: this build's documents
    inherited = inherit_base(build_dir, snap, ws_facts.base, tok_info.to_dict())
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
    (snap / "README").write_text(CANDIDATES_README)
    extra = {
        "holds": HOLDS,
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
        extra["base"] = inherited.base.to_dict()
        if inherited.takedowns:
            extra["takedowns"] = inherited.takedowns
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
        split=True,
    )
    problems = snapshot_problems(snap, manifest, rehash=False)
    if problems:
        raise UserError(f"the assembled snapshot in {snap} is not sound: " + "; ".join(problems[:10]))
    return manifest
