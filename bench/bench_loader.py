"""Loader benchmark: tokens/s per rank, bytes hashed per rank, peak RSS with many shards, resume time.

    python bench/bench_loader.py [--tokens-per-shard N] [--steps N] [--rss-shards N] [--out DIR]

Writes a snapshot of uint16 Megatron shards (random token ids, document lengths drawn around 600
tokens; the loader's cost does not depend on the ids), reads it once so it sits in the page cache,
then measures on one process acting as one rank of a world of 8:

* SnapshotLoader tokens/s (seq_len 2048, batch 8) on the first pass (which includes the sha256
  verification of every block on first read) and once the blocks read are verified; and the same steps
  re-read (blocks verified, pages cached, no prefetch) with the shuffle buffer off and on
  (``--shuffle-buffers``, documents a window), in tokens per CPU second, the best of twelve passes;
  and the same with packing off and on (``--packing-windows``): padding, truncation and fragment rates
  and delivered (unpadded) tokens per CPU second (``--packing-only``: just these rows);
* bytes of .bin each of the 8 ranks hashes over one epoch, with per-block digests (4 MiB blocks, the
  write_shards default) and with the whole-file check of a manifest without them (snapshots written
  before block digests), against the bytes the rank reads;
* a plain baseline on the same files: consecutive seq_len slices of one memory-mapped shard into a
  torch tensor (no mixture, no EOS, no boundaries), per wall second and per CPU second (twelve passes,
  each right after one of a re-read loader's), and the loader's ratio to it: per CPU second, the median
  of the twelve pairs' ratios;
* time to the first batch after resuming from a checkpoint record at step 0 and at step 10^6, on the
  same world (8) and on another (6). The record at step 10^6 is produced by ``seek`` (arithmetic,
  no reads), whose time is reported separately; resuming never replays the steps before;
* peak RSS and open file descriptors of a process reading one whole epoch of a snapshot of many
  small shards (``--rss-shards``), under a 16 MiB loader memory budget and under a 4 GiB one (every
  shard stays open, as the loader did before its cache was bounded); each in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.formats.block_layout import DOCUMENTS, DocumentBlockHasher  # noqa: E402
from corpus.formats.megatron import (  # noqa: E402
    BLOCK_SIZE,
    block_file_bytes,
    write_indexed_shard,
)
from corpus.model import SnapshotManifest, SnapshotShard  # noqa: E402
from corpus.model.digest import file_sha256  # noqa: E402
from loader import SnapshotLoader, faults  # noqa: E402
from loader.sparse import byte_ranges  # noqa: E402

SEQ_LEN, BATCH, WORLD = 2048, 8, 8
MIXTURE = {"code": 0.3, "web": 0.7}


def write_bench_snapshot(
    root: Path, shards_per_bucket: int, tokens_per_shard: int, mixture: dict[str, float] = MIXTURE
) -> Path:
    """``manifest.json`` with block digests, ``manifest-legacy.json`` (same shards) without."""
    rng = np.random.default_rng(0)
    shards = []
    for bucket in sorted(mixture):
        for n in range(shards_per_bucket):
            lengths = np.maximum(1, rng.lognormal(6.2, 0.8, size=tokens_per_shard // 300).astype(np.int64))
            lengths = lengths[np.cumsum(lengths) <= tokens_per_shard]
            flat = rng.integers(1, 50_000, size=int(lengths.sum()), dtype=np.uint16)
            docs = np.split(flat, np.cumsum(lengths)[:-1])
            bin_path, idx_path = write_indexed_shard(root / bucket / f"{bucket}-{n:04d}", docs, "uint16")
            blocks = bin_path.with_suffix(".blocks")  # each document's own blocks, as write_shards writes
            hasher = DocumentBlockHasher(BLOCK_SIZE)
            for doc in docs:
                hasher.add_document(doc.tobytes())
            blocks.write_bytes(block_file_bytes(hasher.block_digests()))
            shards.append(
                SnapshotShard(
                    str(bin_path.relative_to(root)),
                    file_sha256(bin_path),
                    bucket,
                    len(docs),
                    int(flat.shape[0]),
                    {"idx": str(idx_path.relative_to(root)), "blocks": str(blocks.relative_to(root))},
                    BLOCK_SIZE,
                    blocks_sha256=file_sha256(blocks),
                    block_layout=DOCUMENTS,
                )
            )
    for name, with_blocks in (("manifest.json", True), ("manifest-legacy.json", False)):
        listed = (
            shards
            if with_blocks
            else [replace(s, block_size=0, blocks_sha256="", block_layout="") for s in shards]
        )
        manifest = SnapshotManifest(
            tuple(listed),
            {"bench": {"version": "1"}},
            seed=0,
            token_dtype="uint16",
            tokenizer={"eos_id": 50_279},
        )
        (root / name).write_text(json.dumps(manifest.to_dict()))
    return root


def warm(root: Path) -> None:
    for f in sorted(root.rglob("*.bin")) + sorted(root.rglob("*.idx")):
        f.read_bytes()


def make(root: Path, rank: int = 0, world: int = WORLD, **kw) -> SnapshotLoader:
    return SnapshotLoader(
        root,
        kw.pop("mixture", MIXTURE),
        seed=1,
        seq_len=SEQ_LEN,
        batch_size=BATCH,
        dp_rank=rank,
        dp_world=world,
        **{"chunk_tokens": 1 << 20, **kw},
    )


def hashed_per_rank(manifest: Path, world: int = WORLD) -> list[tuple[int, int]]:
    """(bytes hashed, bytes read) of each rank over one epoch of every bucket."""
    out = []
    for rank in range(world):
        loader = make(manifest, rank, world, epoch_caps=1)
        read = 0
        while (b := loader.next_batch()) is not None:
            read += (
                int(b.loss_mask.sum()) * 2
            )  # uint16 tokens delivered (the appended EOS, 1 in ~600, included)
        out.append((loader.store.bytes_hashed, read))
    return out


def rss_child(root: Path, budget_mb: int) -> dict:
    """Read one epoch of ``root`` as rank 0 of 1 under ``budget_mb``; peak RSS and descriptors (this process)."""
    loader = make(
        root, 0, 1, mixture={"web": 1.0}, epoch_caps=1, memory_budget_mb=budget_mb, chunk_tokens=1 << 14
    )
    base_fds = len(os.listdir("/proc/self/fd"))
    start_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS"))
    peak_fds = steps = 0
    while loader.next_batch() is not None:
        steps += 1
        if steps % 16 == 0:
            peak_fds = max(peak_fds, len(os.listdir("/proc/self/fd")) - base_fds)
    # VmHWM, not getrusage's ru_maxrss: that one keeps the parent's peak across fork and exec
    hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
    return {
        "steps": steps,
        "maxrss_kb": hwm,
        "peak_fds": peak_fds,
        "opens": loader.store.opens,
        "start_rss_kb": start_kb,
    }


def rss_rows(n_shards: int, tmp: Path) -> list[tuple[str, str, str]]:
    root = write_bench_snapshot(tmp / "many", n_shards, 200_000, mixture={"web": 1.0})
    size = sum(f.stat().st_size for f in root.rglob("*.bin")) / 2**20
    rows = []
    for budget in (16, 4096):
        proc = subprocess.run(
            [sys.executable, __file__, "--rss-child", str(root), "--budget-mb", str(budget)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(proc.stdout)
        rows.append(
            (
                f"one epoch of {n_shards} shards ({size:.0f} MiB), budget {budget} MiB: peak RSS / fds",
                f"{r['maxrss_kb'] / 1024:.0f} MiB / {r['peak_fds']}",
                f"+{(r['maxrss_kb'] - r['start_rss_kb']) / 1024:.0f} MiB over the loader at rest",
            )
        )
    return rows


def loader_rate(loader: SnapshotLoader, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        b = loader.next_batch()
    assert b is not None
    return steps * BATCH * SEQ_LEN / (time.perf_counter() - t0)


def steady_rates(
    root: Path, buffers: list[int], steps: int, repeats: int = 12
) -> dict[int, tuple[float, float, float]]:
    """Rank 0's tokens per CPU second over the same ``steps`` steps per shuffle buffer (0: off), their
    blocks verified, read in the consumer's thread (prefetch 0: what the reads cost, and CPU time, not
    wall time, so that other processes on the machine count less), each pass followed by a pass of the
    memmap baseline: each loader reads the steps once, then rewinds to its step-0 record before every
    pass. Per buffer: the best of ``repeats`` loader passes, the best of the baseline's, and the median
    of the ``repeats`` ratios of a loader pass to the baseline pass right after it (a pass is tens of
    ms; the machine's other load moves both of a pair alike, so the median moves far less than either
    best). One loader at a time, as a rank runs one."""
    rates = {}
    tokens = steps * BATCH * SEQ_LEN
    for n in buffers:
        loader, start = rank0_at_start(root, shuffle_buffer=n)
        loader_rate(loader, steps)
        pairs = []
        for _ in range(repeats):
            loader.load_record(start)
            t0 = time.process_time()
            for _ in range(steps):
                loader.next_batch()
            rate = tokens / (time.process_time() - t0)
            pairs.append((rate, baseline_rate(root, steps, time.process_time)))
        loader.close()
        ratio = statistics.median(r / base for r, base in pairs)
        rates[n] = (max(r for r, _ in pairs), max(base for _, base in pairs), ratio)
    return rates


def rank0_at_start(root: Path, **kw) -> tuple[SnapshotLoader, dict]:
    """Rank 0 of ``WORLD`` (prefetch 0) and the global record of the world at step 0, to rewind it to."""
    ranks = [make(root, r, prefetch_steps=0, **kw) for r in range(WORLD)]
    return ranks[0], ranks[0].global_record([ld.local_state() for ld in ranks])


def best_passes(
    loaders: dict[int, SnapshotLoader],
    starts: dict[int, dict],
    steps: int,
    tokens: dict[int, int],
    repeats: int,
) -> dict[int, float]:
    """``tokens[n]`` per CPU second of the best of ``repeats`` passes of ``steps`` steps of ``loaders[n]``,
    the loaders taken in turns, each rewound to its record ``starts[n]`` before every pass."""
    best = dict.fromkeys(loaders, 0.0)
    for _ in range(repeats):
        for n, loader in loaders.items():
            loader.load_record(starts[n])
            t0 = time.process_time()
            for _ in range(steps):
                loader.next_batch()
            best[n] = max(best[n], tokens[n] / (time.process_time() - t0))
    return best


def packing_rows(root: Path, windows: list[int], steps: int, repeats: int = 5) -> list[tuple[str, str, str]]:
    """Rank 0's packing figures over the same ``steps`` steps per packing window (0: plain), as
    :func:`steady_rates` measures: delivered tokens (padding left out) per CPU second, best of ``repeats``."""
    loaders, starts, figures = {}, {}, {}
    for n in windows:
        loaders[n], starts[n] = rank0_at_start(root, packing_window=n)
        delivered = sum(int(loaders[n].next_batch().loss_mask.sum()) for _ in range(steps))
        figures[n] = (delivered, loaders[n].metrics())
    best = best_passes(loaders, starts, steps, {n: f[0] for n, f in figures.items()}, repeats)
    rows = []
    for n in windows:
        loaders[n].close()
        m = figures[n][1]
        pad = m.get("packing_padding_rate", 0.0)
        detail = (
            f"padding {pad:.2%} (one piece a sequence: {m['packing_naive_padding_rate']:.1%}), truncation "
            f"{m['packing_truncation_rate']:.1%}, fragments {m['packing_fragment_rate']:.2%}; "
            if n
            else "padding 0; "
        )
        rows.append(
            (
                f"loader, the same steps re-read, packing window {n or 'off'}",
                f"{detail}{best[n] / 1e6:.2f} M tokens/CPU s",
                f"{best[n] / best[windows[0]]:.2f} of off",
            )
        )
    return rows


def requests_per_step(root: Path, buffer: int, steps: int) -> tuple[float, int]:
    """Read requests a step of rank 0 makes (byte ranges after coalescing, counted where the store computes
    them) and the bytes they cover, over ``steps`` steps with the shuffle buffer ``buffer``."""
    counted: list[int] = []

    def counting(opened, start: int, end: int, gap: int):
        lo, hi = byte_ranges(opened, start, end, gap)
        counted.append(len(lo))
        return lo, hi

    faults.byte_ranges = counting
    try:
        loader = make(root, shuffle_buffer=buffer, prefetch_steps=0)
        for _ in range(steps):
            loader.next_batch()
    finally:
        faults.byte_ranges = byte_ranges
    return sum(counted) / steps, loader.store.bytes_read


def baseline_rate(root: Path, steps: int, clock=time.perf_counter) -> float:
    """Consecutive seq_len slices of the memory-mapped shards, as tensors: the floor of any loader (tokens
    per second of ``clock``: wall, or ``time.process_time`` for CPU seconds)."""
    arrays = [np.memmap(f, dtype=np.uint16, mode="r") for f in sorted(root.rglob("*.bin"))]
    t0 = clock()
    a, pos = 0, 0
    for _ in range(steps):
        rows = []
        for _ in range(BATCH):
            if pos + SEQ_LEN > arrays[a].shape[0]:
                a, pos = (a + 1) % len(arrays), 0
            rows.append(torch.from_numpy(arrays[a][pos : pos + SEQ_LEN].astype(np.int64)))
            pos += SEQ_LEN
        torch.stack(rows)
    return steps * BATCH * SEQ_LEN / (clock() - t0)


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
    ap.add_argument("--rss-shards", type=int, default=200, help="shards of the peak-RSS snapshot")
    ap.add_argument(
        "--shuffle-buffers", default="64,1024", help="shuffle windows (documents) to rate, comma-separated"
    )
    ap.add_argument(
        "--packing-windows",
        default="16,128,1024",
        help="packing windows (documents) to rate, comma-separated",
    )
    ap.add_argument("--packing-only", action="store_true", help="only the packing rows")
    ap.add_argument("--rss-child", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--budget-mb", type=int, default=16, help=argparse.SUPPRESS)
    ap.add_argument(
        "--out", type=Path, default=None, help="where to write the snapshot (default: a temp dir)"
    )
    args = ap.parse_args()
    if args.rss_child:
        print(json.dumps(rss_child(args.rss_child, args.budget_mb)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        root = write_bench_snapshot(args.out or Path(tmp), args.shards_per_bucket, args.tokens_per_shard)
        total = sum(s["tokens"] for s in json.loads((root / "manifest.json").read_text())["shards"])
        warm(root)
        windows = [0, *(int(n) for n in args.packing_windows.split(",") if n)]
        if args.packing_only:
            print_rows(packing_rows(root, windows, args.steps))
            return 0
        loader = make(root)
        first = loader_rate(loader, args.steps)
        steady = loader_rate(loader, args.steps)
        base = baseline_rate(root, args.steps)
        buffers = [0, *(int(n) for n in args.shuffle_buffers.split(",") if n)]
        rates = steady_rates(root, buffers, args.steps)
        requests = {n: requests_per_step(root, n, args.steps) for n in buffers}
        by_block = hashed_per_rank(root / "manifest.json")
        by_file = hashed_per_rank(root / "manifest-legacy.json")
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
            *(
                (
                    f"loader, the same steps re-read, shuffle buffer {n or 'off'}",
                    f"{r / 1e6:.2f} M tokens/CPU s (memmap slices in turns with it: {base_cpu / 1e6:.2f} M); "
                    f"{requests[n][0]:.1f} read requests a step, {requests[n][1] / 2**20:.2f} MiB",
                    f"{r / rates[0][0]:.2f} of off; {paired:.2f} of memmap's tokens/CPU s (median of "
                    f"paired passes; best over best {r / base_cpu:.2f}), {r / base:.2f} of its tokens/s",
                )
                for n, (r, base_cpu, paired) in rates.items()
            ),
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
        mib = 2**20
        for name, hashed in (
            ("per-block digests", by_block),
            ("whole-file sha256 (older manifests)", by_file),
        ):
            h = [x[0] / mib for x in hashed]
            rows.append(
                (
                    f"bytes hashed per rank over an epoch, {name}",
                    f"{min(h):.1f}..{max(h):.1f} MiB (mean {sum(h) / len(h):.1f})",
                    f"{sum(x[0] for x in hashed) / sum(x[1] for x in hashed):.2f} x bytes read",
                )
            )
        rows.append(
            (
                "bytes read per rank over an epoch",
                f"{sum(x[1] for x in by_block) / len(by_block) / mib:.1f} MiB (mean)",
                "",
            )
        )
        rows += packing_rows(root, windows, args.steps)
        rows += rss_rows(args.rss_shards, Path(tmp))
    print(
        f"snapshot: {2 * args.shards_per_bucket} uint16 shards, {total / 1e6:.0f} M tokens; rank 0 of {WORLD}, "
        f"seq_len {SEQ_LEN}, batch {BATCH}, {args.steps} steps per rate; record at 10^6 has "
        f"{len(json.dumps(rec_m)) / 1e3:.1f} kB"
    )
    print_rows(rows)
    return 0


def print_rows(rows: list[tuple[str, str, str]]) -> None:
    w = max(len(r[0]) for r in rows)
    print(f"| {'measure'.ljust(w)} | value | ratio |")
    print(f"|{'-' * (w + 2)}|-------|-------|")
    for name, value, ratio in rows:
        print(f"| {name.ljust(w)} | {value} | {ratio} |")


if __name__ == "__main__":
    sys.exit(main())
