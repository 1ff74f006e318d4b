"""Run the shuffle on this rank's share of a fixed global record set; write what came back as JSON.

The global set (with duplicate keys, duplicate records, empty keys and payloads, and one record that nearly
fills a round at the smallest budget the tests use) is the same on any rank count; how it is dealt to
ranks is deliberately uneven. ``--fixed`` switches to fixed-width records (16-byte key, 8-byte payload)
shuffled by both paths, ``shuffle_by_key`` and ``shuffle_array``, with the same owner for every record.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from mpi4py import MPI

from mpi_kernels.row_order import field_u64
from mpi_kernels.shuffle_array import shuffle_array
from mpi_kernels.shuffle_bytes import shuffle_by_key

FIXED = np.dtype([("key", "S16"), ("payload", "V8")])


def global_records(n: int) -> list[tuple[bytes, bytes]]:
    recs = [(f"k{i % (n // 3)}".encode(), (f"payload-{i}-" * (i % 5)).encode()) for i in range(n)]
    recs += [(b"", b""), (b"", b"x"), (b"k1", b""), (b"k1", b""), (b"big", b"B" * 4_900)]
    return recs


def fixed_records(n: int) -> list[tuple[bytes, bytes]]:
    """Fixed-width records from a seeded generator: keys with trailing zero bytes, duplicates, equal keys."""
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    keys[::7, 12:] = 0  # trailing zeros must not be lost (numpy "S" fields strip them when read)
    keys[1::5] = keys[0::5][: len(keys[1::5])]  # equal keys with different payloads
    payloads = rng.integers(0, 4, size=(n, 8), dtype=np.uint8)
    recs = [(bytes(k), bytes(p)) for k, p in zip(keys, payloads, strict=True)]
    return recs + recs[:10]  # duplicate records


def owner_of_fixed(key: bytes) -> int:
    """The owner on the bytes path: the key's first 8 bytes as a little-endian integer."""
    return int.from_bytes(key[:8], "little")


def owners_of_fixed_rows(rows: np.ndarray) -> np.ndarray:
    """The same owner on the numpy path, for a whole batch at once."""
    return field_u64(rows, "key", 0)


def as_rows(recs: list[tuple[bytes, bytes]]) -> np.ndarray:
    buf = b"".join(k + p for k, p in recs)
    return np.frombuffer(buf, dtype=FIXED)


def my_share(recs, rank: int, size: int):
    """Rank 0 holds the first half, the others deal the rest round-robin (rank 0 alone when size is 1)."""
    half = len(recs) // 2
    for i, r in enumerate(recs):
        owner = 0 if (i < half or size == 1) else 1 + (i % (size - 1))
        if owner == rank:
            yield r


PARTITIONS = {
    "default": None,
    "by_number": lambda key: int(key[1:] or b"0") if key[1:].isdigit() else 0,
    "all_to_zero": lambda key: 0,
    "fixed": owner_of_fixed,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--budget", type=int, default=256 << 20)
    ap.add_argument("--spill-dir", type=Path)
    ap.add_argument("--partition", choices=sorted(PARTITIONS), default="default")
    ap.add_argument("--fixed", action="store_true", help="fixed-width records through both paths")
    ap.add_argument(
        "--huge-on-last-rank", type=int, default=0, help="the last rank also sends a record this big"
    )
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    # each rank its own spill directory, so it can look at its runs while other ranks remove theirs
    spill_dir = a.spill_dir / f"rank{comm.rank}" if a.spill_dir else None
    recs = fixed_records(a.records) if a.fixed else global_records(a.records)
    mine = list(my_share(recs, comm.rank, comm.size))
    if a.huge_on_last_rank and comm.rank == comm.size - 1:
        mine.append((b"huge", b"H" * a.huge_on_last_rank))
    partition = PARTITIONS["fixed" if a.fixed else a.partition]
    out = shuffle_by_key(
        comm, mine, partition_of=partition, memory_budget_bytes=a.budget, spill_dir=spill_dir
    )
    spill_files_during = sorted(str(p) for p in spill_dir.rglob("*") if p.is_file()) if spill_dir else []
    result = {
        "records": [(k.hex(), p.hex()) for k, p in out],
        "stats": out.stats.as_dict(),
        "spill_files_during": len(spill_files_during),
    }
    if a.fixed:
        rows = as_rows(mine)
        batches = [rows[i : i + 97] for i in range(0, len(rows), 97)]  # uneven batches
        arr = shuffle_array(
            comm,
            batches,
            dtype=FIXED,
            dest_of=owners_of_fixed_rows,
            order_fields=("key",),
            memory_budget_bytes=a.budget,
            spill_dir=spill_dir,
        )
        got = b"".join(batch.tobytes() for batch in arr)
        result["array_records"] = [
            (got[i : i + 16].hex(), got[i + 16 : i + 24].hex()) for i in range(0, len(got), 24)
        ]
        result["array_stats"] = arr.stats.as_dict()
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"rank{comm.rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
