"""Benchmark: the signature store's bytes per document, its write cost, and what a probe costs.

    python bench/bench_signature_store.py [--docs 1000000] [--parts 16] [--probes 20000] [--work DIR]

A store of ``--docs`` documents (K = 112, clusters of 1 to 8 members, most singletons, as a crawl's
near-duplicate clusters are) written in ``--parts`` part files as minhash_dedup writes them; then
``--probes`` base clusters asked for (half of them held, half never), each member compared with one
document's signature as ``verified_base_edges`` does. The baseline is the plain way: every document's
full 64-bit signature and cluster id in one ``.npy`` pair, the ids searched in memory. Each measurement
runs in its own process (``--one``), so its peak RSS (VmHWM) is its own (the write steps' includes the
rows they write, made before the clock starts). Process CPU seconds, wall
seconds, bytes on disk.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.formats.signature_store import SignatureStore, store_part, truncated, write_part  # noqa: E402
from hpc_jobs.minhash_dedup.signature_store import store_route  # noqa: E402

K = 112
SEED = 20261206


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measured(what: str, cpu: float, wall: float, **more: float) -> dict:
    """One step's line of the table: its CPU and wall seconds since ``cpu``/``wall``, what it found,
    and the process's peak RSS."""
    return {
        "what": what,
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.perf_counter() - wall,
        **more,
        "peak_rss_mb": peak_rss_mb(),
    }


def clusters_of(docs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Cluster ids (V16) of ``docs`` documents, and the distinct ids: 70 % of the documents alone, the
    rest in clusters of 2-8."""
    sizes = np.where(rng.random(docs) < 0.9, 1, rng.integers(2, 9, docs))
    sizes = sizes[np.cumsum(sizes) <= docs]
    sizes = np.append(sizes, np.ones(docs - int(sizes.sum()), dtype=sizes.dtype))
    ids = rng.integers(0, 256, (len(sizes), 16), dtype=np.uint8).view("V16").reshape(-1)
    return np.repeat(ids, sizes), ids


CHUNK = 65536


def sorted_members(docs: int) -> np.ndarray:
    """Every document's cluster id, sorted: document ``i`` of both ways is the ``i``-th of these."""
    members, _ = clusters_of(docs, np.random.default_rng(SEED))
    return np.sort(members, kind="stable")


def signatures(lo: int, hi: int) -> np.ndarray:
    """The 64-bit signatures of documents ``[lo, hi)`` (``lo`` a multiple of :data:`CHUNK`), the same
    for both ways."""
    out = [
        np.random.default_rng([SEED, c]).integers(0, 2**63, (CHUNK, K), dtype=np.uint64)
        for c in range(lo // CHUNK, (hi + CHUNK - 1) // CHUNK)
    ]
    return np.concatenate(out)[: hi - lo] if out else np.empty((0, K), np.uint64)


def write_store(args: argparse.Namespace) -> dict:
    """The parts as minhash_dedup's step writes them (the rows made first, not timed)."""
    members = sorted_members(args.docs)
    route = store_route(K)
    rows = np.empty(args.docs, dtype=route)
    rows["cluster"] = members
    rows["part"] = store_part(members, args.parts)
    rows["doc"] = (
        np.random.default_rng(SEED + 2).integers(0, 256, (args.docs, 16), np.uint8).view("V16").reshape(-1)
    )
    for lo in range(0, args.docs, CHUNK):
        rows["sig"][lo : lo + CHUNK] = truncated(signatures(lo, min(lo + CHUNK, args.docs)))
    rows.sort(order=["part", "cluster", "doc"])
    bounds = np.searchsorted(rows["part"], np.arange(args.parts + 1))
    out = Path(args.work) / "store"
    out.mkdir(parents=True, exist_ok=True)
    t, w = time.process_time(), time.perf_counter()
    for p in range(args.parts):
        mine = rows[bounds[p] : bounds[p + 1]]
        write_part(out / f"g{p:05d}.h5", p, args.parts, K, np.array_split(mine, max(1, len(mine) // CHUNK)))
    size = sum(f.stat().st_size for f in out.glob("*.h5"))
    return measured(
        "store: write",
        t,
        w,
        bytes=size,
        bytes_per_doc=size / args.docs,
    )


def write_plain(args: argparse.Namespace) -> dict:
    """The ids and full signatures in two ``.npy`` files (the signatures made first, not timed)."""
    members = sorted_members(args.docs)
    sigs = np.concatenate([signatures(lo, min(lo + CHUNK, args.docs)) for lo in range(0, args.docs, CHUNK)])
    out = Path(args.work)
    t, w = time.process_time(), time.perf_counter()
    np.save(out / "plain_ids.npy", np.ascontiguousarray(members).view(np.uint8).reshape(-1, 16))
    np.save(out / "plain_sigs.npy", sigs)
    size = (out / "plain_ids.npy").stat().st_size + (out / "plain_sigs.npy").stat().st_size
    return measured(
        "plain: write",
        t,
        w,
        bytes=size,
        bytes_per_doc=size / args.docs,
    )


def asked(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    """The probes: half held clusters, half never held (sorted, distinct), and one signature each."""
    rng = np.random.default_rng(SEED)
    _, ids = clusters_of(args.docs, rng)
    probe = np.random.default_rng(SEED + 1)
    held = ids[probe.choice(len(ids), args.probes // 2, replace=False)]
    new = probe.integers(0, 256, (args.probes - len(held), 16), dtype=np.uint8).view("V16").reshape(-1)
    clusters = np.unique(np.concatenate([held, new]))
    return clusters, truncated(probe.integers(0, 2**63, (len(clusters), K), dtype=np.uint64))


def probe_store(args: argparse.Namespace) -> dict:
    clusters, mine = asked(args)
    t, w = time.process_time(), time.perf_counter()
    store, found, agree = SignatureStore(Path(args.work) / "store"), 0, 0
    for which, sigs in store.members(clusters):
        found += len(sigs)
        agree += int((mine[which] == sigs).sum())
    return measured(
        "store: probe",
        t,
        w,
        members_read=found,
        agreeing_values=agree,
    )


def probe_plain(args: argparse.Namespace) -> dict:
    clusters, mine = asked(args)
    out = Path(args.work)
    t, w = time.process_time(), time.perf_counter()
    ids = np.load(out / "plain_ids.npy").view("V16").reshape(-1)
    sigs = np.load(out / "plain_sigs.npy", mmap_mode="r")
    lo, hi = np.searchsorted(ids, clusters, "left"), np.searchsorted(ids, clusters, "right")
    found = agree = 0
    for i in np.flatnonzero(hi > lo).tolist():
        rows = truncated(sigs[lo[i] : hi[i]])
        found += len(rows)
        agree += int((mine[i] == rows).sum())
    return measured(
        "plain: probe",
        t,
        w,
        members_read=found,
        agreeing_values=agree,
    )


STEPS = {
    "write_store": write_store,
    "write_plain": write_plain,
    "probe_store": probe_store,
    "probe_plain": probe_plain,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--parts", type=int, default=16)
    ap.add_argument("--probes", type=int, default=20_000)
    ap.add_argument("--work", default="/tmp/bench_signature_store")
    ap.add_argument("--one", choices=sorted(STEPS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(STEPS[args.one](args)))
        return
    Path(args.work).mkdir(parents=True, exist_ok=True)
    passed = [
        f"--docs={args.docs}",
        f"--parts={args.parts}",
        f"--probes={args.probes}",
        f"--work={args.work}",
    ]
    results = []
    for step in STEPS:
        done = subprocess.run(
            [sys.executable, __file__, *passed, f"--one={step}"], check=True, capture_output=True, text=True
        )
        results.append(json.loads(done.stdout))
    print(f"{args.docs:,} documents (K = {K}), {args.parts} parts; {args.probes:,} probes (half held)\n")
    print(f"| {'step':<14} | CPU s | wall s | bytes/doc | members read | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        per_doc = f"{r['bytes_per_doc']:.1f}" if "bytes_per_doc" in r else ""
        print(
            f"| {r['what']:<14} | {r['cpu_s']:.2f} | {r['wall_s']:.2f} | {per_doc} | "
            f"{r.get('members_read', '')} | {r['peak_rss_mb']:.0f} |"
        )
    store, plain = results[2], results[3]
    assert store["members_read"] == plain["members_read"], "both ways read the same members"
    assert store["agreeing_values"] == plain["agreeing_values"], "and find the same agreement"


if __name__ == "__main__":
    main()
