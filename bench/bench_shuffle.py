"""Benchmark: the shuffle's bytes path against its numpy path, and its round size as the rank count grows.

Records: ``--records`` (default 3 M) fixed-width records, a 16-byte random key and an 8-byte payload
(seeded, generated on each rank in batches of 64 K, never held whole), routed by the key's first 8 bytes.

* Throughput, on 1 and 2 ranks under ``mpiexec`` at ``--budget-mb`` (default 64, so 2 ranks spill):
  ``shuffle_by_key`` (each row becomes a (key, payload) pair of ``bytes``, as a stage using it would build
  them) against ``shuffle_array`` on the same rows, from the first batch to the last output row consumed.
  Records/s and MB/s per rank (24 bytes a record), rounds, spilled runs, largest round received, and peak
  resident memory per rank (VmHWM; the table's first line gives a rank that shuffles nothing).
  The peer in the same run: one process sorting all rows in memory with ``sort_rows`` (no routing, no
  budget), the floor a shuffle cannot beat on one core.
* Round plan, no MPI: the bytes one rank receives per round and the message per peer with keys spread
  evenly, at a 64 MB budget for P = 2 ... 1000, under the old rule (``budget / (4 P)`` per rank and round)
  and the new one (``budget / 4`` per rank, split by grants); then :func:`simulate_rounds` (the protocol
  itself) for P up to 128, spread and all-to-one.

Run: ``.venv/bin/python bench/bench_shuffle.py`` (about two minutes on two cores).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mpi_kernels.row_order import field_u64, sort_rows  # noqa: E402
from mpi_kernels.shuffle_array import shuffle_array  # noqa: E402
from mpi_kernels.shuffle_bytes import shuffle_by_key  # noqa: E402
from mpi_kernels.shuffle_rounds import old_round_bytes, round_bytes, simulate_rounds  # noqa: E402

DTYPE = np.dtype([("key", "V16"), ("payload", "V8")])
BATCH = 1 << 16


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def my_batches(total: int, rank: int, size: int):
    """This rank's share of the records, batch by batch, the same rows whatever the rank count."""
    for b, start in enumerate(range(0, total, BATCH)):
        if b % size != rank:
            continue
        n = min(BATCH, total - start)
        raw = np.random.default_rng([7, b]).integers(0, 256, size=(n, 24), dtype=np.uint8)
        yield raw.view(DTYPE)[:, 0]


def owner_rows(rows: np.ndarray) -> np.ndarray:
    return field_u64(rows, "key", 0)


def owner_key(key: bytes) -> int:
    return int.from_bytes(key[:8], "little")


def worker(path: str, total: int, budget: int, out: Path) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    spill = Path(tempfile.mkdtemp(prefix="bench-shuffle-"))
    comm.Barrier()
    t0 = time.perf_counter()
    if path == "idle":  # the process alone: interpreter, numpy, mpi4py
        res, n = None, 0
    elif path == "bytes":

        def pairs():
            for batch in my_batches(total, comm.rank, comm.size):
                raw = batch.view(np.uint8).reshape(len(batch), 24).tobytes()
                for i in range(0, len(raw), 24):
                    yield raw[i : i + 16], raw[i + 16 : i + 24]

        res = shuffle_by_key(
            comm, pairs(), partition_of=owner_key, memory_budget_bytes=budget, spill_dir=spill
        )
        n = sum(1 for _ in res)
    else:
        res = shuffle_array(
            comm,
            my_batches(total, comm.rank, comm.size),
            dtype=DTYPE,
            dest_of=owner_rows,
            order_fields=("key",),
            memory_budget_bytes=budget,
            spill_dir=spill,
        )
        n = sum(len(b) for b in res)
    secs = time.perf_counter() - t0
    shutil.rmtree(spill, ignore_errors=True)  # the shuffle removed its own files; this is the empty parent
    stats = {**(res.stats.as_dict() if res else {}), "out": n, "secs": secs, "rss_mb": peak_rss_mb()}
    everyone = comm.gather(stats)
    if comm.rank == 0:
        out.write_text(json.dumps(everyone))


def run_ranks(path: str, ranks: int, total: int, budget: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "stats.json"
        mpiexec = str(Path(sys.executable).parent / "mpiexec")
        cmd = [mpiexec, "-n", str(ranks), sys.executable, __file__, "--worker", path]
        cmd += ["--records", str(total), "--budget-mb", str(budget >> 20), "--out", str(out)]
        subprocess.run(cmd, check=True, cwd=ROOT)
        return json.loads(out.read_text())


def in_memory_sort(total: int) -> float:
    rows = np.concatenate(list(my_batches(total, 0, 1)))
    t0 = time.perf_counter()
    sort_rows(rows, ("key",))
    return time.perf_counter() - t0


def plan_table(budget: int) -> None:
    print(f"\nround plan at a {budget >> 20} MB budget, keys spread evenly (computed)")
    print(
        f"{'P':>6} | {'old: per rank/round':>20} | {'old: per peer':>14} | {'new: per rank/round':>20} | {'new: per peer':>14}"
    )
    for p in (2, 4, 10, 32, 100, 320, 1000):
        old, new = old_round_bytes(budget, p), round_bytes(budget)
        print(
            f"{p:>6} | {fmt_bytes(old):>20} | {fmt_bytes(old / p):>14} | {fmt_bytes(new):>20} | {fmt_bytes(new / p):>14}"
        )
    print("\nthe protocol simulated (simulate_rounds), 4 KB records, three rounds' worth per rank")
    print(f"{'P':>6} | {'keys':>10} | {'rounds':>6} | {'largest round received':>22} | {'mean message':>12}")
    limit = round_bytes(budget)
    n = 3 * limit // 4096
    for p, skew in ((2, False), (8, False), (32, False), (128, False), (2, True), (8, True), (32, True)):
        rng = np.random.default_rng(p)
        dests = [np.zeros(n, int) if skew else rng.integers(0, p, n) for _ in range(p)]
        trace = simulate_rounds([np.full(n, 4096) for _ in range(p)], dests, memory_budget_bytes=budget)
        print(
            f"{p:>6} | {'all to one' if skew else 'spread':>10} | {trace.rounds:>6} | "
            f"{fmt_bytes(trace.largest_round_received):>22} | {fmt_bytes(trace.mean_message_bytes):>12}"
        )


def fmt_bytes(n: float) -> str:
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--budget-mb", type=int, default=64)
    ap.add_argument("--worker", choices=["idle", "bytes", "numpy"])
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    budget = a.budget_mb << 20
    if a.worker:
        worker(a.worker, a.records, budget, a.out)
        return
    mb = a.records * 24 / 1e6
    base = in_memory_sort(a.records)
    print(f"{a.records:,} records of 24 bytes ({mb:.0f} MB), budget {a.budget_mb} MB per rank")
    print(
        f"peer: one process, sort_rows of all rows in memory: {base:.2f}s ({a.records / base / 1e6:.2f} M rec/s)"
    )
    header = (
        f"{'path':>6} | {'ranks':>5} | {'s':>6} | {'M rec/s per rank':>16} | {'MB/s per rank':>13} | "
        f"{'rounds':>6} | {'runs':>4} | {'largest round':>13} | {'peak RSS per rank':>17} | {'x bytes path':>12}"
    )
    idle = run_ranks("idle", 1, a.records, budget)[0]["rss_mb"]
    print(f"a rank that shuffles nothing (interpreter, numpy, mpi4py) peaks at {idle:.0f} MB")
    print(header)
    for ranks in (1, 2):
        times = {}
        for path in ("bytes", "numpy"):
            stats = run_ranks(path, ranks, a.records, budget)
            assert sum(s["out"] for s in stats) == a.records, "every record arrives once"
            secs = max(s["secs"] for s in stats)
            times[path] = secs
            per_rank = a.records / ranks / secs
            rss = " / ".join(f"{s['rss_mb']:.0f}" for s in stats) + " MB"
            print(
                f"{path:>6} | {ranks:>5} | {secs:>6.2f} | {per_rank / 1e6:>16.2f} | {per_rank * 24 / 1e6:>13.1f} | "
                f"{stats[0]['rounds']:>6} | {max(s['spilled_runs'] for s in stats):>4} | "
                f"{fmt_bytes(max(s['largest_round'] for s in stats)):>13} | "
                f"{rss:>17} | {times['bytes'] / secs:>12.1f}"
            )
    plan_table(budget)


if __name__ == "__main__":
    main()
