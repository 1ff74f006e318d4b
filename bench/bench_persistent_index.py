"""The persistent dedup index (corpus/dedup/persistent_index.py): build, probe, compact, peak memory.

    python bench/bench_persistent_index.py [--sizes 100000,1000000,4000000] [--generations 4]
        [--partitions 256] [--probe 1000000] [--hits 0.1] [--run-records 262144] [--json out.json]

For each base size N: an exact index of ``--partitions`` partitions is built as ``--generations``
generations of N / G random records each (each generation written by its own process, its records
generated in batches of 100 000: the writer's memory is its ``--run-records`` buffer, not N); then
``--probe`` keys, ``--hits`` of them keys of the base (drawn from every generation) and the rest new,
are probed in one batch, in a fresh process, with the Bloom filters and without (every key looked up
by binary search of the memory-mapped sorted files); then the generations are compacted into one and
the probe is repeated on it (compaction time: merge, fsync and switch; cleanup: unlinking the replaced
generations, timed apart since it is the file system's metadata speed alone). Peak RSS is the process's ``VmHWM`` (resident high-water mark: anonymous
memory plus the pages of the memory-mapped files it touched), next to its RSS before the operation
(interpreter, numpy, the probe keys). The realized false-positive rate is filter hits that the lookup
found absent, over absent keys tested against a filter (the sizing formula expects 1.0 %). Times are
wall seconds with the process's CPU seconds in brackets (on a shared machine the wall time is mostly
waiting: fsync, file opens).
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

from corpus.dedup import persistent_index as pi  # noqa: E402

BATCH = 100_000


def rss_kb() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0])
    return out


def generation_batches(n: int, seed: int):
    rng = np.random.default_rng(seed)
    for at in range(0, n, BATCH):
        raw = rng.integers(0, 256, (min(BATCH, n - at), 32), dtype=np.uint8)
        yield raw.view(pi.EXACT_RECORD).reshape(-1)


# --- child processes (one operation each, so that each peak RSS is its own) -----------------------------


def child_build(root: str, n: int, seed: int, run_records: int, hits: int) -> dict:
    idx = pi.PersistentIndex.open(root)
    before = rss_kb()["VmRSS"]
    kept = []

    def batches():
        for rows in generation_batches(n, seed):
            if sum(len(k) for k in kept) < hits:
                kept.append(rows["key"][: hits - sum(len(k) for k in kept)].copy())
            yield rows

    t, c = time.perf_counter(), time.process_time()
    idx.add_generation(f"build-{seed}", batches(), run_records=run_records)
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    np.concatenate(kept).tofile(Path(root).parent / f"hits-{seed}.keys")
    return {"seconds": seconds, "cpu": cpu, "rss_before_kb": before, "peak_kb": rss_kb()["VmHWM"]}


def child_probe(root: str, keys_file: str, use_bloom: bool) -> dict:
    idx = pi.PersistentIndex.open(root)
    keys = np.fromfile(keys_file, dtype="V16")
    before = rss_kb()["VmRSS"]
    stats = pi.ProbeStats()
    t, c = time.perf_counter(), time.process_time()
    result = idx.probe(keys, use_bloom=use_bloom, stats=stats)
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    return {
        "seconds": seconds, "cpu": cpu, "rss_before_kb": before, "peak_kb": rss_kb()["VmHWM"],
        "found": int(result.found.sum()), "lookups": stats.lookups, "bloom_tests": stats.bloom_tests,
        "false_positives": stats.false_positives, "fp_rate": stats.fp_rate,
    }


def child_compact(root: str, merge_records: int) -> dict:
    idx = pi.PersistentIndex.open(root)
    before = rss_kb()["VmRSS"]
    t, c = time.perf_counter(), time.process_time()
    pending = idx.begin_compaction()
    pending.compact_partitions(range(idx.partitions), merge_records)
    new = pending.commit()
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    t = time.perf_counter()
    new.cleanup()  # the replaced generations' files, unlinked
    return {"seconds": seconds, "cpu": cpu, "cleanup_seconds": time.perf_counter() - t, "rss_before_kb": before,
            "peak_kb": rss_kb()["VmHWM"]}


def run_child(*args) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", *map(str, args)], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"child {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the bench ----------------------------------------------------------------------------------------


def bench_size(work: Path, n: int, gens: int, partitions: int, probe: int, hit: float, run_records: int) -> dict:
    root = work / "index"
    pi.PersistentIndex.create(root, "exact", pi.exact_key_params(), partitions)
    per_gen = n // gens
    hits_per_gen = int(probe * hit) // gens
    builds = [run_child("build", root, per_gen, g + 1, run_records, hits_per_gen) for g in range(gens)]
    disk = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    # the probe: hits from every generation and new random keys, shuffled
    hit_keys = np.concatenate([np.fromfile(work / f"hits-{g + 1}.keys", dtype="V16") for g in range(gens)])
    new = np.random.default_rng(12345).integers(0, 256, (probe - len(hit_keys), 16), dtype=np.uint8)
    keys = np.concatenate([hit_keys, new.view("V16").reshape(-1)])
    keys = keys[np.random.default_rng(7).permutation(len(keys))]
    keys.tofile(work / "probe.keys")
    with_bloom = run_child("probe", root, work / "probe.keys", 1)
    without = run_child("probe", root, work / "probe.keys", 0)
    compact = run_child("compact", root, run_records)
    after = run_child("probe", root, work / "probe.keys", 1)
    assert with_bloom["found"] == without["found"] == after["found"] == len(hit_keys), "a probe answer differs"
    return {
        "records": n, "generations": gens, "partitions": partitions, "probe_keys": probe,
        "hits": len(hit_keys), "disk_bytes": disk, "build": builds, "probe_bloom": with_bloom,
        "probe_no_bloom": without, "compact": compact, "probe_compacted": after,
    }


def mb(kb: int) -> str:
    return f"{kb / 1024:.0f}"


def secs(r: dict) -> str:
    return f"{r['seconds']:.2f} ({r['cpu']:.2f})"


def table(rows: list[dict]) -> str:
    lines = [
        "| base records | gens x P | build / gen: s (cpu) | peak MB | probe, Bloom: s (cpu) | peak MB (before) "
        "| lookups | probe, no Bloom: s (cpu) | peak MB (before) | lookups | realized FP | compact: s (cpu) "
        "| peak MB | cleanup s | probe compacted: s (cpu) | peak MB |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        b, nb, c, a = r["probe_bloom"], r["probe_no_bloom"], r["compact"], r["probe_compacted"]
        g = len(r["build"])
        build = {"seconds": sum(x["seconds"] for x in r["build"]) / g, "cpu": sum(x["cpu"] for x in r["build"]) / g}
        lines.append(
            f"| {r['records']:,} | {r['generations']} x {r['partitions']} | {secs(build)} "
            f"| {mb(max(x['peak_kb'] for x in r['build']))} "
            f"| {secs(b)} | {mb(b['peak_kb'])} ({mb(b['rss_before_kb'])}) | {b['lookups']:,} "
            f"| {secs(nb)} | {mb(nb['peak_kb'])} ({mb(nb['rss_before_kb'])}) | {nb['lookups']:,} "
            f"| {100 * b['fp_rate']:.2f} % | {secs(c)} | {mb(c['peak_kb'])} | {c['cleanup_seconds']:.2f} "
            f"| {secs(a)} | {mb(a['peak_kb'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        op, args = sys.argv[2], sys.argv[3:]
        if op == "build":
            out = child_build(args[0], int(args[1]), int(args[2]), int(args[3]), int(args[4]))
        elif op == "probe":
            out = child_probe(args[0], args[1], args[2] == "1")
        else:
            out = child_compact(args[0], int(args[1]))
        print(json.dumps(out))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000,4000000")
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=256)
    ap.add_argument("--probe", type=int, default=1_000_000)
    ap.add_argument("--hits", type=float, default=0.1)
    ap.add_argument("--run-records", type=int, default=1 << 18)
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    rows = []
    for n in (int(s) for s in a.sizes.split(",")):
        work = Path(tempfile.mkdtemp(prefix="bench-pindex-", dir=a.dir))
        try:
            rows.append(bench_size(work, n, a.generations, a.partitions, a.probe, a.hits, a.run_records))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"N={n:,} done", file=sys.stderr, flush=True)
    print(table(rows))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
