"""write_shards' peak memory per rank at N and 4N documents: this version against the one it replaces.

    python bench/bench_write_shards.py [--n 10000] [--ranks 2] [--budget-mb 64] [--out DIR]

Why: issue 11 measured write_shards at 209 -> 467 MB per rank from 10,000 to 40,000 documents with a
256 MB budget (x2.2, above its own budget), then, with the phase in parts, 93 -> 127 MB at 64 MB
(bench_scale: the documents themselves on the shuffle's bytes path). The stage must cost the same
memory per rank whatever the corpus size. Both versions run in the same invocation on the same tokenize
stage, so the ratio is measured, not remembered: the *peer* is the previous write_shards (``git show
REV:hpc_jobs/write_shards/``, ``--peer-rev``, default the last commit that shipped documents on the
bytes path), run as a script. Their outputs must be the same bytes: the table says whether the two
stage manifests' digests (which cover every shard's and index part's sha256) are equal.

The corpus: windows of Perl's real POD documentation (``../shared/data/curated/perl-doc.jsonl.gz``),
800 characters each at distinct offsets, half labelled web, half curated; tokenized once per size with
the pinned OLMo tokenizer. The peak per rank is the VmHWM each rank recorded in the stage manifest
(``run_info.peak_rss_mb_by_rank``; the table shows the largest rank). A benchmark, not a test: the exit
status is 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.model import Document  # noqa: E402
from tests.snapshot.conftest import make_stage_dir, write_config  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
WINDOW = 800


def documents(n: int) -> list[Document]:
    with gzip.open(SHARED / "curated" / "perl-doc.jsonl.gz", "rt", encoding="utf-8") as f:
        text = "\n".join(json.loads(line)["text"] for line in f)
    step = max(1, (len(text) - WINDOW) // n)
    docs = []
    for i in range(n):
        web = i % 2 == 1
        docs.append(
            Document.create(
                text=text[i * step : i * step + WINDOW] + f"\n[{i}]",
                source="perl-mirror" if web else "perl-doc",
                source_tier="web" if web else "curated",
                url=f"https://example.org/{i}",
                crawl_date="2026-01-15",
                raw_digest=f"{i:064x}",
            )
        )
    return docs


def mpiexec() -> str:
    return str(Path(sys.executable).with_name("mpiexec"))


def run(ranks: int, target: list[str], in_dir: Path, out: Path, config: Path) -> tuple[float, float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            mpiexec(),
            "-n",
            str(ranks),
            sys.executable,
            *target,
            "--in",
            str(in_dir),
            "--out",
            str(out),
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(target)} failed:\n{proc.stderr[-3000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    peaks = manifest.pop("run_info")["peak_rss_mb_by_rank"]
    return max(peaks.values()), wall, json.dumps(manifest, sort_keys=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--budget-mb", type=int, default=64)
    ap.add_argument("--peer-rev", default="3663a21", help="the commit whose write_shards is the peer")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    work = args.out or Path(tempfile.mkdtemp(prefix="bench-ws-"))
    work.mkdir(parents=True, exist_ok=True)
    peer = work / "old_write_shards.py"
    peer.write_text(
        subprocess.run(
            ["git", "show", f"{args.peer_rev}:hpc_jobs/write_shards.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    rows = []
    for n in (args.n, 4 * args.n):
        base = work / f"n{n}"
        docs = documents(n)
        shards = {f"part-{p:03d}": docs[p :: max(1, n // 1000)] for p in range(max(1, n // 1000))}
        make_stage_dir(base / "minhash_dedup", shards)
        cfg = write_config(
            base / "config.toml",
            memory_budget_mb=args.budget_mb,
            write_shards={"shard_target_tokens": 1 << 20},
        )
        run(args.ranks, ["-m", "hpc_jobs.tokenize"], base / "minhash_dedup", base / "tokenize", cfg)
        manifests = []
        for label, target in (
            ("this version", ["-m", "hpc_jobs.write_shards"]),
            ("peer (previous)", [str(peer)]),
        ):
            out = base / label.split()[0]
            peak, wall, manifest = run(args.ranks, target, base / "tokenize", out, cfg)
            manifests.append(manifest)
            rows.append((label, n, peak, wall, manifests[0] == manifest))
            shutil.rmtree(out / "work", ignore_errors=True)
    print(
        f"write_shards, {args.ranks} ranks, memory_budget_mb = {args.budget_mb}, shard_target_tokens = 2^20"
    )
    print(
        "| version | docs | peak MB/rank | wall s | same manifest as this version |\n|---|---:|---:|---:|---|"
    )
    for label, n, peak, wall, same in rows:
        print(f"| {label} | {n:,} | {peak:.0f} | {wall:.1f} | {'yes' if same else 'NO'} |")
    for label in ("this version", "peer (previous)"):
        small, large = [r for r in rows if r[0] == label]
        print(f"{label}: peak at 4N / peak at N = {large[2] / small[2]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
