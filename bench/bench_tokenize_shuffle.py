"""Benchmark: the write_shards global shuffle on 1 and 2 ranks (the tokenizer: ``bench_tokenize.py``).

Data: Perl's documentation (``../shared/data/curated/perl-doc.jsonl.gz``, 206 real documents, 8.8 MB),
repeated ``--copies`` times under different source names.

* Shuffle: the write_shards stage's global phase on 1 and 2 MPI ranks (read the tokenize stage, route
  every document's lineage record + tokens to its shard's owner with ``shuffle_by_key``), MB/s of
  records moved, from the stage's own timing lines; the peer is one process building the same records
  and sorting them in memory (``sorted``), which is what the shuffle replaces.

Run: ``.venv/bin/python bench/bench_tokenize_shuffle.py`` (about two minutes on two cores).
"""

from __future__ import annotations

import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core: set before tokenizers starts its pool
os.environ["RAYON_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.formats.docshard import atomic_write_json, iter_docs, write_shard  # noqa: E402
from corpus.formats.megatron import IndexedShard  # noqa: E402
from corpus.model import Document, ShardRef, StageManifest  # noqa: E402
from corpus.model.digest import canonical_json, json_digest, sha256_hex  # noqa: E402
from hpc_jobs.write_shards.census import shuffle_key  # noqa: E402
from hpc_jobs.write_shards.shard_writer import lineage_record  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"


def load_texts() -> list[tuple[str, str, str]]:
    with gzip.open(SHARED / "curated" / "perl-doc.jsonl.gz", "rt", encoding="utf-8") as f:
        return [(r["text"], r["url"], r["license"]) for r in map(json.loads, f)]


def make_stage(stage_dir: Path, docs: list[Document], parts: int = 8) -> None:
    outputs = []
    for p in range(parts):
        rel = f"shards/part-{p}.jsonl.zst"
        sc = write_shard(stage_dir / rel, (d.to_json_bytes() for d in docs[p::parts]))
        outputs.append(ShardRef(rel, sc["sha256"], sc["records"]))
    m = StageManifest("minhash_dedup", "bench", {}, json_digest({}), (), tuple(outputs), (), {}, {})
    atomic_write_json(stage_dir / "manifest.json", m.to_dict())


def mpi(ranks: int, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAYON_NUM_THREADS")
    env.pop("TOKENIZERS_PARALLELISM")
    cmd = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(ranks), sys.executable, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return proc


def baseline_sort(tok_dir: Path, seed: int) -> tuple[float, float]:
    """One process: read the tokenize stage, build the same records, sort them in memory."""
    t0 = time.perf_counter()
    records = []
    for shard in sorted((tok_dir / "shards").glob("*.jsonl.zst")):
        name = shard.name.removesuffix(".jsonl.zst")
        tokens = IndexedShard(tok_dir / "tokens" / name)
        for i, doc in enumerate(iter_docs(shard)):
            skey = shuffle_key(doc.doc_id, seed)
            meta = canonical_json(lineage_record(doc))
            payload = struct.pack("<I", len(meta)) + meta + np.asarray(tokens.document(i)).tobytes()
            records.append((struct.pack(">HIQ", 0, 0, skey) + doc.doc_id.encode(), payload))
    records.sort()
    dt = time.perf_counter() - t0
    return sum(len(k) + len(p) + 8 for k, p in records) / 1e6, dt


def bench_shuffle(texts: list[tuple[str, str, str]], copies: int, work: Path) -> list[tuple]:
    docs = [
        Document.create(
            text=t,
            source=f"perl-doc-{c}",
            source_tier="curated" if c % 2 == 0 else "web",
            url=u,
            crawl_date="2026-01-15",
            raw_digest=sha256_hex(u),
            license_hint=lic,
        )
        for c in range(copies)
        for t, u, lic in texts
    ]
    make_stage(work / "in", docs)
    cfg = work / "bench.toml"
    cfg.write_text("seed = 1\n[write_shards]\nshard_target_tokens = 1048576\n")
    mpi(
        2,
        "-m",
        "hpc_jobs.tokenize",
        "--in",
        str(work / "in"),
        "--out",
        str(work / "tok"),
        "--config",
        str(cfg),
    )
    rows, shard_sets = [], []
    for ranks in (1, 2):
        out = work / f"shards-{ranks}"
        t0 = time.perf_counter()
        proc = mpi(
            ranks,
            "-m",
            "hpc_jobs.write_shards",
            "--in",
            str(work / "tok"),
            "--out",
            str(out),
            "--config",
            str(cfg),
        )
        wall = time.perf_counter() - t0
        lines = re.findall(r"received (\d+) docs, ([\d.]+) MB in ([\d.]+)s", proc.stderr)
        mb = sum(float(m) for _, m, _ in lines)
        secs = max(float(s) for _, _, s in lines)
        shard_sets.append(json.loads((out / "manifest.json").read_text())["side_outputs"])
        rows.append((f"write_shards shuffle, {ranks} rank{'s' if ranks > 1 else ''}", mb, secs, wall))
    assert [s for s in shard_sets[0] if s["path"].startswith("megatron/")] == [
        s for s in shard_sets[1] if s["path"].startswith("megatron/")
    ], "shards differ between 1 and 2 ranks"
    mb, secs = baseline_sort(work / "tok", seed=1)
    rows.append(("peer: 1 process, records + in-memory sort", mb, secs, secs))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--copies", type=int, default=6, help="copies of perl-doc in the shuffle corpus")
    args = ap.parse_args()
    texts = load_texts()
    work = Path(tempfile.mkdtemp(prefix="bench-shuffle-"))
    try:
        rows = bench_shuffle(texts, args.copies, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n## Global shuffle ({args.copies} x perl-doc: {args.copies * len(texts)} documents)\n")
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores when done (times are wall-clock)\n"
    )
    print("| run | MB moved | shuffle s | MB/s | stage wall s | vs peer |")
    print("|---|---:|---:|---:|---:|---:|")
    peer = rows[-1][1] / rows[-1][2]
    for name, mb, secs, wall in rows:
        print(f"| {name} | {mb:.1f} | {secs:.2f} | {mb / secs:.1f} | {wall:.1f} | {mb / secs / peer:.2f}x |")


if __name__ == "__main__":
    main()
