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
the same start. Every cell includes the import. ``--versions``: a version selecting half of each
shard's documents from the split snapshot, in both its forms (``corpus-version/1``, every entry listed;
``corpus-version/2``, its shard table), read the same way (no bitmap is opened to start).
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
import sys, time
t = time.process_time()
from loader import SnapshotLoader
if sys.argv[1] != "import":
    ld = SnapshotLoader(sys.argv[2], seq_len=2048, batch_size=8, dp_rank=3, dp_world=int(sys.argv[3]))
    if sys.argv[1] == "listed":
        kept = [list(ld.layout.chunks(b, 0)) for b in sorted(ld.layout.buckets)]  # as its cache held them
    parsed = len(getattr(ld.manifest.shards, "_made", ld.manifest.shards))  # a table's: those read
    if ld.version is not None:  # and the version's own
        parsed += len(getattr(ld.version.version.entries, "_made", ld.version.version.entries))
else:
    parsed = 0
# VmHWM, not ru_maxrss: Linux carries a parent's peak RSS into ru_maxrss across fork and exec (this
# bench's own, which built the manifests), and VmHWM is this process's own
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(time.process_time() - t, hwm / 1024, parsed)
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


def write_version(directory: Path, snapshot: Path, table: bool) -> None:
    """A version selecting half of each of ``snapshot``'s shards' documents (entries only, no bitmaps),
    its entries listed in its manifest or (``table``) in its shard table."""
    from corpus.model.digest import canonical_json, json_digest
    from corpus.model.manifest import read_snapshot_manifest
    from corpus.model.shard_table import LINES
    from corpus.version.table import table_bytes

    base = read_snapshot_manifest(snapshot)
    entries = [
        {
            "name": Path(s.path).name.removesuffix(".bin"),
            "bucket": s.bucket,
            "sha256": s.sha256,
            "metadata_sha256": hashlib.sha256(s.path.encode()).hexdigest(),
            "docs": s.docs,
            "selected_docs": s.docs // 2,
            "selected_tokens": s.tokens // 2,
            "bitmap": f"selection/{Path(s.path).stem}.bits",
            "bitmap_sha256": s.sha256,
        }
        for s in base.shards
    ]
    made = {"base_snapshot_id": base.snapshot_id, "selection": {}, "selection_sha256": "", "tombstones": []}
    directory.mkdir(parents=True, exist_ok=True)
    if table:
        keys, lines, facts = table_bytes(entries, (), set())
        (directory / KEYS).write_bytes(keys)
        (directory / LINES).write_bytes(lines)
        made |= {"format": "corpus-version/2", "shard_table": facts, "selected_docs": 0, "selected_tokens": 0}
    else:
        made |= {"format": "corpus-version/1", "shards": entries}
    manifest = {**made, "snapshot_id": json_digest(made), "run_info": {"base": str(snapshot.resolve())}}
    (directory / "manifest.json").write_bytes(canonical_json(manifest))


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
    ap.add_argument("--versions", action="store_true", help="a version of each split snapshot, both forms")
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
    made: list[tuple[int, bool, Path, Path, tuple[float, float, int]]] = []
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
            if args.versions:
                for table in (False, True):
                    vdir = Path(tmp) / f"{n}-version-{table}"
                    write_version(vdir, split_dir, table)
                    made.append((n, table, vdir, split_dir, start("start", vdir, args.world)))
        if made:
            print(
                "\n| a version of shards | form | manifest.json MB | MB read to start (its build's too) | CPU s | peak MB "
                "| entries parsed (its build's too) |"
            )
            print("|---:|---|---:|---:|---:|---:|---:|")
        for n, table, vdir, snapshot, (cpu, peak, parsed) in made:
            read = (
                sum(
                    (d / f).stat().st_size
                    for d in (vdir, snapshot)
                    for f in ("manifest.json", KEYS)
                    if (d / f).exists()
                )
                / 1e6
            )
            form = "table (corpus-version/2)" if table else "listed (corpus-version/1)"
            size = (vdir / "manifest.json").stat().st_size / 1e6
            print(
                f"| {n:,} | {form} | {size:.1f} | {read:.1f} | {cpu:.2f} | {peak:.0f} | {parsed:,} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
