"""`corpus takedown` against the two other ways to remove documents from a built corpus.

    python bench/bench_takedown.py [--tokens 16777216] [--docs 1024] [--take 1 10 100] [--out /tmp/bench_takedown]

One shard of ``--tokens`` int32 tokens in ``--docs`` documents (a 16 M-token shard: write_shards'
default) and two small ones (tests/loader/snapshot_factory.py), a version selecting everything. For
each count k of documents taken down, on a fresh copy, in a process of its own:

* **takedown**: ``corpus takedown VERSION --doc-ids FILE …`` (one read of the shard for its digests,
  one for the check before zeroing, the ranges zeroed in place);
* **rewrite**: the shard written again without the documents and its block digests computed (what
  dropping them from the shard by copying costs at the least: a new .bin/.idx, every offset after the
  first document moved, so a run's recorded positions no longer mean the same documents);
* **tombstone**: ``corpus tombstone`` (no bytes read, but every token of the shard is lost).

Printed: wall and CPU seconds, peak RSS, the shard's bytes changed outside the documents (0 for a
takedown: checked byte by byte), and the tokens the corpus loses.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPUS = [sys.executable, "-m", "cli"]


def child_cost(cmd: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one child process, as /usr/bin/time reports it (a child forked
    from this process would count this process's pages in its peak)."""
    fmt = "%e %U %S %M"
    proc = subprocess.run(["/usr/bin/time", "-f", fmt, *cmd], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")
    wall, user, system, rss_kb = proc.stderr.strip().splitlines()[-1].split()
    return float(wall), float(user) + float(system), int(rss_kb) / 1024


def write_case(root: Path, tokens: int, docs: int) -> Path:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "loader")]
    from snapshot_factory import EOS, write_snapshot

    rng = np.random.default_rng(0)
    cuts = np.sort(rng.choice(np.arange(1, tokens), size=docs - 1, replace=False))
    big = np.split(rng.integers(1, 50_000, size=tokens, dtype=np.int32), cuts)
    small = [rng.integers(1, 50_000, size=64, dtype=np.int32) for _ in range(8)]
    write_snapshot(root / "snap", {"web": [big, small], "wiki": [small]}, "int32", EOS)
    subprocess.run(
        [*CORPUS, "version", str(root / "snap"), "--select-inline", "", "--out", str(root / "v")],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    return root


def doc_ids(root: Path, k: int) -> tuple[list[str], list[int]]:
    import pyarrow.parquet as pq

    table = pq.read_table(root / "snap" / "metadata" / "web-00000.parquet", columns=["doc_id", "index"])
    picks = sorted(np.random.default_rng(k).choice(table.num_rows, size=k, replace=False).tolist())
    return [table["doc_id"][i].as_py() for i in picks], picks


def changed_outside(before: Path, after: Path, idx: Path, picks: list[int]) -> int:
    """Bytes of the shard that differ outside the taken-down documents' ranges."""
    from corpus.formats.megatron import read_index

    index = read_index(idx)
    a, b = np.fromfile(before, np.uint8), np.fromfile(after, np.uint8)
    inside = np.zeros(a.shape[0], bool)
    for i in picks:
        lo = int(index.offsets[i])
        inside[lo : lo + int(index.lengths[i]) * 4] = True
    n = min(a.shape[0], b.shape[0])  # a rewrite is shorter: what follows a document moves
    return int(np.count_nonzero((a[:n] != b[:n]) & ~inside[:n])) + abs(a.shape[0] - b.shape[0])


def rewrite_child(snap: Path, picks: list[int], out: Path) -> None:
    """The shard without ``picks``, written anew with its block digests (the rewrite baseline)."""
    from corpus.formats.megatron import IndexedShard, block_digests, write_indexed_shard
    from corpus.model.digest import file_sha256

    shard = IndexedShard(snap / "shards" / "web" / "web-00000")
    drop = set(picks)
    keep = [np.asarray(shard.document(i)) for i in range(len(shard)) if i not in drop]
    bin_path, _ = write_indexed_shard(out / "web-00000", keep, "int32")
    block_digests(bin_path)
    file_sha256(bin_path)  # the manifest's digest of the new .bin, as a takedown computes it


def measure(tmp: Path, base: Path, k: int) -> dict:
    case = tmp / f"k{k}"
    shutil.rmtree(case, ignore_errors=True)
    shutil.copytree(base, case)
    ids, picks = doc_ids(case, k)
    (case / "ids").write_text("\n".join(ids) + "\n")
    shard = case / "snap" / "shards" / "web" / "web-00000.bin"
    shutil.copyfile(shard, case / "before.bin")
    td = child_cost(
        [
            *CORPUS,
            "takedown",
            str(case / "v"),
            "--doc-ids",
            str(case / "ids"),
            "--reason",
            "bench",
            "--out",
            str(case / "td"),
        ]
    )
    outside = changed_outside(case / "before.bin", shard, shard.with_suffix(".idx"), picks)
    (case / "rw").mkdir()
    rw = child_cost(
        [sys.executable, __file__, "--rewrite", str(case / "snap"), json.dumps(picks), str(case / "rw")]
    )
    tomb = child_cost(
        [
            *CORPUS,
            "tombstone",
            str(case / "v"),
            "--shard",
            "web-00000",
            "--reason",
            "bench",
            "--out",
            str(case / "tb"),
        ]
    )
    outside_rw = changed_outside(
        case / "before.bin", case / "rw" / "web-00000.bin", shard.with_suffix(".idx"), picks
    )
    from corpus.formats.megatron import read_index

    lengths = read_index(shard.with_suffix(".idx")).lengths
    return {
        "k": k,
        "takedown": (*td, outside),
        "rewrite": (*rw, outside_rw),
        "tombstone": (*tomb, 0),
        "docs_tokens": int(sum(int(lengths[i]) for i in picks)),
        "shard_tokens": int(lengths.sum()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=1 << 24)
    ap.add_argument("--docs", type=int, default=1024)
    ap.add_argument("--take", type=int, nargs="+", default=[1, 10, 100])
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench_takedown"))
    ap.add_argument("--rewrite", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rewrite:
        sys.path[:0] = [str(ROOT)]
        rewrite_child(Path(args.rewrite[0]), json.loads(args.rewrite[1]), Path(args.rewrite[2]))
        return
    shutil.rmtree(args.out, ignore_errors=True)
    base = write_case(args.out / "base", args.tokens, args.docs)
    print(
        f"one shard of {args.tokens:,} int32 tokens ({args.tokens * 4 / 2**20:.0f} MiB) in {args.docs:,} documents"
    )
    print(
        f"{'k':>4} {'way':<10} {'wall s':>7} {'CPU s':>6} {'RSS MB':>7} {'bytes changed outside':>22} {'tokens lost':>12}"
    )
    for k in args.take:
        r = measure(args.out, base, k)
        for way in ("takedown", "rewrite", "tombstone"):
            wall, cpu, rss, outside = r[way]
            lost = r["shard_tokens"] if way == "tombstone" else r["docs_tokens"]
            print(f"{k:>4} {way:<10} {wall:>7.2f} {cpu:>6.2f} {rss:>7.0f} {outside:>22,} {lost:>12,}")


if __name__ == "__main__":
    main()
