"""A loader rank's start at the size the project is for: CPU seconds and peak memory against shard count.

    python bench/bench_loader_start.py [--shards 3000,30000,100000] [--world 1024]

Writes a snapshot manifest of N shards of 500 M tokens each in four buckets (30,000 of them are 15 T
tokens; each entry has the companion files and block digests of a built shard; the files themselves are
absent: a loader opens no shard to start) in both forms: every entry listed in ``manifest.json``
(``corpus-snapshot/1``) and the shard table beside it (``corpus-snapshot/2``, what a build writes). Then,
in a fresh process per cell, it constructs a ``SnapshotLoader`` as rank 3 of ``--world`` (seq_len 2048,
batch 8, chunks of 2^20 positions) and reports its CPU seconds, peak RSS and the shard entries it parsed,
beside a process that only imports the loader. The comparison column ("every chunk listed", listed form)
also lists each bucket's first epoch as the loader did before it found chunks on demand
(``list(layout.chunks(...))``, every bucket's kept, as its cache kept them), in the same process, after
the same start. Every cell includes the import.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.model.shard_table import KEYS  # noqa: E402

BUCKETS = ("web", "code", "books", "wiki")
SHARD_TOKENS = 500_000_000

START = """
import resource, sys, time
t = time.process_time()
from loader import SnapshotLoader
if sys.argv[1] != "import":
    ld = SnapshotLoader(sys.argv[2], seq_len=2048, batch_size=8, dp_rank=3, dp_world=int(sys.argv[3]))
    if sys.argv[1] == "listed":
        kept = [list(ld.layout.chunks(b, 0)) for b in sorted(ld.layout.buckets)]  # as its cache held them
    parsed = len(getattr(ld.manifest.shards, "_parsed", ld.manifest.shards))  # a table's: those read
else:
    parsed = 0
print(time.process_time() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, parsed)
"""


def write_manifest(directory: Path, n: int, split: bool) -> None:
    """A snapshot manifest of ``n`` shards as a build writes them (entries only, no shard files), its
    entries listed in it or (``split``) in the shard table beside it."""
    from corpus.formats.snapshot_manifest import write_snapshot_manifest
    from corpus.model import SnapshotManifest, SnapshotShard

    shards = []
    for i in range(n):
        digest = hashlib.sha256(str(i).encode()).hexdigest()
        bucket = BUCKETS[i % len(BUCKETS)]
        name = f"{bucket}-{i:06d}"
        files = {
            "idx": f"shards/{name}.idx",
            "meta": f"shards/{name}.meta.json",
            "blocks": f"shards/{name}.blocks",
            "lineage": f"lineage/{name}.jsonl",
            "lineage_offsets": f"lineage/{name}.offsets.npy",
            "metadata": f"metadata/{name}.parquet",
        }
        shards.append(
            SnapshotShard(
                path=f"shards/{name}.bin",
                sha256=digest,
                bucket=bucket,
                docs=1_000_000,
                tokens=SHARD_TOKENS,
                files=files,
                block_size=4 << 20,
                blocks_sha256=digest,
                block_layout="documents",
            )
        )
    tokenizer = {"name": "bench", "eos_id": 0, "vocab_size": 50_257, "documents_end_with_eos": True}
    m = SnapshotManifest(
        shards=tuple(shards),
        stage_versions={},
        seed=0,
        token_dtype="uint32",
        tokenizer=tokenizer,
        split=split,
    )
    directory.mkdir(parents=True, exist_ok=True)
    write_snapshot_manifest(directory, m)


def start(mode: str, directory: Path, world: int) -> tuple[float, float, int]:
    """(CPU s, peak RSS MB, shard entries parsed) of a fresh process that starts a loader (``mode``:
    import, start, listed)."""
    out = subprocess.run(
        [sys.executable, "-c", START, mode, str(directory), str(world)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(out[-3]), float(out[-2]), int(out[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", default="3000,30000,100000")
    ap.add_argument("--world", type=int, default=1024)
    ap.add_argument("--listed-up-to", type=int, default=30_000, help="the comparison row only up to this N")
    args = ap.parse_args(argv)
    cpu, rss, _ = start("import", ROOT, args.world)
    print(
        f"a loader rank's start, rank 3 of {args.world}; importing the loader alone: {cpu:.2f} CPU s, {rss:.0f} MB\n"
    )
    print(
        "| shards | tokens | listed: manifest MB | CPU s | peak MB | entries parsed "
        "| split: MB read | CPU s | peak MB | entries parsed | every chunk listed: CPU s | MB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, args.shards.split(",")):
            listed_dir, split_dir = Path(tmp) / f"{n}-listed", Path(tmp) / f"{n}-split"
            write_manifest(listed_dir, n, split=False)
            write_manifest(split_dir, n, split=True)
            listed = start("start", listed_dir, args.world)
            split = start("start", split_dir, args.world)
            chunks = start("listed", listed_dir, args.world) if n <= args.listed_up_to else None
            shown = f"{chunks[0]:.2f} | {chunks[1]:.0f}" if chunks else "- | -"
            size = (listed_dir / "manifest.json").stat().st_size / 1e6
            read = sum((split_dir / f).stat().st_size for f in ("manifest.json", KEYS)) / 1e6
            print(
                f"| {n:,} | {n * SHARD_TOKENS / 1e12:g} T | {size:.1f} | {listed[0]:.2f} | {listed[1]:.0f} "
                f"| {listed[2]:,} | {read:.1f} | {split[0]:.2f} | {split[1]:.0f} | {split[2]:,} | {shown} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
