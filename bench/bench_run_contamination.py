"""What ``corpus contamination --record`` costs: which of a set of documents a run read, and the step that
first read each, from the run's loader records (loader.read_set), against replaying the run.

    python bench/bench_run_contamination.py [--tokens-per-shard N] [--shards-per-bucket N] [--docs N]

Writes bench_loader's snapshot (uint16 shards, documents of ~600 tokens); for runs of 8 ranks (seq_len
2048, batch 8) of several lengths (``--epochs``), makes the loader records the run saves at half way and
at its end (by ``seek``: arithmetic), then answers for ``--docs`` documents drawn at random: (a) RunReads
on the two records, (b) the plain baseline, every step of every rank replayed with its tokens read
(``traced_batch``) and each part's documents named. Both must give the same answers; the table has their
CPU seconds.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_loader import BATCH, MIXTURE, SEQ_LEN, WORLD, warm, write_bench_snapshot  # noqa: E402
from loader import SnapshotLoader, load_manifest  # noqa: E402
from loader.read_set import RunReads  # noqa: E402

#: chunks of 64 Ki tokens: each rank's share of a bucket's epoch is many chunks, as on a real snapshot
#: (with bench_loader's 1 Mi chunks of 2 Mi shards a rank's share can be one shard's 2,000-token tail)
CHUNK = 1 << 16


def loaders(root: Path, world: int) -> list[SnapshotLoader]:
    return [
        SnapshotLoader(
            root,
            MIXTURE,
            seed=1,
            seq_len=SEQ_LEN,
            batch_size=BATCH,
            dp_rank=r,
            dp_world=world,
            prefetch_steps=0,
        )
        for r in range(world)
    ]


def record_at(root: Path, step: int) -> dict:
    ranks = loaders(root, WORLD)
    for ld in ranks:
        ld.seek(step)
    return ranks[0].global_record([ld.local_state() for ld in ranks])


def replayed(root: Path, steps: int) -> dict[tuple[int, int], int]:
    """(shard, document) -> the first step a token of it was delivered, by reading every step."""
    first: dict[tuple[int, int], int] = {}
    ranks = loaders(root, WORLD)
    for step in range(steps):
        for ld in ranks:
            traced = ld.traced_batch()
            for row in traced.parts:
                for part in row:
                    n = int(part.tokens.shape[0])
                    at = [0, *(int(x) for x in part.doc_starts if 0 < x < n)]
                    for offset in at:
                        doc, within, eos = ld.store.document_at(part.shard, part.start + offset)
                        if not eos or offset + 1 < n:
                            first.setdefault((part.shard, doc), step)
    return first


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(root: Path, steps: int, asked: list[tuple[int, int]]) -> tuple[float, float, int, bool]:
    """CPU seconds of read_set and of the replay for a run of ``steps`` steps (records at half and end),
    how many of ``asked`` it read, and whether both gave the same answers."""
    records = [record_at(root, steps // 2), record_at(root, steps)]
    t0 = cpu()
    reads = RunReads(root, records)
    ours = dict(zip(asked, reads.first_reads(asked), strict=True))
    t_ours = cpu() - t0
    t0 = cpu()
    truth = replayed(root, steps)
    t_replay = cpu() - t0
    same = all((f.step if f else None) == truth.get(doc) for doc, f in ours.items())
    return t_ours, t_replay, sum(f is not None for f in ours.values()), same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens-per-shard", type=int, default=1 << 21)
    ap.add_argument("--shards-per-bucket", type=int, default=4)
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--epochs", default="0.5,2,8", help="run lengths, in the snapshot's tokens")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = write_bench_snapshot(Path(tmp), args.shards_per_bucket, args.tokens_per_shard)
        warm(root)
        manifest, _ = load_manifest(root)
        total = sum(s.tokens for s in manifest.shards)
        rng = np.random.default_rng(3)
        all_docs = [(i, d) for i, s in enumerate(manifest.shards) for d in range(s.docs)]
        asked = [all_docs[k] for k in sorted(rng.choice(len(all_docs), size=args.docs, replace=False))]
        print(
            f"snapshot {total:,} tokens in {len(manifest.shards)} shards, {len(all_docs):,} documents; runs of "
            f"{WORLD} ranks (seq_len {SEQ_LEN}, batch {BATCH}); {args.docs} documents asked"
        )
        print("| run | steps | read of asked | read_set CPU s | replay CPU s | read_set / replay | same |")
        print("|---|---:|---:|---:|---:|---:|---|")
        ok = True
        for f in (float(x) for x in args.epochs.split(",")):
            steps = int(total * f) // (SEQ_LEN * BATCH * WORLD)
            t_ours, t_replay, read, same = measure(root, steps, asked)
            ok &= same
            print(
                f"| {f:g} x the snapshot | {steps} | {read} | {t_ours:.2f} | {t_replay:.2f} | "
                f"{t_ours / t_replay:.2f} | {same} |"
            )
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS of the process {rss:.0f} MB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
