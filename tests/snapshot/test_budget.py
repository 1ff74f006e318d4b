"""write_shards within its memory budget: a budget too small for one document's shuffle record is
refused before anything is sent, in one line naming the key and the size it needs, and leaves nothing a
rerun would trust. (The interruption tests of the global phases are in test_snapshot_build.py.)"""

from __future__ import annotations

import gzip
import json

from corpus.model import Document
from tests.conftest import SHARED_DATA
from tests.dedup.stage_io import run_stage
from tests.snapshot.conftest import CL100K, make_stage_dir, perl_docs, write_config


def test_a_budget_too_small_for_one_document_is_a_one_line_error_naming_the_key(tmp_path):
    """A real document of ~3 MB of text (~800,000 cl100k tokens, 4 bytes each) cannot be one shuffle
    record at memory_budget_mb = 8 (a record must fit in a quarter of the budget)."""
    texts, size = [], 0
    with gzip.open(SHARED_DATA / "curated" / "perl-doc.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            size += len(texts[-1])
            if size > 3_000_000:
                break
    huge = Document.create(
        text="\n\n".join(texts),
        source="perl-doc",
        source_tier="curated",
        url="https://perldoc.example.org/all",
        crawl_date="2026-01-15",
        raw_digest="1" * 64,
    )
    inputs = make_stage_dir(
        tmp_path / "stages" / "minhash_dedup", {"part-0": perl_docs(n=6), "part-1": [huge]}
    )
    tight = write_config(
        tmp_path / "tight.toml", tokenize={"tokenizer": str(CL100K)}, write_shards={"memory_budget_mb": 8}
    )
    run_stage("tokenize", 1, inputs, tmp_path / "stages" / "tokenize", tight)
    out = tmp_path / "stages" / "write_shards"
    proc = run_stage("write_shards", 2, tmp_path / "stages" / "tokenize", out, tight, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"document {huge.doc_id} of part-1" in errors[0]
    assert "memory_budget_mb = 8 is too small" in errors[0] and "needs memory_budget_mb >= " in errors[0]
    need = int(errors[0].rsplit(">= ", 1)[1])
    assert need > 8
    # nothing a rerun would trust: no manifest, no published shard, no census part of the huge document
    assert not (out / "manifest.json").exists() and not (out / "megatron").exists()
    assert not (out / "work" / "phase" / "census" / "part-1.done.json").exists()
    # with the budget it asked for, the same command completes
    enough = write_config(
        tmp_path / "enough.toml", tokenize={"tokenizer": str(CL100K)}, write_shards={"memory_budget_mb": need}
    )
    run_stage("write_shards", 2, tmp_path / "stages" / "tokenize", out, enough)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["extra"]["doc_index"]["docs"] == 7
