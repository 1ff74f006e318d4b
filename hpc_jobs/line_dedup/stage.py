"""line_dedup: a line found in more documents than the corpus's limit is boilerplate and is removed
from every document of the tiers it applies to (``exempt_tiers`` neither count nor lose lines).

Global phase (one exchange step ``lines``): each rank's distinct line keys with counts pre-summed in a
bounded table (:class:`KeyCounts`) go to the part owning the key's range, which writes the keys above
the limit as a sorted file. Per shard, each line is looked up there by binary search on a memory map;
a document that lost lines gets new text (a new doc_id, ``derived_from`` the old one), one left empty
is filtered as ``all_lines_frequent``, and the removed lines go to ``removed_lines/NAME.parquet``.
docs/dedup.md "Normalization" (the limit, the tiers, the artifact).

    python -m hpc_jobs.line_dedup --in build/stages/policy --out build/stages/line_dedup
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Container, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from corpus.formats.dedup_index import BaseGenerations
from corpus.formats.dedup_keys import count_values, counts_of, line_key_params, records
from corpus.formats.docshard import RecordsFile, iter_docs
from corpus.formats.metadata import write_metadata
from corpus.model import Document, Filtered, Kept, Outcome
from corpus.model.annotations import BYTES_REMOVED, LINES_REMOVED
from corpus.model.layout import INDEX_RECORDS, base_build_of, build_dir_of_stage, stage_dir
from corpus.model.manifest import read_stage_manifest
from corpus.text.normalize import KEY_VERSION, line_key
from mpi_kernels.barrier import sleeping_bcast
from runtime.against_base import PROBE_BATCH, AgainstBase
from runtime.global_phase import PART_ROWS, GlobalPhase, PartWriter, global_phase_key, part_count
from runtime.input_shard import InputShard
from runtime.runner import Stage, StageContext, assign, remove_stale_artifacts
from runtime.side_output import SideOutput

LINES = "lines"
REMOVED = "removed_lines"  # artifact: per input shard, the lines removed and how many documents lost each
REMOVED_SCHEMA = pa.schema([("key", pa.uint64()), ("docs", pa.int64()), ("line", pa.string())])
LINE_SHOWN = 200  # characters of a removed line kept to show it
FREQUENT = ".frequent"  # a part's frequent keys: sorted 8-byte big-endian keys, back to back
_KEY_DTYPE = np.dtype(">u8")  # line keys compare as bytes, i.e. as big-endian integers
_KEY_BYTES = np.dtype("S8")  # the same keys as byte strings: searched in place, no byte swap
#: a line key's count on its way to the part of its key range (the exchange's fixed-width row, 16 bytes).
#: Counts are capped at the limit + 1: whether a key's total passes the limit is all the
#: reduce asks, and the cap keeps a count in 4 bytes however many documents a sender summed
LINE_ROW = np.dtype([("part", "<u4"), ("key", "<u8"), ("count", "<u4")])
_COUNT_MAX = np.iinfo(np.uint32).max
#: what one entry of a sender's pre-summing table's capacity costs at its fullest (measured 47 bytes with
#: every key distinct): up to 1.25 entries of 12 bytes (key and count), twice while a fold rebuilds the
#: table, and a quarter of a pending key (8 bytes) with the fold's temporaries (about 70)
_COMBINE_ENTRY_BYTES = 48


@dataclass(frozen=True, kw_only=True)
class LineDedupConfig:
    #: a line in more than this share of the documents is boilerplate ...
    max_docs_fraction: float = 1e-7
    #: ... and in more documents than this, whatever the corpus's size (the limit's floor)
    max_docs_per_line: int = 10
    #: tiers whose documents neither count nor lose lines
    exempt_tiers: tuple[str, ...] = ("code", "curated")
    #: documents a lines part is sized for: the parts are a function of the corpus's size, never of how
    #: many input shards it came in
    part_rows: int = PART_ROWS

    def __post_init__(self) -> None:
        if self.part_rows < 1:
            raise ValueError("part_rows must be at least 1")
        if not 1 <= self.max_docs_per_line < _COUNT_MAX:
            raise ValueError(f"max_docs_per_line must be at least 1 and below {_COUNT_MAX}")
        if not 0 <= self.max_docs_fraction < 1:
            raise ValueError("max_docs_fraction must be at least 0 and below 1")
        if isinstance(self.exempt_tiers, str):
            raise ValueError("exempt_tiers must be a list of tier names")
        object.__setattr__(self, "exempt_tiers", tuple(self.exempt_tiers))

    def limit(self, docs: int) -> int:
        """The most documents a line may be in before it is removed, in a corpus of ``docs`` documents."""
        return min(max(self.max_docs_per_line, int(docs * self.max_docs_fraction)), _COUNT_MAX - 1)


def doc_line_keys(text: str) -> set[bytes]:
    return {k for line in text.splitlines() if (k := line_key(line)) is not None}


def key_values(keys: set[bytes]) -> np.ndarray:
    """8-byte keys as the integers they spell big-endian (the order of their bytes), native uint64, sorted:
    a set's order changes with the process's hash seed, and where a document's keys are split between
    two folds of :class:`KeyCounts` (so which rows a rank sends) must not."""
    return np.sort(np.frombuffer(b"".join(keys), dtype=_KEY_DTYPE).astype(np.uint64))


def remove_lines(text: str, frequent: Container[bytes]) -> tuple[str, list[tuple[bytes, str]]]:
    """The text without its frequent lines (line ends kept as they were), and the removed lines with
    their keys, in order."""
    kept, removed = [], []
    for line in text.splitlines(keepends=True):
        key = line_key(line)
        if key in frequent:
            removed.append((key, line))
        else:
            kept.append(line)
    return "".join(kept), removed


class RemovedLines:
    """One shard's removed lines: per key, the documents that lost it and its text as first seen.
    Bounded by the shard's distinct lines, written as the shard's ``removed_lines`` artifact."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines: dict[bytes, list] = {}

    def add(self, removed: list[tuple[bytes, str]]) -> None:
        """One document's removed lines (a line twice in it counts the document once)."""
        first: dict[bytes, str] = {}
        for key, line in removed:
            first.setdefault(key, line)
        for key, line in first.items():
            seen = self._lines.get(key)
            if seen is None:
                self._lines[key] = [1, line.strip()[:LINE_SHOWN]]
            else:
                seen[0] += 1

    def close(self) -> None:
        """The table written, in place under its name (the shard is done)."""
        path = self.path
        keys = sorted(self._lines)
        table = pa.Table.from_arrays(
            [
                pa.array(np.frombuffer(b"".join(keys), dtype=_KEY_DTYPE).astype(np.uint64), type=pa.uint64()),
                pa.array([self._lines[k][0] for k in keys], type=pa.int64()),
                pa.array([self._lines[k][1] for k in keys], type=pa.string()),
            ],
            schema=REMOVED_SCHEMA,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        write_metadata(table, tmp)
        tmp.replace(path)

    def abort(self) -> None:
        """A failed shard: nothing was written (the lines were only held)."""


class FrequentLines:
    """The frequent line keys of a finished phase: one sorted file per key range, searched by memory map
    (at most ``open_parts`` maps held), so a rank's memory does not grow with the number of such lines."""

    def __init__(self, step_dir: Path, parts: int, open_parts: int = 64) -> None:
        self.step_dir = step_dir
        self.parts = parts
        self._map = functools.lru_cache(maxsize=open_parts)(self._load)

    def _load(self, part: int) -> np.ndarray:
        """The part's keys as 8-byte strings, which sort as the big-endian integers they spell. Searched as
        ``>u8`` integers, numpy would first copy the whole file to native byte order, at every lookup."""
        path = self.step_dir / f"{part_name(part)}{FREQUENT}"
        if path.stat().st_size == 0:
            return np.empty(0, dtype=_KEY_BYTES)
        return np.memmap(path, dtype=_KEY_BYTES, mode="r")

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, bytes):  # a blank line has no key
            return False
        keys = self._map(key_part(key, self.parts))
        i = int(np.searchsorted(keys, key))
        return i < keys.shape[0] and keys[i : i + 1].tobytes() == key  # keys[i] would drop trailing NULs


class LineDedupStage(Stage):
    name = "line_dedup"
    # what each version changed: docs/dedup.md "Stage versions"
    version = "6"
    Config = LineDedupConfig
    artifact_kinds = (REMOVED, INDEX_RECORDS)
    side_outputs = (SideOutput(REMOVED, ".parquet", RemovedLines),)

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self._frequent: FrequentLines | None = None

    def prepare(self, ctx: StageContext, inputs: list[InputShard]) -> str:
        docs = sum(max(s.records, 0) for s in inputs)
        parts = part_count(docs, self.config.part_rows)
        names = [part_name(i) for i in range(parts)]
        against = AgainstBase.open(ctx, "lines", line_key_params())
        keeps, base = against.keeps_index, against.base if against.probed else None
        remove_stale_artifacts(ctx, inputs, REMOVED, (".parquet",))
        against.remove_stale_records(ctx, names)
        phase = self._phase = GlobalPhase(
            ctx,
            global_phase_key(
                self,
                inputs,
                normalization=KEY_VERSION,
                **({"counts": True} if keeps else {}),
                **against.phase_key(),
            ),
        )
        self._frequent = FrequentLines(phase.step_dir(LINES), parts)
        if phase.complete:
            return phase.reused()
        capacity = max(1024, ctx.memory_budget_bytes // (8 * _COMBINE_ENTRY_BYTES))
        base_docs = counted_docs(ctx.out_dir, base) if base is not None else 0
        limit = self.config.limit(docs + base_docs)
        # a kept count must serve a later build's limit too; otherwise only whether it passes this one's
        cap = _COUNT_MAX - 1 if keeps else limit + 1
        exempt = self.config.exempt_tiers

        def send(_: None) -> Iterator[np.ndarray]:
            # one table over all of this rank's shards: a line repeated across them is sent once per flush
            table = KeyCounts(capacity, cap)
            for shard in assign(inputs, ctx.rank, ctx.size):
                for doc in iter_docs(shard.path):
                    if doc.source_tier in exempt:
                        continue
                    for keys, counts in table.add(key_values(doc_line_keys(doc.text))):
                        yield _count_rows(keys, counts, parts)
            for keys, counts in table.drain():
                yield _count_rows(keys, counts, parts)

        def reduce(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
            totals = KeyTotals(writer.open(FREQUENT), limit, against.records(writer), base)
            for rows in batches:  # sorted by key; a key's counts may straddle two batches
                totals.add(rows["key"], rows["count"])
            totals.finish()
            facts = {"distinct_lines": totals.distinct, "frequent_lines": totals.frequent}
            return facts | ({"lines_in_base": totals.in_base} if base is not None else {})

        phase.exchange_rows(LINES, names, None, send, reduce, dtype=LINE_ROW, order_fields=("key",))
        facts = None
        if ctx.rank == 0:
            total: Counter = Counter({"docs": docs, "line_limit": limit})
            if base is not None:  # the documents of the builds before, whose line counts were added
                total["base_docs"] = base_docs
            for part in phase.parts(LINES, names):
                total.update(part.facts)
            facts = dict(sorted(total.items()))
            ctx.say(f"{facts['distinct_lines']} distinct lines, {facts['frequent_lines']} frequent")
        return phase.finish({LINES: names}, sleeping_bcast(ctx.comm, facts))

    def process_doc(self, doc: Document, ctx: StageContext) -> Outcome:
        assert self._frequent is not None
        if doc.source_tier in self.config.exempt_tiers:
            return Kept(doc)
        text, removed = remove_lines(doc.text, self._frequent)
        if not removed:
            return Kept(doc)
        ctx.side(REMOVED).add(removed)
        lost = len(doc.text.encode("utf-8")) - len(text.encode("utf-8"))
        notes = (
            LINES_REMOVED.note(len(removed)),
            BYTES_REMOVED.note(lost),
        )
        if not text.strip():
            return Filtered(doc.annotate(*notes), "all_lines_frequent")
        return Kept(doc.with_text(text, annotations=doc.annotations + notes))

    def manifest_extra(self, ctx: StageContext, inputs: list[InputShard]) -> dict[str, Any]:
        return {"normalization_version": KEY_VERSION, **self._phase.facts}


def counted_docs(stage_directory: Path, base: BaseGenerations) -> int:
    """The documents of the builds before this one whose line counts ``base`` holds (each build's
    line_dedup ``extra.docs``, found through the chain of bases by the generation labels): a line's
    limit is judged on all the documents it was counted in."""
    labels, total = set(base.index.labels), 0
    build = build_dir_of_stage(stage_directory)
    seen = {build.resolve()} if build is not None else set()
    while (
        build is not None and (found := base_build_of(build)) is not None and found[0].resolve() not in seen
    ):
        build, label = found
        seen.add(build.resolve())
        if label in labels:
            manifest = read_stage_manifest(stage_dir(build, "line_dedup"))
            total += int(manifest.extra["docs"]) if manifest is not None else 0
    return total


def part_name(part: int) -> str:
    return f"l{part:05d}"


def key_part(key: bytes, parts: int) -> int:
    """The part owning a key: equal ranges of the key space, in key order (the top 32 bits scaled), so
    the parts' files concatenated are one sorted list."""
    return ((int.from_bytes(key, "big") >> 32) * parts) >> 32


def _count_rows(keys: np.ndarray, counts: np.ndarray, parts: int) -> np.ndarray:
    rows = np.empty(len(keys), dtype=LINE_ROW)
    rows["key"] = keys
    rows["count"] = counts
    rows["part"] = key_parts(keys, parts)
    return rows


def key_parts(keys: np.ndarray, parts: int) -> np.ndarray:
    """:func:`key_part` of each key (native uint64 holding the key's big-endian bytes)."""
    return (((keys >> np.uint64(32)) * np.uint64(parts)) >> np.uint64(32)).astype(np.int64)


class KeyCounts:
    """A sender's pre-summing table: in how many documents each key was (capped at ``cap``), as a sorted
    array of keys and one of counts, 12 bytes an entry (a dict of key objects costs ~120).

    A document's keys go to a pending buffer of a quarter of ``capacity``; when it is full it is sorted
    in place, its runs counted and merged into the table (binary search, one insert), and when the table
    then holds more than ``capacity`` entries it is flushed. Memory is set by ``capacity`` whatever the
    number of distinct keys, and a key that many documents share (boilerplate) leaves once per flush, not
    once per document or input shard."""

    def __init__(self, capacity: int, cap: int) -> None:
        self.capacity, self.cap = capacity, cap
        self._pending = np.empty(max(1, capacity // 4), dtype=np.uint64)
        self._n = 0
        self._keys = np.empty(0, dtype=np.uint64)
        self._counts = np.empty(0, dtype=np.uint32)

    def add(self, keys: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Count each of ``keys`` (one document's distinct keys) once; yields (sorted keys, counts)
        whenever the table is flushed to make room."""
        while len(keys):
            piece = keys[: len(self._pending) - self._n]
            self._pending[self._n : self._n + len(piece)] = piece
            self._n += len(piece)
            keys = keys[len(piece) :]
            if self._n == len(self._pending):
                self._fold()
                if len(self._keys) > self.capacity:
                    yield self._take()

    def drain(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """What the table holds, as (sorted keys, counts); the table is empty afterwards."""
        self._fold()
        if len(self._keys):
            yield self._take()

    def _take(self) -> tuple[np.ndarray, np.ndarray]:
        table = self._keys, self._counts
        self._keys, self._counts = np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint32)
        return table

    def _fold(self) -> None:
        pending = self._pending[: self._n]
        self._n = 0
        if not len(pending):
            return
        pending.sort()
        starts = np.flatnonzero(np.concatenate(([True], pending[1:] != pending[:-1])))
        keys, runs = pending[starts], np.diff(np.append(starts, len(pending)))
        pos = np.searchsorted(self._keys, keys)
        hit = pos < len(self._keys)
        hit[hit] = self._keys[pos[hit]] == keys[hit]
        at = pos[hit]
        self._counts[at] = np.minimum(self._counts[at] + runs[hit], self.cap)
        new = ~hit
        self._keys = np.insert(self._keys, pos[new], keys[new])
        self._counts = np.insert(self._counts, pos[new], np.minimum(runs[new], self.cap))


class KeyTotals:
    """Sums the counts of sorted keys arriving in batches and writes the keys whose total exceeds the
    limit (8 bytes each, big-endian: the key's own bytes, so the file is sorted). ``own``: this build's
    counts as the lines index's records (inside a build that keeps indexes); ``base``: the base's lines
    index, whose counts (summed over the builds before this one) are added to each total before it is
    judged. Against a base, totals wait until :data:`PROBE_BATCH` keys are held, then are probed at once
    (each probe reads the Bloom filter of every index partition its keys fall in: once per batch of keys,
    not once per batch the exchange delivers)."""

    def __init__(
        self, out: Any, limit: int, own: RecordsFile | None = None, base: BaseGenerations | None = None
    ) -> None:
        self.out, self.limit, self.own, self.base = out, limit, own, base
        self.distinct = self.frequent = self.in_base = 0
        self._key: int | None = None
        self._sum = 0
        self._held: list[tuple[np.ndarray, np.ndarray]] = []  # totals waiting for the base's counts
        self._held_keys = 0

    def add(self, keys: np.ndarray, counts: np.ndarray) -> None:
        if not keys.shape[0]:
            return
        starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        uniq, sums = keys[starts], np.add.reduceat(counts.astype(np.uint64), starts)
        if self._key is not None and int(uniq[0]) == self._key:
            sums[0] += np.uint64(self._sum)
        elif self._key is not None:
            self._emit(np.array([self._key], dtype=np.uint64), np.array([self._sum], dtype=np.uint64))
        self._emit(uniq[:-1], sums[:-1])  # the last key may go on in the next batch
        self._key, self._sum = int(uniq[-1]), int(sums[-1])

    def finish(self) -> None:
        if self._key is not None:
            self._emit(np.array([self._key], dtype=np.uint64), np.array([self._sum], dtype=np.uint64))
            self._key = None
        self._judge_held()

    def _emit(self, keys: np.ndarray, sums: np.ndarray) -> None:
        if not keys.shape[0]:
            return
        if self.own is not None:
            as_bytes = np.ascontiguousarray(keys.astype(_KEY_DTYPE)).view("V8")
            self.own.write_rows(records("lines", as_bytes, count_values(sums)))
        if self.base is None:
            self._judge(keys, sums)
            return
        self._held.append((keys, sums))
        self._held_keys += int(keys.shape[0])
        if self._held_keys >= PROBE_BATCH:
            self._judge_held()

    def _judge_held(self) -> None:
        """The held totals with the base's counts added, judged (in key order, as they came)."""
        if not self._held:
            return
        keys = np.concatenate([k for k, _ in self._held])
        sums = np.concatenate([s for _, s in self._held])
        self._held, self._held_keys = [], 0
        found = self.base.index.probe(np.ascontiguousarray(keys.astype(_KEY_DTYPE)).view("V8"))
        self.in_base += int(np.count_nonzero(found.found))
        self._judge(keys, sums + counts_of(found.values))

    def _judge(self, keys: np.ndarray, sums: np.ndarray) -> None:
        frequent = keys[sums > self.limit]
        self.out.write(frequent.astype(_KEY_DTYPE).tobytes())
        self.distinct += int(keys.shape[0])
        self.frequent += int(frequent.shape[0])


STAGE = LineDedupStage
