"""Sparse reads of a version: bytes read per selected byte, the loader before this change and now.

    python bench/bench_loader_sparse.py [--shards 4] [--docs 2000] [--doc-len 200 2000] [--before REF]

Writes an id snapshot (int32 tokens, tests/loader/snapshot_factory.py) three times: with 4 MiB block
digests over each document's bytes (what write_shards writes since version 11), with fixed 4 MiB blocks
over the file (before) and with fixed 256-byte ones, and a version selecting 10 % of the documents of each
(``min_scores = { quality = 0.9 }``). Each loader (``REF``'s ``loader/``, default HEAD, extracted with
``git archive``, on the layouts it reads; and the working tree's) reads one epoch as rank 0 of 1 in a fresh process, after the
shards' pages were dropped from the page cache (fsync + ``POSIX_FADV_DONTNEED``). Reported per selected
byte: the loader's ``bytes_read`` and ``bytes_hashed`` counters, and what the kernel actually holds of the
``.bin`` files afterwards (``mincore``: the pages the filesystem served, read-around included); the
delivered tokens' sha256 must be the same for both loaders.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import mmap
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = mmap.PAGESIZE


def resident_bytes(paths: list[Path]) -> int:
    """Bytes of ``paths`` in the page cache (whole pages, ``mincore``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    total = 0
    for p in paths:
        size = p.stat().st_size
        if not size:
            continue
        with open(p, "rb") as f:
            m = mmap.mmap(f.fileno(), size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        buf = (ctypes.c_char * size).from_buffer(m)
        vec = (ctypes.c_ubyte * ((size + PAGE - 1) // PAGE))()
        if libc.mincore(ctypes.c_void_p(ctypes.addressof(buf)), ctypes.c_size_t(size), vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        total += sum(v & 1 for v in vec) * PAGE
        del buf
        m.close()
    return total


def drop_cache(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def child(loader_root: str, version: str) -> None:
    """One epoch of ``version`` as rank 0 of 1 with the loader at ``loader_root``; one JSON line."""
    sys.path[:0] = [loader_root, str(ROOT)]
    from loader import SnapshotLoader

    loader = SnapshotLoader(
        version, seed=3, seq_len=2048, batch_size=8, dp_rank=0, dp_world=1, epoch_caps=1, prefetch_steps=0
    )
    digest, tokens = hashlib.sha256(), 0
    t0 = time.perf_counter()
    for batch in loader:
        digest.update(batch.tokens.numpy().tobytes())
        tokens += int(batch.loss_mask.sum())
    wall = time.perf_counter() - t0
    m = loader.metrics()
    print(json.dumps({**{k: m[k] for k in ("bytes_read", "bytes_hashed", "reads")}, "tokens": tokens,
                      "wall_s": wall, "sha": digest.hexdigest()[:16]}))  # fmt: skip


def measure(loader_root: Path, version: Path, bins: list[Path]) -> dict:
    drop_cache(bins)
    cold = resident_bytes(bins)
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(loader_root), str(version)],
        check=True,
        capture_output=True,
        text=True,
        cwd=loader_root,
    )
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "resident": resident_bytes(bins) - cold}


def write_case(
    tmp: Path, block_size: int, layout: str, args: argparse.Namespace
) -> tuple[Path, list[Path], int]:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "loader")]
    from snapshot_factory import write_id_snapshot
    from test_loader_sparse import TEN_PERCENT, selected_bytes
    from test_loader_versions import make_version

    snap = tmp / f"snap-{block_size}-{layout}"
    manifest = write_id_snapshot(
        snap,
        {f"b{i}": 1 for i in range(args.shards)},
        doc_len=tuple(args.doc_len),
        docs_per_shard=(args.docs, args.docs),
        block_size=block_size,
        block_layout=layout,
    )
    version = make_version(snap, tmp / f"v-{block_size}-{layout}", TEN_PERCENT)
    return version, [snap / s.path for s in manifest.shards], selected_bytes(version)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--doc-len", type=int, nargs=2, default=(200, 2000))
    ap.add_argument("--before", default="HEAD")
    ap.add_argument(
        "--before-reads-layouts",
        action="store_true",
        help="REF's loader reads the documents layout too (a loader before it refuses such a shard)",
    )
    ap.add_argument("--child", nargs=2)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        old = tmp / "before"
        old.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.before, "loader"], cwd=ROOT, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        rows, shas = [], set()
        for block_size, layout in ((4 << 20, "documents"), (4 << 20, ""), (256, "")):
            version, bins, selected = write_case(tmp, block_size, layout, args)
            size = sum(p.stat().st_size for p in bins)
            loaders = [(f"before ({args.before})", old)] if not layout or args.before_reads_layouts else []
            for name, loader_root in [*loaders, ("after", ROOT)]:
                r = measure(loader_root, version, bins)
                shas.add(r["sha"])
                rows.append((block_size, layout, name, r, selected, size))
    print(f"{args.shards} shards of {args.docs} documents of {args.doc_len[0]}..{args.doc_len[1]} int32 tokens; "
          "a version selecting 10 % of documents; one epoch, rank 0 of 1, seq_len 2048, batch 8, cold page cache")  # fmt: skip
    print("\n| blocks | loader | selected | bytes_read / selected | bytes_hashed / selected | page cache filled / "
          "selected | reads | tokens/s (cold) | tokens (sha256) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for block_size, layout, name, r, selected, size in rows:
        blocks = f"{block_size >> 20} MiB" if block_size >= 1 << 20 else f"{block_size} B"
        blocks += " per document" if layout else " fixed"
        print(
            f"| {blocks} | {name} | {selected / 2**20:.1f} of {size / 2**20:.1f} MiB | "
            f"{r['bytes_read'] / selected:.3f} | {r['bytes_hashed'] / selected:.3f} | "
            f"{r['resident'] / selected:.3f} | {r['reads']:,} | {r['tokens'] / r['wall_s'] / 1e6:.2f} M | {r['sha']} |"
        )
    print(f"\nsame tokens delivered: {'yes' if len(shas) == 1 else 'NO'}")
    return 0 if len(shas) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
