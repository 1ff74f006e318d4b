"""Loader on a slow filesystem: the consumer's wait for each step's data, prefetch off and on.

    python bench/bench_loader_latency.py [--latency-ms 20] [--consume-ms 250] [--steps 32] [--prefetch 4]

Writes the loader bench's snapshot (uint16 shards, bench/bench_loader.py), then reads it as rank 0 of 8
(seq_len 2048, batch 8) with ``--latency-ms`` slept before every read (the store's ``before_read`` hook:
a parallel filesystem's per-request latency) and ``--consume-ms`` per step after it (a GPU-like training
step, slower than the reader). Reports per mode the step data latency (how long ``next_batch`` waited for
its data, the loader's ``step_wait_ms``), read latency, stalls, and a digest of the delivered tokens, which
must be the same with prefetch off and on.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_loader import BATCH, SEQ_LEN, WORLD, make, warm, write_bench_snapshot  # noqa: E402

from loader.metrics import percentiles_ms  # noqa: E402


def run(root: Path, prefetch: int, latency_s: float, consume_s: float, steps: int) -> dict:
    """One pass of ``steps`` steps; the consumer's wait per step (after the first) and the loader's metrics."""
    loader = make(root, 0, WORLD, prefetch_steps=prefetch)
    loader.store.before_read = lambda shard, start, end: time.sleep(latency_s)
    digest = hashlib.sha256()
    t0 = time.perf_counter()
    for _ in range(steps):
        batch = loader.next_batch()
        digest.update(batch.tokens.numpy().tobytes())
        time.sleep(consume_s)
    wall = time.perf_counter() - t0
    waits = list(loader.reader.metrics.wait_s)
    metrics = loader.metrics()
    loader.close()
    return {
        "wait": percentiles_ms(waits[1:]),  # the first step waits for the reader to start in both modes
        "first_ms": waits[0] * 1e3,
        "metrics": metrics,
        "digest": digest.hexdigest()[:16],
        "wall_s": wall,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--consume-ms", type=float, default=250.0)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prefetch", type=int, default=4)
    ap.add_argument("--tokens-per-shard", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = write_bench_snapshot(Path(tmp), 2, args.tokens_per_shard)
        warm(root)
        rows = {
            mode: run(root, prefetch, args.latency_ms / 1e3, args.consume_ms / 1e3, args.steps)
            for mode, prefetch in (("off", 0), (f"on ({args.prefetch} steps)", args.prefetch))
        }
    print(
        f"rank 0 of {WORLD}, seq_len {SEQ_LEN}, batch {BATCH}; {args.latency_ms:g} ms slept per read, "
        f"{args.consume_ms:g} ms consumed per step, {args.steps} steps"
    )
    print(
        "\n| prefetch | step data latency p50 / p99 | first step | read latency p50 / p99 | reads | "
        "stalls | wall | tokens (sha256) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for mode, r in rows.items():
        m = r["metrics"]
        print(
            f"| {mode} | {r['wait']['p50']:.2f} / {r['wait']['p99']:.2f} ms | {r['first_ms']:.0f} ms | "
            f"{m['read_latency_ms']['p50']:.1f} / {m['read_latency_ms']['p99']:.1f} ms | {m['reads']} | "
            f"{m['prefetch_stalls']} | {r['wall_s']:.1f} s | {r['digest']} |"
        )
    same = len({r["digest"] for r in rows.values()}) == 1
    print(f"\nsame tokens delivered: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
