"""Writing a generation's partitions in bounded memory: sorted runs, a k-way merge, per-partition files
and Bloom filters.

:class:`PartitionWriter` buffers at most ``run_records`` records, spills each full buffer as a sorted run,
then merges the runs per partition in bounded chunks; it never holds all records. Within a partition a
key is written once: the smallest value among a generation's inputs, or (merging generations, oldest
first) the oldest generation's; for a kind that sums (line counts), the sum of them all. The same
records give the same bytes whatever their order, the buffer size or the number of writers. Several writers, each owning a range of partitions (one per rank), may
fill one pending generation. Writing and merging: docs/incremental.md.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from corpus.formats.bloom import BloomFilter
from corpus.formats.dedup_files import (
    fsync_files,
    json_bytes,
    kill_point,
    map_records,
    part_name,
    write_bytes,
)
from corpus.formats.dedup_keys import KINDS, count_values, counts_of, key_hash, sort_words, sum_values

if TYPE_CHECKING:
    from corpus.formats.dedup_index import PendingGeneration

#: default records a writer buffers before spilling a sorted run (32 MiB of exact records)
RUN_RECORDS = 1 << 20
#: records read per source per step of a merge, at most (the merge holds about this many in all)
MERGE_RECORDS = 1 << 20
#: keys hashed into a Bloom filter at a time
HASH_RECORDS = 1 << 16
#: partitions whose files are fsynced together (in threads), before their sidecars are written
FSYNC_BATCH = 64


def _lex_le(bound: tuple[int, ...], cols: np.ndarray) -> np.ndarray:
    """Per row of ``cols`` (n, c): row <= bound, lexicographically."""
    le = np.ones(cols.shape[0], dtype=bool)
    for i in reversed(range(cols.shape[1])):
        b = np.uint64(bound[i])
        le = (cols[:, i] < b) | ((cols[:, i] == b) & le)
    return le


def _sort_cols(rows: np.ndarray, source: int | None) -> np.ndarray:
    """Sort columns: key words, then the value's words (``source`` None) or the source number."""
    keys = sort_words(rows["key"])
    tie = sort_words(rows["value"]) if source is None else np.full((len(rows), 1), source, dtype=np.uint64)
    return np.concatenate([keys, tie], axis=1)


def _sorted(rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort(cols.T[::-1])
    return rows[order], cols[order]


class _Output:
    """A part file being written: records appended, key-deduplicated against the previous batch (the first
    of a key wins), or for a kind that sums, a key's values summed (its last record is held back until a
    greater key or :meth:`close`: the next batch may go on with it)."""

    def __init__(self, path: Path, sums: bool = False) -> None:
        self.path = path
        self.file = open(path, "wb")
        self.sha = hashlib.sha256()
        self.count = 0
        self.sums = sums
        self.last: np.ndarray | None = None  # key words of the last record written (or held, summing)
        self.held: np.ndarray | None = None  # summing: the last key's record, its sum so far

    def write_sorted(self, rows: np.ndarray, keys: np.ndarray) -> None:
        """``rows`` sorted by (key, tie); a key equal to its predecessor (in this batch or the last
        record written) is dropped (the first of a key wins) or, summing, added to it."""
        if not len(rows):
            return
        dup = np.zeros(len(rows), dtype=bool)
        dup[1:] = (keys[1:] == keys[:-1]).all(axis=1)
        if not self.sums:
            if self.last is not None:
                dup[0] = bool((keys[0] == self.last).all())
            self._write(rows[~dup])
            self.last = keys[-1].copy()
            return
        starts = np.flatnonzero(~dup)
        kept = rows[starts].copy()
        kept["value"] = sum_values(rows["value"], starts)
        if self.held is not None:
            if bool((keys[0] == self.last).all()):
                kept[:1]["value"] = count_values(counts_of(self.held["value"]) + counts_of(kept[:1]["value"]))
            else:
                self._write(self.held)
        self._write(kept[:-1])
        self.held, self.last = kept[-1:], keys[-1].copy()

    def _write(self, kept: np.ndarray) -> None:
        data = np.ascontiguousarray(kept).tobytes()
        self.file.write(data)
        self.sha.update(data)
        self.count += len(kept)

    def close(self) -> str:
        """Closes the file (its fsync comes with its partition's batch: :class:`_Finisher`)."""
        if self.held is not None:
            self._write(self.held)
            self.held = None
        self.file.close()
        return self.sha.hexdigest()


def _merge(sources: list[np.ndarray], out: _Output, by_source: bool, budget: int) -> None:
    """k-way merge of sorted ``sources`` into ``out``, first of each key kept. Ties of a key are broken
    by value (``by_source`` False: the sources are runs sorted by (key, value)) or by source number
    (True: the sources are generations, oldest first, keys unique in each). Holds about ``budget``
    records (at least 1024 per source)."""
    k = len(sources)
    step = max(1024, budget // max(1, k))
    cur = [0] * k
    nw = -(-sources[0].dtype["key"].itemsize // 8) if k else 0
    while True:
        live = [i for i in range(k) if cur[i] < len(sources[i])]
        if not live:
            return
        chunks = {i: sources[i][cur[i] : cur[i] + step] for i in live}
        cols = {i: _sort_cols(chunks[i], None if not by_source else i) for i in live}
        # every record not yet read is >= the last read record of its source: everything up to the
        # smallest such last record (over sources not exhausted by this read) can go out now
        bounded = [i for i in live if cur[i] + step < len(sources[i])]
        bound = min(tuple(int(x) for x in cols[i][-1]) for i in bounded) if bounded else None
        take_rows, take_cols = [], []
        for i in live:
            n = len(chunks[i]) if bound is None else int(_lex_le(bound, cols[i]).sum())
            take_rows.append(chunks[i][:n])
            take_cols.append(cols[i][:n])
            cur[i] += n
        rows, c = _sorted(np.concatenate(take_rows), np.concatenate(take_cols))
        out.write_sorted(rows, c[:, :nw])


class PartitionWriter:
    """Writes partitions ``parts`` of a pending generation from records in any order, in bounded memory:
    at most ``run_records`` records are buffered; a full buffer is sorted by (partition, key, value) and
    spilled as a run; :meth:`close` merges, per partition, its slice of every run."""

    def __init__(self, pending: PendingGeneration, parts: range, run_records: int = RUN_RECORDS) -> None:
        if run_records < 1:
            raise ValueError(f"run_records must be positive, got {run_records}")
        self.pending = pending
        self.parts = parts
        self.run_records = run_records
        self.record = pending.index.record
        self._buffer: list[np.ndarray] = []
        self._buffered = 0
        self._runs: list[tuple[Path, np.ndarray]] = []  # run file, offsets of parts[0] .. parts[-1] + 1
        self._dir = pending.path / "runs" / f"w{parts.start:05d}"

    def __enter__(self) -> PartitionWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()

    def add(self, rows: np.ndarray) -> None:
        """Records of the partitions this writer owns (any order; a batch larger than the buffer is
        split)."""
        if rows.dtype != self.record:
            raise ValueError(f"rows must be of dtype {self.record}, got {rows.dtype}")
        for at in range(0, len(rows), self.run_records):
            piece = rows[at : at + self.run_records]
            if len(piece) + self._buffered > self.run_records:
                self._spill()
            self._buffer.append(np.array(piece, copy=True))
            self._buffered += len(piece)

    def _sorted_buffer(self) -> tuple[np.ndarray, np.ndarray]:
        rows = np.concatenate(self._buffer) if self._buffer else np.zeros(0, self.record)
        self._buffer, self._buffered = [], 0
        parts = self.pending.index.partition_of(rows["key"])
        if len(rows) and (parts.min() < self.parts.start or parts.max() >= self.parts.stop):
            raise ValueError(f"a record of a partition outside [{self.parts.start}, {self.parts.stop})")
        cols = np.concatenate([parts.astype(np.uint64)[:, None], _sort_cols(rows, None)], axis=1)
        order = np.lexsort(cols.T[::-1])
        rows, parts = rows[order], parts[order]
        offsets = np.searchsorted(parts, np.arange(self.parts.start, self.parts.stop + 1))
        return rows, offsets

    def _spill(self) -> None:
        if not self._buffered:
            return
        rows, offsets = self._sorted_buffer()
        self._dir.mkdir(parents=True, exist_ok=True)
        path = self._dir / f"r{len(self._runs):06d}.run"
        with open(path, "wb") as f:
            f.write(rows.tobytes())
        self._runs.append((path, offsets))
        kill_point("run-spilled")

    def close(self) -> None:
        """Writes every owned partition (file, Bloom filter, sidecar) and removes the runs."""
        in_memory = None
        if self._runs:
            self._spill()
        else:  # everything fitted in the buffer: merge it in memory
            in_memory = self._sorted_buffer()
        base = self.parts.start
        finisher = _Finisher(self.pending)
        for p in self.parts:
            i = p - base

            def write(out: _Output, i: int = i) -> None:
                if in_memory is not None:
                    rows, offs = in_memory
                    slices = [rows[offs[i] : offs[i + 1]]]
                else:  # this partition's slice of each run, mapped for this partition only
                    slices = [
                        self._map_run(path, int(offs[i]), int(offs[i + 1])) for path, offs in self._runs
                    ]
                _merge(slices, out, False, self.run_records)

            finisher.partition(p, write)
        finisher.flush()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _map_run(self, path: Path, start: int, stop: int) -> np.ndarray:
        if stop == start:
            return np.zeros(0, dtype=self.record)
        return np.memmap(
            path, dtype=self.record, mode="r", offset=start * self.record.itemsize, shape=(stop - start,)
        )


class _Finisher:
    """Writes partitions of a pending generation: per partition its sorted file (by a ``write``
    function) and its Bloom filter (from that file, in chunks); every :data:`FSYNC_BATCH` partitions
    (and at :meth:`flush`) fsyncs their files together, then writes their sidecars, whose presence says
    a partition is complete and durable (the commit reads them, then removes them)."""

    def __init__(self, pending: PendingGeneration) -> None:
        self.pending = pending
        self.done: list[tuple[int, dict[str, Any]]] = []

    def partition(self, p: int, write: Callable[[_Output], None]) -> None:
        pending, idx = self.pending, self.pending.index
        name = part_name(p)
        out = _Output(pending.path / f"{name}.rec", KINDS[idx.kind].sums)
        write(out)
        sha = out.close()
        bloom = BloomFilter.for_keys(out.count, idx.bloom_spec)
        mm = map_records(out.path, idx.record, out.count)
        for at in range(0, out.count, HASH_RECORDS):
            bloom.add(key_hash(sort_words(mm["key"][at : at + HASH_RECORDS])))
        del mm
        bloom_sha = write_bytes(pending.path / f"{name}.bloom", bloom.to_bytes(), sync=False)
        self.done.append(
            (
                p,
                {
                    "records": out.count,
                    "file": f"{name}.rec",
                    "sha256": sha,
                    "bloom_file": f"{name}.bloom",
                    "bloom_sha256": bloom_sha,
                    "bloom_bits": bloom.bits,
                },
            )
        )
        kill_point("partition-written")
        if len(self.done) >= FSYNC_BATCH:
            self.flush()

    def flush(self) -> None:
        path = self.pending.path
        fsync_files([path / side[f] for _, side in self.done for f in ("file", "bloom_file")])
        for p, side in self.done:
            write_bytes(path / f"{part_name(p)}.json", json_bytes(side), sync=False)
        self.done = []


def write_compaction(pending: PendingGeneration, parts: range, merge_records: int = MERGE_RECORDS) -> None:
    """Partitions ``parts`` of every generation of the pending generation's index merged into it: the
    generations are the merge's sources, oldest first, so a key keeps its oldest value."""
    gens = pending.index.generations
    finisher = _Finisher(pending)
    for p in parts:

        def write(out: _Output, p: int = p) -> None:
            _merge([g.map_part(p, pending.index.record) for g in gens], out, True, merge_records)

        finisher.partition(p, write)
    finisher.flush()
