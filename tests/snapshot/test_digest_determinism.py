"""What enters a digest (issue 16 item 7, docs/snapshot.md "What enters a digest"): no path's spelling
-- the same content from another directory, a relative path or a link gives the same snapshot id --
and no float whose last bits depend on the CPU (the shards' entropy is integer millibits)."""

from __future__ import annotations

import importlib
import json
import os
import shutil
from decimal import ROUND_HALF_UP, Decimal, localcontext
from pathlib import Path

import numpy as np
import pytest

from corpus.model import SnapshotManifest, StageManifest
from corpus.model.config import config_hash, stage_config
from corpus.model.digest import canonical_json
from corpus.signals.quality import DEFAULT_MODEL as DEFAULT_QUALITY_MODEL
from corpus.snapshot.assembly import assemble
from hpc_jobs.write_shards.config import WriteShardsConfig
from hpc_jobs.write_shards.validation import (
    ShardStatsAccumulator,
    entropy_millibits,
    shard_stats,
    validation_failures,
)
from runtime.build import stage_versions
from runtime.input_shard import InputShard, input_refs
from tests.snapshot.conftest import EVALS, OLMO, make_stage_dir, perl_docs, split, write_config

SNAPSHOT_STAGES = ("decontaminate", "tokenize", "write_shards")


# --- the same content from two directory spellings ----------------------------------------------------


def _build(build: Path, tokenizer: str, eval_dir: str, docs) -> tuple[SnapshotManifest, list[StageManifest]]:
    """The snapshot stages on one in-process rank, then the snapshot's manifest (not written)."""
    from mpi4py import MPI

    from runtime.runner import run_stage

    make_stage_dir(build / "stages" / "minhash_dedup", split(docs, 2))
    cfg = write_config(
        build / "config.toml",
        seed=3,
        decontaminate={"eval_dir": eval_dir},
        tokenize={"tokenizer": tokenizer},
        write_shards={"shard_target_tokens": 4000},
    )
    prev, manifests = build / "stages" / "minhash_dedup", []
    for name in SNAPSHOT_STAGES:
        stage = importlib.import_module(f"hpc_jobs.{name}.stage").STAGE
        manifests.append(run_stage(stage, [prev], build / "stages" / name, cfg, MPI.COMM_SELF))
        prev = build / "stages" / name
    return assemble(build, manifests, 3, stage_versions(manifests)), manifests


def test_the_same_content_from_another_directory_a_relative_path_or_a_link_has_the_same_snapshot_id(
    tmp_path, monkeypatch
):
    docs = perl_docs(n=12)
    # A: absolute paths; the tokenizer and the eval registry under one directory
    a = tmp_path / "a"
    (a / "models").mkdir(parents=True)
    (a / "evals").mkdir()
    shutil.copy(OLMO, a / "models" / OLMO.name)
    shutil.copy(EVALS / "gsm8k.jsonl", a / "evals")
    snap_a, manifests_a = _build(a / "build", str(a / "models" / OLMO.name), str(a / "evals"), docs)
    # B: another directory, the build directory relative to the working directory, the tokenizer and the
    # eval registry copies named through relative paths that cross a symbolic link
    b = tmp_path / "b" / "deeper"
    (b / "elsewhere" / "tok").mkdir(parents=True)
    (b / "elsewhere" / "evals").mkdir()
    shutil.copy(OLMO, b / "elsewhere" / "tok" / OLMO.name)
    shutil.copy(EVALS / "gsm8k.jsonl", b / "elsewhere" / "evals")
    os.symlink(b / "elsewhere", b / "link")
    monkeypatch.chdir(b)
    snap_b, manifests_b = _build(Path("build"), f"link/tok/{OLMO.name}", "link/evals", docs)

    for ma, mb in zip(manifests_a, manifests_b, strict=True):
        assert ma.digest == mb.digest, ma.stage
    assert snap_a.snapshot_id == snap_b.snapshot_id
    digested = [m.digested_part() for m in manifests_b]
    for text in (
        canonical_json(snap_b.digested_part()).decode(),
        *(canonical_json(d).decode() for d in digested),
    ):
        assert str(tmp_path) not in text and "link/" not in text and "elsewhere" not in text
    assert (Path("build") / "snapshot" / "tokenizer" / OLMO.name).read_bytes() == OLMO.read_bytes()
    # the shard metadata: no float but the top token's share (one division of integers)
    metas = sorted((a / "build" / "stages" / "write_shards" / "megatron").glob("*.meta.json"))
    assert len(metas) > 1
    for meta_path in metas:
        meta = json.loads(meta_path.read_text())
        floats = [k for k, v in meta["validation"].items() if isinstance(v, float)]
        assert floats == ["top_token_share"] and not [k for k, v in meta.items() if isinstance(v, float)]
        assert isinstance(meta["validation"]["entropy_millibits"], int)


@pytest.mark.parametrize(
    "stage, key, source",
    [
        ("tokenize", "tokenizer", OLMO),
        ("decontaminate", "eval_dir", EVALS),
        ("annotate", "quality_model", DEFAULT_QUALITY_MODEL),
    ],
)
def test_a_stage_config_names_a_file_by_content_never_by_path(stage, key, source, tmp_path, monkeypatch):
    """The hash of a stage's effective config (in its manifest, its checkpoint keys and the snapshot's
    stage_versions) is the same for one file or directory spelled absolute, relative, or through a link."""
    stage_cls = importlib.import_module(f"hpc_jobs.{stage}.stage").STAGE
    copy = tmp_path / "one" / "two" / source.name
    copy.parent.mkdir(parents=True)
    (shutil.copytree if source.is_dir() else shutil.copy)(source, copy)
    os.symlink(tmp_path / "one", tmp_path / "link")
    monkeypatch.chdir(tmp_path)
    spellings = [str(source), str(copy), f"one/two/{source.name}", f"link/two/{source.name}"]
    hashes = {
        config_hash(stage_cls(stage_config(stage_cls.Config, {key: s}, stage)).config) for s in spellings
    }
    assert len(hashes) == 1


def test_a_stage_input_spelled_through_a_link_is_recorded_by_its_place_in_the_build(tmp_path):
    stages = tmp_path / "build" / "stages"
    (stages / "tokenize" / "shards").mkdir(parents=True)
    os.symlink(tmp_path / "build", tmp_path / "link")
    shard = InputShard("a", tmp_path / "link" / "stages" / "tokenize" / "shards" / "a.jsonl.zst", "0" * 64, 3)
    assert [r.path for r in input_refs(shard, stages)] == ["tokenize/shards/a.jsonl.zst"]


def test_inputs_of_one_unit_are_recorded_by_their_place_in_the_build_however_spelled(tmp_path):
    stages = tmp_path / "build" / "stages"
    (stages / "x").mkdir(parents=True)
    inside = stages / "x" / "a.jsonl.zst"
    inside.write_bytes(b"")
    os.symlink(inside, tmp_path / "alias.jsonl.zst")  # a file link from outside the build into it
    outside = tmp_path / "crawl.jsonl.gz"
    outside.write_bytes(b"")
    spellings = [inside, stages / "x" / ".." / "x" / "a.jsonl.zst", tmp_path / "alias.jsonl.zst", outside]
    shard = InputShard("b", inside, "0" * 64, members=tuple(InputShard("f", p, "0" * 64) for p in spellings))
    assert [r.path for r in input_refs(shard, stages)] == ["x/a.jsonl.zst"] * 3 + ["crawl.jsonl.gz"]


# --- the shards' validation numbers: integers, computed without floats ---------------------------------


def exact_millibits(counts: list[int]) -> int:
    """The reference: H = -sum(p log2 p) at 50 significant digits, rounded half up to millibits."""
    with localcontext() as ctx:
        ctx.prec = 50
        total = sum(counts)
        h = -sum((Decimal(c) / total) * (Decimal(c) / total).ln() for c in counts if c) / Decimal(2).ln()
        return int((1000 * h).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def test_the_entropy_is_integer_millibits_equal_to_an_exact_reference_without_numpy_floats(monkeypatch):
    def no_float_math(*_a, **_k):
        raise AssertionError("numpy float math in a digested number")

    for name in ("log2", "log", "mean"):
        monkeypatch.setattr(np, name, no_float_math)
    assert entropy_millibits([1] * 256) == 8000 and entropy_millibits([1, 1, 2]) == 1500
    assert entropy_millibits([7]) == 0 and entropy_millibits([]) == 0
    rng = np.random.default_rng(16)
    tokens = np.minimum(rng.zipf(1.4, 20_000), 3000).astype(np.uint16)
    tokens[::50] = 1  # EOS, left out
    content = tokens[tokens != 1]
    counts = np.bincount(content)
    whole = shard_stats(tokens, eos_id=1)
    streamed = ShardStatsAccumulator(eos_id=1)
    for part in np.array_split(tokens, 7):
        streamed.add(part)
    assert streamed.result() == whole
    assert type(whole["entropy_millibits"]) is int
    assert whole["entropy_millibits"] == exact_millibits(counts.tolist())
    top = int(np.argmax(counts))
    assert whole["top_token"] == top and whole["top_token_share"] == round(int(counts[top]) / content.size, 6)
    assert {k for k, v in whole.items() if type(v) is not int} == {"top_token_share"}


def test_the_entropy_threshold_is_compared_as_written():
    """5.7 bits as written: a shard of exactly 5.700 bits passes (the double 5.7 is a little above it)."""
    cfg = WriteShardsConfig(min_entropy_bits=5.7)
    stats = {"tokens": 1, "max_repeat_run": 1, "max_repeat_token": 0, "top_token": 0, "top_token_share": 0.01}
    assert validation_failures({**stats, "entropy_millibits": 5700}, 1, cfg) == []
    assert validation_failures({**stats, "entropy_millibits": 5699}, 1, cfg) == [
        "token entropy 5.699 bits < min_entropy_bits 5.7"
    ]
