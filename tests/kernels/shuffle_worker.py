"""Run shuffle_by_key on this rank's share of a fixed global record set; write what came back as JSON.

The global set (with duplicate keys, duplicate records, empty keys and payloads, and one record larger
than the spill budget) is the same on any rank count; how it is dealt to ranks is deliberately uneven.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mpi4py import MPI

from mpi_kernels.shuffle import shuffle_by_key


def global_records(n: int) -> list[tuple[bytes, bytes]]:
    recs = [(f"k{i % (n // 3)}".encode(), (f"payload-{i}-" * (i % 5)).encode()) for i in range(n)]
    recs += [(b"", b""), (b"", b"x"), (b"k1", b""), (b"k1", b""), (b"big", b"B" * 50_000)]
    return recs


def my_share(recs, rank: int, size: int):
    """Rank 0 holds the first half, the others deal the rest round-robin (rank 0 alone when size is 1)."""
    half = len(recs) // 2
    for i, r in enumerate(recs):
        owner = 0 if (i < half or size == 1) else 1 + (i % (size - 1))
        if owner == rank:
            yield r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--budget", type=int, default=256 << 20)
    ap.add_argument("--spill-dir", type=Path)
    ap.add_argument("--partition", choices=["default", "by_number"], default="default")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    part = None
    if a.partition == "by_number":

        def part(key: bytes) -> int:
            return int(key[1:] or b"0") if key[1:].isdigit() else 0

    # each rank its own spill directory, so it can look at its runs while other ranks remove theirs
    spill_dir = a.spill_dir / f"rank{comm.rank}" if a.spill_dir else None
    out = shuffle_by_key(
        comm,
        my_share(global_records(a.records), comm.rank, comm.size),
        partition_of=part,
        memory_budget_bytes=a.budget,
        spill_dir=spill_dir,
    )
    spill_files_during = sorted(str(p) for p in spill_dir.rglob("*") if p.is_file()) if spill_dir else []
    got = [(k.hex(), p.hex()) for k, p in out]
    result = {
        "records": got,
        "stats": {"records": out.records, "rounds": out.rounds, "spilled_runs": out.spilled_runs},
        "spill_files_during": len(spill_files_during),
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"rank{comm.rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
