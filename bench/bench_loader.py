"""Loader benchmark: tokens/s per rank from the page cache, and time to the first batch after a resume.

    python bench/bench_loader.py [--tokens-per-shard N] [--steps N] [--out DIR]

Writes a snapshot of uint16 Megatron shards (random token ids, document lengths drawn around 600
tokens; the loader's cost does not depend on the ids), reads it once so it sits in the page cache,
then measures on one process acting as one rank of a world of 8:

* SnapshotLoader tokens/s (seq_len 2048, batch 8) on the first pass (which includes the sha256
  verification of every shard on first read) and once the shards are verified;
* a plain baseline on the same files: consecutive seq_len slices of one memory-mapped shard into a
  torch tensor (no mixture, no EOS, no boundaries), and the loader's ratio to it;
* time to the first batch after resuming from a checkpoint record at step 0 and at step 10^6, on the
  same world (8) and on another (6). The record at step 10^6 is produced by ``seek`` (arithmetic,
  no reads), whose time is reported separately; resuming never replays the steps before.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.digest import file_sha256  # noqa: E402
from corpus.megatron import write_indexed_shard  # noqa: E402
from corpus.model import SnapshotManifest, SnapshotShard  # noqa: E402
from loader import SnapshotLoader  # noqa: E402

SEQ_LEN, BATCH, WORLD = 2048, 8, 8
MIXTURE = {"code": 0.3, "web": 0.7}


def write_bench_snapshot(root: Path, shards_per_bucket: int, tokens_per_shard: int) -> Path:
    rng = np.random.default_rng(0)
    shards = []
    for bucket in sorted(MIXTURE):
        for n in range(shards_per_bucket):
            lengths = np.maximum(1, rng.lognormal(6.2, 0.8, size=tokens_per_shard // 300).astype(np.int64))
            lengths = lengths[np.cumsum(lengths) <= tokens_per_shard]
            flat = rng.integers(1, 50_000, size=int(lengths.sum()), dtype=np.uint16)
            docs = np.split(flat, np.cumsum(lengths)[:-1])
            bin_path, idx_path = write_indexed_shard(root / bucket / f"{bucket}-{n:04d}", docs, "uint16")
            shards.append(
                SnapshotShard(
                    str(bin_path.relative_to(root)),
                    file_sha256(bin_path),
                    bucket,
                    len(docs),
                    int(flat.shape[0]),
                    {"idx": str(idx_path.relative_to(root))},
                )
            )
    manifest = SnapshotManifest(
        tuple(shards), {"bench": {"version": "1"}}, seed=0, token_dtype="uint16", tokenizer={"eos_id": 50_279}
    )
    (root / "manifest.json").write_text(json.dumps(manifest.to_dict()))
    return root


def warm(root: Path) -> None:
    for f in sorted(root.rglob("*.bin")) + sorted(root.rglob("*.idx")):
        f.read_bytes()


def make(root: Path, rank: int = 0, world: int = WORLD) -> SnapshotLoader:
    return SnapshotLoader(
        root,
        MIXTURE,
        seed=1,
        seq_len=SEQ_LEN,
        batch_size=BATCH,
        dp_rank=rank,
        dp_world=world,
        chunk_tokens=1 << 20,
    )


def loader_rate(loader: SnapshotLoader, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        b = loader.next_batch()
    assert b is not None
    return steps * BATCH * SEQ_LEN / (time.perf_counter() - t0)


def baseline_rate(root: Path, steps: int) -> float:
    """Consecutive seq_len slices of the memory-mapped shards, as tensors: the floor of any loader."""
    arrays = [np.memmap(f, dtype=np.uint16, mode="r") for f in sorted(root.rglob("*.bin"))]
    t0 = time.perf_counter()
    a, pos = 0, 0
    for _ in range(steps):
        rows = []
        for _ in range(BATCH):
            if pos + SEQ_LEN > arrays[a].shape[0]:
                a, pos = (a + 1) % len(arrays), 0
            rows.append(torch.from_numpy(arrays[a][pos : pos + SEQ_LEN].astype(np.int64)))
            pos += SEQ_LEN
        torch.stack(rows)
    return steps * BATCH * SEQ_LEN / (time.perf_counter() - t0)


def record_at(root: Path, step: int) -> tuple[dict, float]:
    """The global checkpoint record of a world of 8 at ``step`` (via seek), and the seconds seek took."""
    loaders = [make(root, r) for r in range(WORLD)]
    t0 = time.perf_counter()
    for ld in loaders:
        ld.seek(step)
    seek_s = (time.perf_counter() - t0) / WORLD
    return loaders[0].global_record([ld.local_state() for ld in loaders]), seek_s


def first_batch_after_resume(root: Path, record: dict, world: int) -> float:
    t0 = time.perf_counter()
    loader = make(root, 0, world)
    loader.load_record(record)
    batch = loader.next_batch()
    assert batch is not None and batch.step == record["step"]
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards-per-bucket", type=int, default=4)
    ap.add_argument("--tokens-per-shard", type=int, default=4_000_000)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument(
        "--out", type=Path, default=None, help="where to write the snapshot (default: a temp dir)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = write_bench_snapshot(args.out or Path(tmp), args.shards_per_bucket, args.tokens_per_shard)
        total = sum(s["tokens"] for s in json.loads((root / "manifest.json").read_text())["shards"])
        warm(root)
        loader = make(root)
        first = loader_rate(loader, args.steps)
        steady = loader_rate(loader, args.steps)
        base = baseline_rate(root, args.steps)
        rec0, _ = record_at(root, 0)
        rec_m, seek_s = record_at(root, 10**6)
        # one untimed resume first, so imports and allocator warm-up do not count against step 0
        first_batch_after_resume(root, rec0, WORLD)
        rows = [
            (
                "loader, first pass (sha256 verify on first read)",
                f"{first / 1e6:.2f} M tokens/s",
                f"{first / base:.2f}",
            ),
            ("loader, shards verified", f"{steady / 1e6:.2f} M tokens/s", f"{steady / base:.2f}"),
            ("plain memmap slices (baseline)", f"{base / 1e6:.2f} M tokens/s", "1.00"),
            (
                "resume at step 0, world 8 -> 8: first batch",
                f"{first_batch_after_resume(root, rec0, 8) * 1e3:.0f} ms",
                "",
            ),
            (
                "resume at step 10^6, world 8 -> 8: first batch",
                f"{first_batch_after_resume(root, rec_m, 8) * 1e3:.0f} ms",
                "",
            ),
            (
                "resume at step 0, world 8 -> 6: first batch",
                f"{first_batch_after_resume(root, rec0, 6) * 1e3:.0f} ms",
                "",
            ),
            (
                "resume at step 10^6, world 8 -> 6: first batch",
                f"{first_batch_after_resume(root, rec_m, 6) * 1e3:.0f} ms",
                "",
            ),
            ("seek to step 10^6 without a checkpoint (per rank, no reads)", f"{seek_s:.2f} s", ""),
        ]
    print(
        f"snapshot: {2 * args.shards_per_bucket} uint16 shards, {total / 1e6:.0f} M tokens; rank 0 of {WORLD}, "
        f"seq_len {SEQ_LEN}, batch {BATCH}, {args.steps} steps per rate; record at 10^6 has "
        f"{len(json.dumps(rec_m)) / 1e3:.1f} kB"
    )
    w = max(len(r[0]) for r in rows)
    print(f"| {'measure'.ljust(w)} | value | ratio to baseline |")
    print(f"|{'-' * (w + 2)}|-------|-------------------|")
    for name, value, ratio in rows:
        print(f"| {name.ljust(w)} | {value} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
