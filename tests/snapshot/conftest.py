"""Inputs for the snapshot stages: completed stage directories of real documents, and a build runner.

The stages before decontaminate belong to other parts of the pipeline; these tests start from a
completed stage directory (shards + manifest, as the runner writes them) of real text: Perl's own
documentation, split into a curated source and a "mirror" whose documents count as web.
"""

from __future__ import annotations

import gzip
import json
import tomllib
from pathlib import Path

import pytest

from corpus.formats.docshard import atomic_write_json, write_shard
from corpus.formats.snapshot_manifest import write_snapshot_manifest
from corpus.model import Document, ShardRef, StageManifest
from corpus.model.digest import json_digest, sha256_hex
from corpus.model.layout import SNAPSHOT_DIR, STAGES_DIR
from corpus.model.manifest import read_stage_manifest
from corpus.snapshot.assembly import assemble
from runtime.build import stage_versions
from tests.conftest import SHARED_DATA, run_mpi

SNAPSHOT_STAGES = ("decontaminate", "tokenize", "write_shards")
OLMO = SHARED_DATA / "tokenizers" / "gpt-neox-olmo-dolma-v1_5.tokenizer.json"
CL100K = SHARED_DATA / "tokenizers" / "cl100k_base.tokenizer.json"
EVALS = SHARED_DATA / "evals"


def perl_docs(n: int = 60, max_chars: int = 3000) -> list[Document]:
    """Real documents: the first ``n`` POD pages of perl-doc, each cut at a paragraph near ``max_chars``."""
    docs = []
    with gzip.open(SHARED_DATA / "curated" / "perl-doc.jsonl.gz", "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if len(docs) == n:
                break
            rec = json.loads(line)
            text = rec["text"]
            if len(text) > max_chars:
                cut = text.rfind("\n\n", 0, max_chars)
                text = text[: cut if cut > max_chars // 2 else max_chars]
            web = i % 3 == 2
            docs.append(
                Document.create(
                    text=text,
                    source="perl-mirror" if web else "perl-doc",
                    source_tier="web" if web else "curated",
                    url=rec["url"].replace("perldoc.example.org", "mirror.example.net")
                    if web
                    else rec["url"],
                    crawl_date="2026-06-01" if web else "2026-01-15",
                    raw_digest=sha256_hex(line),
                    lang="en",
                    lang_confidence=0.99,
                    license_hint="" if web else rec["license"],
                    dup_cluster_id=f"c-{i:04d}",
                    dup_cluster_size=1 + i % 2,
                )
            )
    return docs


def make_stage_dir(stage_dir: Path, shards: dict[str, list[Document]], stage: str = "minhash_dedup") -> Path:
    """A completed stage directory holding these document shards (what the previous stage would leave)."""
    outputs = []
    for name, docs in sorted(shards.items()):
        rel = f"shards/{name}.jsonl.zst"
        sc = write_shard(stage_dir / rel, (d.to_json_bytes() for d in docs))
        outputs.append(ShardRef(rel, sc["sha256"], sc["records"]))
    m = StageManifest(
        stage=stage,
        stage_version="test",
        config={},
        config_hash=json_digest({}),
        inputs=(),
        outputs=tuple(outputs),
        side_outputs=(),
        shard_counts={},
        totals={},
    )
    atomic_write_json(stage_dir / "manifest.json", m.to_dict())
    return stage_dir


def split(docs: list[Document], parts: int) -> dict[str, list[Document]]:
    return {f"part-{p}": docs[p::parts] for p in range(parts)}


def write_config(path: Path, **tables: dict) -> Path:
    lines = []
    for k, v in tables.items():
        if not isinstance(v, dict):
            lines.append(f"{k} = {json.dumps(v)}")
    for table, values in tables.items():
        if isinstance(values, dict):
            lines.append(f"[{table}]")
            for k, v in values.items():
                if isinstance(v, dict):
                    lines.append(
                        f"{k} = {{ {', '.join(f'{json.dumps(a)} = {json.dumps(b)}' for a, b in v.items())} }}"
                    )
                else:
                    lines.append(f"{k} = {json.dumps(v)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def run_snapshot_stages(build: Path, ranks: int, config: Path | None, upstream: Path | None = None) -> dict:
    """Run decontaminate, tokenize and write_shards on real ranks, then assemble their documents as a
    snapshot in ``build/snapshot`` (the candidates' format, where these tests read it)."""
    prev = upstream or build / STAGES_DIR / "minhash_dedup"
    manifests = []
    for name in SNAPSHOT_STAGES:
        out = build / STAGES_DIR / name
        args = ["-m", f"hpc_jobs.{name}", "--input", str(prev), "--out", str(out)]
        if config:
            args += ["--config", str(config)]
        run_mpi(ranks, *args)
        manifests.append(read_stage_manifest(out))
        prev = out
    seed = tomllib.loads(config.read_text()).get("seed", 0) if config else 0
    snapshot = assemble(build, manifests, seed, stage_versions(manifests), SNAPSHOT_DIR)
    write_snapshot_manifest(build / SNAPSHOT_DIR, snapshot)
    return snapshot.to_dict()


@pytest.fixture(scope="session")
def real_docs() -> list[Document]:
    return perl_docs()
