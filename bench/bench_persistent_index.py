"""The persistent dedup index (corpus/formats/dedup_*.py): build, probe, compact, peak memory.

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

    python bench/bench_persistent_index.py --commit [--commit-records 4000000] [--commit-parts 16]
        [--commit-partitions 64] [--commit-ranks 1,2]

The build's index commit across ranks (``runtime.build.commit_indexes``): a build directory whose
exact_dedup manifest lists ``--commit-parts`` ``index_records`` artifacts of ``--commit-records`` random
exact records in all (each sorted by key, as the stage writes them), its exact index empty with
``--commit-partitions`` partitions; for each rank count the generation is begun, written by the commit job
(``mpiexec -n R python -m hpc_jobs.commit_index``), committed, and its bytes compared with the first
run's. Per rank: the seconds it spent writing and its peak RSS (``VmHWM``), as the job reports them;
begin, job (launch included) and commit are wall seconds of the owning process.
"""

from __future__ import annotations

import argparse
import hashlib
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

from corpus.formats import dedup_files, dedup_keys, dedup_probe  # noqa: E402
from corpus.formats import dedup_index as pi  # noqa: E402
from corpus.formats.docshard import atomic_write_json  # noqa: E402
from corpus.model import ShardRef, StageManifest  # noqa: E402
from corpus.model.layout import dedup_index_dir, manifest_path, stage_dir  # noqa: E402
from runtime import build as pipeline  # noqa: E402

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
        yield raw.view(dedup_keys.EXACT_RECORD).reshape(-1)


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
    stats = dedup_probe.ProbeStats()
    t, c = time.perf_counter(), time.process_time()
    result = idx.probe(keys, use_bloom=use_bloom, stats=stats)
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    return {
        "seconds": seconds,
        "cpu": cpu,
        "rss_before_kb": before,
        "peak_kb": rss_kb()["VmHWM"],
        "found": int(result.found.sum()),
        "lookups": stats.lookups,
        "bloom_tests": stats.bloom_tests,
        "false_positives": stats.false_positives,
        "fp_rate": stats.fp_rate,
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
    return {
        "seconds": seconds,
        "cpu": cpu,
        "cleanup_seconds": time.perf_counter() - t,
        "rss_before_kb": before,
        "peak_kb": rss_kb()["VmHWM"],
    }


def run_child(*args) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", *map(str, args)], capture_output=True, text=True
    )
    if proc.returncode:
        raise SystemExit(f"child {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the bench ----------------------------------------------------------------------------------------


def bench_size(
    work: Path, n: int, gens: int, partitions: int, probe: int, hit: float, run_records: int
) -> dict:
    root = work / "index"
    pi.PersistentIndex.create(root, "exact", dedup_keys.exact_key_params(), partitions)
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
    assert with_bloom["found"] == without["found"] == after["found"] == len(hit_keys), (
        "a probe answer differs"
    )
    return {
        "records": n,
        "generations": gens,
        "partitions": partitions,
        "probe_keys": probe,
        "hits": len(hit_keys),
        "disk_bytes": disk,
        "build": builds,
        "probe_bloom": with_bloom,
        "probe_no_bloom": without,
        "compact": compact,
        "probe_compacted": after,
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
        build = {
            "seconds": sum(x["seconds"] for x in r["build"]) / g,
            "cpu": sum(x["cpu"] for x in r["build"]) / g,
        }
        lines.append(
            f"| {r['records']:,} | {r['generations']} x {r['partitions']} | {secs(build)} "
            f"| {mb(max(x['peak_kb'] for x in r['build']))} "
            f"| {secs(b)} | {mb(b['peak_kb'])} ({mb(b['rss_before_kb'])}) | {b['lookups']:,} "
            f"| {secs(nb)} | {mb(nb['peak_kb'])} ({mb(nb['rss_before_kb'])}) | {nb['lookups']:,} "
            f"| {100 * b['fp_rate']:.2f} % | {secs(c)} | {mb(c['peak_kb'])} | {c['cleanup_seconds']:.2f} "
            f"| {secs(a)} | {mb(a['peak_kb'])} |"
        )
    return "\n".join(lines)


# --- the commit across ranks ----------------------------------------------------------------------------


def commit_build(work: Path, n: int, parts: int) -> Path:
    """A build at its last step: exact_dedup's manifest listing ``parts`` index_records artifacts of
    ``n`` random records in all, each sorted by key."""
    out = work / "build"
    stage = stage_dir(out, "exact_dedup")
    (stage / pipeline.INDEX_RECORDS).mkdir(parents=True)
    side, rng = [], np.random.default_rng(2026)
    for part in range(parts):
        rows = rng.integers(0, 256, ((part + 1) * n // parts - part * n // parts, 32), dtype=np.uint8)
        words = rows[:, :16].copy().view(">u8")
        rows = rows[np.lexsort((words[:, 1], words[:, 0]))].view(dedup_keys.EXACT_RECORD).reshape(-1)
        rel = f"{pipeline.INDEX_RECORDS}/p{part:05d}.exact.rec"
        data = rows.tobytes()
        (stage / rel).write_bytes(data)
        side.append(ShardRef(rel, hashlib.sha256(data).hexdigest(), len(rows)))
    m = StageManifest("exact_dedup", "bench", {}, "", (), (), tuple(side), {}, {})
    atomic_write_json(manifest_path(stage), m.to_dict())
    return out


def bench_commit(work: Path, n: int, parts: int, partitions: int, rank_counts: list[int]) -> list[dict]:
    out = commit_build(work, n, parts)
    m = pipeline.read_stage_manifests(out)[0]
    root, label = dedup_index_dir(out, "exact"), "bench-" + "0" * 58
    rows, first = [], None
    for ranks in rank_counts:
        shutil.rmtree(root, ignore_errors=True)
        pi.PersistentIndex.create(root, "exact", dedup_keys.exact_key_params(), partitions)
        t0 = time.perf_counter()
        pending = pipeline.begin_commit(out, "exact", dedup_keys.exact_key_params(), m, label)
        t1 = time.perf_counter()
        cmd = [pipeline.mpiexec_path(), "-n", str(ranks), *pipeline.commit_job_command(out, ["exact"], label)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        t2 = time.perf_counter()
        index = pending.commit()
        t3 = time.perf_counter()
        (gen,) = index.generations
        digest = hashlib.sha256((gen.path / dedup_files.MANIFEST).read_bytes()).hexdigest()
        first = first or digest
        assert digest == first, f"the generation written on {ranks} ranks differs"
        job = json.loads(proc.stdout.strip().splitlines()[-1])
        run = {"records": n, "parts": parts, "partitions": partitions, "ranks": ranks}
        rows.append({**run, "begin": t1 - t0, "job": t2 - t1, "commit": t3 - t2, "by_rank": job["ranks"]})
        print(f"commit on {ranks} rank(s) done", file=sys.stderr, flush=True)
    return rows


def commit_table(rows: list[dict]) -> str:
    lines = [
        "| records (artifacts) | P | ranks | begin s | job s (launch included) | commit s | per rank: records, write s, peak MB |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        per = "; ".join(
            f"{x['records']:,}, {x['seconds']:.2f} s, {x['peak_rss_mb']:.0f} MB" for x in r["by_rank"]
        )
        lines.append(
            f"| {r['records']:,} ({r['parts']}) | {r['partitions']} | {r['ranks']} | {r['begin']:.2f} "
            f"| {r['job']:.2f} | {r['commit']:.2f} | {per} |"
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
    ap.add_argument("--commit", action="store_true", help="bench the index commit across ranks instead")
    ap.add_argument("--commit-records", type=int, default=4_000_000)
    ap.add_argument("--commit-parts", type=int, default=16)
    ap.add_argument("--commit-partitions", type=int, default=64)
    ap.add_argument("--commit-ranks", default="1,2")
    a = ap.parse_args()
    if a.commit:
        work = Path(tempfile.mkdtemp(prefix="bench-pindex-commit-", dir=a.dir))
        try:
            ranks = [int(r) for r in a.commit_ranks.split(",")]
            rows = bench_commit(work, a.commit_records, a.commit_parts, a.commit_partitions, ranks)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(commit_table(rows))
        if a.json:
            a.json.write_text(json.dumps(rows, indent=1))
        return
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
