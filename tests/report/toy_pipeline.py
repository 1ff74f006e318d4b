"""A small real pipeline (ingest, exact_dedup, policy: the production order) for testing reports, diffs
and alarms.

Run as ``python tests/report/toy_pipeline.py STAGE --in … --out … --config …`` under mpiexec: the
stages are real runner stages with the planned names, so a build made of them has the exact layout of
``corpus build`` output, while staying fast and independent of the production stages' models.
Input lines carry the facts production stages would compute (language, confidence, quality), so a
test controls every distribution; ``[ingest] lang_field`` lets a test break language ID on purpose.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corpus.formats.docshard import atomic_write_json, iter_docs
from corpus.model import (
    Document,
    Filtered,
    Kept,
    Outcome,
    Quarantined,
    QuarantineRecord,
    SnapshotManifest,
    SnapshotShard,
    StageManifest,
)
from corpus.model.digest import json_digest, sha256_hex, stable_hash64
from corpus.model.layout import SNAPSHOT_DIR, STAGES_DIR
from runtime.build import stage_versions, write_build_config
from runtime.input_shard import InputShard, raw_input_shard
from runtime.runner import Stage, StageContext, main


@dataclass(frozen=True, kw_only=True)
class IngestConfig:
    lang_field: str = "lang"  # where language ID's answer is read from; a wrong field breaks LID


class ToyIngest(Stage):
    name = "ingest"
    version = "toy-1"
    Config = IngestConfig

    def list_inputs(self, ctx: StageContext) -> list[InputShard]:
        return [raw_input_shard(p) for p in sorted(ctx.in_paths)]

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        for line in shard.path.read_bytes().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                record = QuarantineRecord(
                    stage=self.name,
                    reason="bad_json",
                    raw_digest=sha256_hex(line),
                    source="web",
                    input_name=shard.name,
                    detail="not JSON",
                )
                yield Quarantined(record), len(line)
                continue
            lang = rec.get(self.config.lang_field, "")
            doc = Document.create(
                text=rec["text"],
                source=rec["source"],
                source_tier="web",
                url=rec["url"],
                crawl_date="2026-01-01",
                raw_digest=sha256_hex(line),
                lang=lang,
                lang_confidence=rec["conf"] if lang else 0.0,
                scores={"quality": rec["quality"], "words": float(len(rec["text"].split()))},
            )
            yield Kept(doc), len(line)


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    min_quality: float = 0.3
    languages: tuple[str, ...] = ("en", "de", "fr")


class ToyPolicy(Stage):
    name = "policy"
    version = "toy-1"
    Config = PolicyConfig

    def process_doc(self, doc: Document, ctx: StageContext) -> Outcome:
        if doc.lang not in self.config.languages:
            return Filtered(doc, "lang_not_allowed")
        if doc.scores["quality"] < self.config.min_quality:
            return Filtered(doc, "low_quality")
        return Kept(doc)


@dataclass(frozen=True, kw_only=True)
class DedupConfig:
    alarm_cluster_size: int = 10  # the stage flags a cluster larger than this, as minhash_dedup does


class ToyExactDedup(Stage):
    """Global exact dedup: every rank reads every (small) input to know the clusters."""

    name = "exact_dedup"
    version = "toy-1"
    Config = DedupConfig

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        members: dict[str, list[tuple[str, str, int]]] = {}
        for shard in inputs:
            for i, doc in enumerate(iter_docs(shard.path)):
                members.setdefault(doc.text_digest, []).append((doc.doc_id, shard.name, i))
        self.clusters = {td: sorted(m) for td, m in members.items()}
        return json_digest(sorted(self.clusters.items()))

    def process_shard(self, shard: InputShard, ctx: StageContext) -> Iterator[tuple[Outcome, int]]:
        for i, doc in enumerate(iter_docs(shard.path)):
            members = self.clusters[doc.text_digest]
            rep = members[0]
            doc = doc.annotate(dup_cluster_id=doc.text_digest[:16], dup_cluster_size=len(members))
            if rep[1:] == (shard.name, i):
                yield Kept(doc), len(doc.text.encode())
            else:
                yield Filtered(doc.annotate(dup_of=rep[0]), "exact_duplicate"), len(doc.text.encode())

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        largest = max((len(m) for m in self.clusters.values()), default=0)
        too_big = largest > self.config.alarm_cluster_size
        return {"alarms": [f"largest cluster has {largest} documents"] if too_big else []}


STAGES = {s.name: s for s in (ToyIngest, ToyExactDedup, ToyPolicy)}
SCRIPT = str(Path(__file__).resolve())

LANGS = ("en", "en", "en", "de", "fr", "xx")


def write_inputs(d: Path, files: int = 4, docs: int = 60) -> list[Path]:
    """Deterministic inputs: two sources, several languages, a spread of quality, some exact
    duplicates (one cluster much larger than the rest) and a few lines that are not JSON."""
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(files):
        lines = []
        for i in range(docs):
            h = stable_hash64("toy", f, i)
            if i % 29 == 7:
                lines.append('{"broken json line ' + str(f * 1000 + i))
                continue
            if i % 11 == 0:
                text = "the same boilerplate notice repeated on every site"
            elif i % 13 == 0:
                text = f"a small duplicate cluster number {i % 3}"
            else:
                words = " ".join(f"w{(h >> (k % 50)) % 97}" for k in range(5 + h % 300))
                text = f"document {f}-{i}: {words}"
            rec = {
                "url": f"https://{'books' if f % 2 else 'web'}.example/{f}/{i}",
                "text": text,
                "source": "books" if f % 2 else "web",
                "lang": LANGS[h % len(LANGS)],
                "conf": round(0.5 + (h % 500) / 1000, 3),
                "quality": round(((h >> 8) % 1000) / 1000, 3),
            }
            lines.append(json.dumps(rec, sort_keys=True))
        p = d / f"part-{f}.jsonl"
        p.write_text("\n".join(lines) + "\n")
        paths.append(p)
    return paths


def toy_snapshot(out: Path, manifests: list[StageManifest], seed: int) -> SnapshotManifest:
    """The last stage's shards as the snapshot, bucketed by source, one token per word.

    The production snapshot (Megatron shards, lineage, tokenizer) needs the tokenize and write_shards
    stages; this one keeps the manifest's shape so reports and diffs see buckets and tokens."""
    last = manifests[-1]
    shards = []
    for o in last.outputs:
        docs = list(iter_docs(out / STAGES_DIR / last.stage / o.path))
        shards.append(
            SnapshotShard(
                path=f"../{STAGES_DIR}/{last.stage}/{o.path}",
                sha256=o.sha256,
                bucket=docs[0].source if docs else "empty",
                docs=len(docs),
                tokens=sum(len(d.text.split()) for d in docs),
            )
        )
    return SnapshotManifest(shards=tuple(shards), stage_versions=stage_versions(manifests), seed=seed)


def make_build(out: Path, inputs: list[Path], config_toml: str = "", ranks: int = 2) -> Path:
    """What ``corpus build`` does, with the toy stages: every stage in order, then the snapshot."""
    from tests.conftest import run_mpi

    out.mkdir(parents=True, exist_ok=True)
    cfg_file = out.parent / f"{out.name}.toml"
    cfg_file.write_text(config_toml)
    cfg = write_build_config(out, cfg_file, None)
    prev = [str(p) for p in inputs]
    manifests = []
    for name in STAGES:
        stage_dir = out / STAGES_DIR / name
        run_mpi(ranks, SCRIPT, name, "--in", *prev, "--out", str(stage_dir), "--config", str(cfg))
        manifests.append(StageManifest.from_dict(json.loads((stage_dir / "manifest.json").read_text())))
        prev = [str(stage_dir)]
    snapshot = toy_snapshot(out, manifests, json.loads(cfg.read_text())["seed"])
    atomic_write_json(out / SNAPSHOT_DIR / "manifest.json", snapshot.to_dict())
    return out


if __name__ == "__main__":
    sys.exit(main(STAGES[sys.argv[1]], sys.argv[2:]))
