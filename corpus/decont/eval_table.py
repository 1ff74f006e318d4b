"""The eval side of decontamination on disk: every checked passage's n-grams, sorted, with a Bloom filter.

At the registry sizes a lab checks against (10⁷ items, ~10⁹ passage 8-grams) the table is tens of GB:
no rank can hold it, and none should build it in memory. So it is written once per registry in bounded
memory (sorted runs of ``run_rows`` rows, merged a hash range at a time) and every rank maps it
read-only: the page cache holds one copy per node, a rank's own memory is what one document needs. A
document's distinct 8-grams go through the Bloom filter first (most are in no benchmark); only its
"maybe"s are looked up in the sorted hashes, so a hit is confirmed exactly and the answer is the
in-memory table's (:class:`corpus.decont.matcher.PassageTable`). The rule's table holds 8-grams, the
fuzzy tier's 5-grams, of the same passages. Layout (raw little-endian columns, the manifest written
last): docs/snapshot.md ("The eval table").
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from corpus.decont.ngrams import SCHEME, distinct_sorted
from corpus.decont.registry import (
    benchmark_name,
    check_unique_names,
    iter_benchmark,
    registry_files,
)
from corpus.decont.rule import RULE_N, passage_grams
from corpus.formats.blocked_bloom import BlockedBloom, BlockedBloomWriter, BlockedSpec
from corpus.formats.dedup_files import fsync_files
from corpus.model.digest import file_sha256, json_digest
from corpus.model.layout import beside, fsync_dir, install_dir, link_file, manifest_path

FORMAT = "corpus-eval-table/2"
#: rows a writer sorts at a time (16 bytes each, a few times that while sorting): 64 MiB of rows
RUN_ROWS = 1 << 22
#: the Bloom filter's false-positive rate: a "maybe" costs one binary search of the mapped hashes
BLOOM = BlockedSpec.from_fp_rate(0.01)
#: hashes read into the Bloom filter at a time (~40 MB of temporaries)
_BLOOM_BATCH = 1 << 18
#: every FENCE-th row's hash is kept in fence.u8 (4 KiB of the hash column between two): a rank holds
#: them (7.6 MB at 10^7 items) and binary-searches the mapped column only between two, one page, where a
#: search of the whole column faulted in ~10 pages per lookup when the table was not in the page cache
FENCE = 512
_FENCE_FILE = "fence.u8"

_ROW_FILES = {
    "grams": ("grams.u8", "<u8"),
    "passage": ("passage.u4", "<u4"),
    "position": ("position.u4", "<u4"),
}
_OTHER_FILES = {
    "passage_len": ("passage_len.u4", "<u4"),
    "passage_item": ("passage_item.u4", "<u4"),
    "item_benchmark": ("item_benchmark.u2", "<u2"),
    "item_ids_off": ("item_ids.off", "<u8"),
}
_IDS = "item_ids.bin"
_BLOOM_FILE = "grams.bloom"


def table_key(registry_digest: str, min_item_words: int, n: int = RULE_N) -> dict[str, Any]:
    """What a table answers for: the registry's content, the passages' minimum, the n-grams' n and the
    hashing."""
    return {
        "eval_registry": registry_digest,
        "min_item_words": min_item_words,
        "ngram": n,
        "scheme": SCHEME,
    }


class _Columns:
    """Append-only raw column files of one directory."""

    def __init__(self, directory: Path, files: dict[str, tuple[str, str]]) -> None:
        self.dtypes = {name: np.dtype(dt) for name, (_, dt) in files.items()}
        self.handles: dict[str, BinaryIO] = {
            name: open(directory / f, "wb") for name, (f, _) in files.items()
        }

    def write(self, name: str, values: Any) -> None:
        self.handles[name].write(np.asarray(values, dtype=self.dtypes[name]).tobytes())

    def close(self) -> None:
        for h in self.handles.values():
            h.close()


def _map(path: Path, dtype: str, count: int) -> np.ndarray:
    """A read-only map of ``count`` values of ``dtype`` (an empty array for none: mmap refuses size 0),
    as a plain array viewing the map: indexing an np.memmap goes through its Python ``__getitem__``
    (~15 µs a call, a scan's largest cost after the Bloom filter's)."""
    if count == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,)).view(np.ndarray)


class _Runs:
    """Rows in sorted runs of at most ``run_rows``: each run sorted by hash, stable, so a run's rows keep
    the (passage, position) order they came in, and runs hold increasing passages."""

    def __init__(self, directory: Path, run_rows: int) -> None:
        self.directory, self.run_rows = directory, run_rows
        self.pending: list[tuple[np.ndarray, int]] = []  # (grams, passage) per passage
        self.pending_rows = 0
        self.runs: list[int] = []  # rows per run

    def add(self, grams: np.ndarray, passage: int) -> None:
        self.pending.append((grams, passage))
        self.pending_rows += grams.shape[0]
        if self.pending_rows >= self.run_rows:
            self.spill()

    def spill(self) -> None:
        if not self.pending:
            return
        grams = np.concatenate([g for g, _ in self.pending])
        lengths = np.array([g.shape[0] for g, _ in self.pending], dtype=np.int64)
        passage = np.repeat(np.array([p for _, p in self.pending], dtype=np.uint32), lengths)
        position = np.arange(grams.shape[0], dtype=np.int64) - np.repeat(
            np.cumsum(lengths) - lengths, lengths
        )
        order = np.argsort(grams, kind="stable")
        k = len(self.runs)
        for name, values in (("grams", grams), ("passage", passage), ("position", position)):
            np.asarray(values[order], dtype=_ROW_FILES[name][1]).tofile(self.directory / f"run{k}.{name}")
        self.runs.append(int(grams.shape[0]))
        self.pending, self.pending_rows = [], 0

    def merged(self) -> Iterator[dict[str, np.ndarray]]:
        """The rows of every run in (hash, passage, position) order, a hash range at a time: each range
        reads its slice of every run (found by binary search of the run's mapped hashes), in run order,
        sorted stably by hash. Slices are read, not mapped, so what the merge holds is one range."""
        self.spill()
        total = sum(self.runs)
        grams = [_map(self.directory / f"run{k}.grams", "<u8", rows) for k, rows in enumerate(self.runs)]
        ranges = max(1, -(-total // self.run_rows))
        bounds = [np.uint64((i << 64) // ranges) for i in range(1, ranges)]
        starts = [0] * len(grams)
        for i in range(ranges):
            ends = [g.shape[0] for g in grams]
            if i < len(bounds):
                ends = [int(np.searchsorted(g, bounds[i], side="left")) for g in grams]
            parts = {
                n: [
                    _read(self.directory / f"run{k}.{n}", dt, s, e)
                    for k, (s, e) in enumerate(zip(starts, ends, strict=True))
                ]
                for n, (_, dt) in _ROW_FILES.items()
            }
            starts = ends
            chunk = np.concatenate(parts["grams"])
            order = np.argsort(chunk, kind="stable")
            yield {n: np.concatenate(parts[n])[order] for n in _ROW_FILES}


def _read(path: Path, dtype: str, start: int, stop: int) -> np.ndarray:
    """Values ``start:stop`` of a raw column file, read into memory."""
    size = np.dtype(dtype).itemsize
    return np.fromfile(path, dtype=dtype, count=stop - start, offset=start * size)


def build_eval_table(
    registry_dir: Path,
    min_item_words: int,
    out: Path,
    run_rows: int = RUN_ROWS,
    reuse: Path | None = None,
    cache: Path | None = None,
    n: int = RULE_N,
) -> dict[str, Any]:
    """Write the table of the registry in ``registry_dir``'s passage ``n``-grams (8: the rule's, 5: the
    fuzzy tier's) to ``out`` (left as it is when it already holds this table; hard-linked from ``reuse``,
    a base build's table, or from ``cache``, a directory of tables by key, when one of those is); its
    manifest. A table written here is added to ``cache``. Memory: about ``run_rows`` rows and one item
    at a time."""
    files = registry_files(registry_dir)
    names = [benchmark_name(p) for p in files]
    check_unique_names(registry_dir, names)
    digest = json_digest([[n, file_sha256(p)] for n, p in zip(names, files, strict=True)])
    key = table_key(digest, min_item_words, n)
    existing = read_manifest(out)
    if existing is not None and existing["key"] == key:
        return existing
    entry = Path(cache) / json_digest(key).removeprefix("sha256:")[:32] if cache is not None else None
    tmp = beside(out)
    tmp.mkdir(parents=True)
    try:
        manifest = _linked(tmp, key, [d for d in (reuse, entry) if d is not None])
        if manifest is None:
            benchmarks = sorted(zip(names, files, strict=True))
            manifest = _write(tmp, key, benchmarks, min_item_words, run_rows, n)
            fsync_files(sorted(tmp.iterdir()))
        fsync_dir(tmp)
        install_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if entry is not None and read_manifest(entry) is None:
        _publish(out, entry)
    return manifest


def _linked(tmp: Path, key: dict, donors: list[Path]) -> dict[str, Any] | None:
    """The first of ``donors`` holding the table of ``key``, its files hard-linked into ``tmp`` (they are
    written once, never changed); None when none does (or one vanished while it was linked)."""
    for donor in donors:
        manifest = read_manifest(donor)
        if manifest is None or manifest["key"] != key:
            continue
        try:
            for f in sorted(Path(donor).iterdir()):
                link_file(f, tmp / f.name)
        except OSError:
            for f in tmp.iterdir():
                f.unlink()
            continue
        return manifest
    return None


def _publish(table: Path, entry: Path) -> None:
    """Add ``table`` to a cache as ``entry`` (hard links; whole or not at all: a build publishing the
    same table at the same time wins, this one's copy is dropped)."""
    tmp = beside(entry)
    try:
        tmp.mkdir(parents=True)
        for f in sorted(table.iterdir()):
            link_file(f, tmp / f.name)
        fsync_dir(tmp)
        os.rename(tmp, entry)
    except OSError:
        pass  # another build's copy is there, or the cache cannot be written: the build has its table
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write(
    d: Path, key: dict, benchmarks: list[tuple[str, Path]], min_item_words: int, run_rows: int, n: int
) -> dict:
    cols = _Columns(d, _OTHER_FILES)
    runs = _Runs(d, run_rows)
    described: dict[str, dict[str, Any]] = {}
    items = passages = id_bytes = 0
    cols.write("item_ids_off", [0])
    with open(d / _IDS, "wb") as ids:
        for b, (name, path) in enumerate(benchmarks):
            count, unchecked, kind = 0, 0, None
            for item, item_kind in iter_benchmark(path, name):
                kind = kind or item_kind
                checked = False
                for text in item.passages or (item.text,):
                    grams = passage_grams(text, min_item_words, n)
                    if grams is not None:
                        runs.add(grams, passages)
                        cols.write("passage_len", [grams.shape[0]])
                        cols.write("passage_item", [items])
                        passages, checked = passages + 1, True
                unchecked += not checked
                raw = item.item_id.encode("utf-8")
                ids.write(raw)
                id_bytes += len(raw)
                cols.write("item_ids_off", [id_bytes])
                cols.write("item_benchmark", [b])
                items, count = items + 1, count + 1
            described[name] = {
                "sha256": file_sha256(path),
                "items": count,
                "file": path.name,
                "content": kind,
            }
            if unchecked:
                described[name]["unchecked_items"] = unchecked
    cols.close()
    rows, distinct = _write_rows(d, runs)
    blocks = write_bloom(d / _BLOOM_FILE, d / _ROW_FILES["grams"][0], rows, distinct)
    manifest = {
        "format": FORMAT,
        "key": key,
        "benchmarks": [[name, described[name]] for name, _ in benchmarks],
        "items": items,
        "passages": passages,
        "rows": rows,
        "distinct_grams": distinct,
        "bloom": {**BLOOM.to_dict(), "blocks": blocks},
        "files": {n: f for n, (f, _) in {**_ROW_FILES, **_OTHER_FILES}.items()}
        | {"ids": _IDS, "bloom": _BLOOM_FILE, "fence": _FENCE_FILE},
    }
    manifest_path(d).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def _write_rows(d: Path, runs: _Runs) -> tuple[int, int]:
    """The runs merged into the row columns; (rows, distinct hashes)."""
    cols = _Columns(d, {**_ROW_FILES, "fence": (_FENCE_FILE, "<u8")})
    rows = distinct = 0
    for chunk in runs.merged():  # hash ranges are disjoint: distinct counts add up
        for n in _ROW_FILES:
            cols.write(n, chunk[n])
        cols.write("fence", chunk["grams"][-rows % FENCE :: FENCE])
        rows += chunk["grams"].shape[0]
        distinct += int(distinct_sorted(chunk["grams"]).shape[0])
    cols.close()
    for k in range(len(runs.runs)):
        for n in _ROW_FILES:
            (d / f"run{k}.{n}").unlink()
    return rows, distinct


def expand_ranges(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Every index in the half-open ranges [left[i], right[i]), in order, as one int64 array."""
    counts = (np.asarray(right) - np.asarray(left)).astype(np.int64)
    keep = counts > 0
    starts, counts = np.asarray(left, dtype=np.int64)[keep], counts[keep]
    if counts.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(int(counts.sum()), dtype=np.int64)


def write_bloom(path: Path, grams_file: Path, rows: int, distinct: int) -> int:
    """Writes the blocked Bloom filter of the sorted hashes in ``grams_file`` (each distinct hash once),
    read and written a batch at a time: the writer holds one batch, not the filter (an unblocked one
    held its 578 MB of bits at 10^7 items; filling it in a mapped file wrote 98 GB back). Its blocks."""
    with open(path, "wb") as f:
        writer = BlockedBloomWriter(f, distinct, BLOOM)
        last = None
        for at in range(0, rows, _BLOOM_BATCH):
            chunk = distinct_sorted(_read(grams_file, "<u8", at, min(rows, at + _BLOOM_BATCH)))
            writer.add_sorted(chunk[1:] if last is not None and chunk[0] == last else chunk)
            last = chunk[-1]
        writer.finish()
    return writer.blocks


def read_manifest(directory: Path) -> dict[str, Any] | None:
    path = manifest_path(directory)
    if not path.is_file():
        return None
    manifest = json.loads(path.read_text())
    return manifest if manifest.get("format") == FORMAT else None


@dataclass(frozen=True)
class EvalTable:
    """A written table, mapped read-only: what :class:`corpus.decont.matcher.EvalIndex` looks documents up in."""

    manifest: dict[str, Any]
    hashes: np.ndarray
    passage: np.ndarray
    position: np.ndarray
    passage_len: np.ndarray
    passage_item: np.ndarray
    item_benchmark: np.ndarray
    item_ids_off: np.ndarray
    item_ids: np.ndarray
    bloom: BlockedBloom
    fence: np.ndarray  # hashes[::FENCE], read into memory

    @classmethod
    def open(cls, directory: Path) -> EvalTable:
        d = Path(directory)
        m = read_manifest(d)
        if m is None:
            raise FileNotFoundError(f"no eval table in {d}")
        counts = {
            "grams": m["rows"],
            "passage": m["rows"],
            "position": m["rows"],
            "passage_len": m["passages"],
        }
        counts |= {
            "passage_item": m["passages"],
            "item_benchmark": m["items"],
            "item_ids_off": m["items"] + 1,
        }
        cols = {n: _map(d / f, dt, counts[n]) for n, (f, dt) in {**_ROW_FILES, **_OTHER_FILES}.items()}
        ids_size = int(cols["item_ids_off"][-1])
        ids = _map(d / _IDS, "u1", ids_size)
        bloom = BlockedBloom.map(d / _BLOOM_FILE)
        fence = np.fromfile(d / _FENCE_FILE, dtype="<u8")
        if fence.shape[0] != -(-m["rows"] // FENCE):
            raise ValueError(f"{d}: {fence.shape[0]} fence hashes for {m['rows']} rows")
        return cls(
            m, cols["grams"], cols["passage"], cols["position"], cols["passage_len"], cols["passage_item"],
            cols["item_benchmark"], cols["item_ids_off"], ids, bloom, fence,
        )  # fmt: skip

    @property
    def benchmarks(self) -> list[str]:
        return [name for name, _ in self.manifest["benchmarks"]]

    def item(self, i: int) -> tuple[str, str]:
        """(benchmark, item id) of item ``i``."""
        raw = bytes(self.item_ids[int(self.item_ids_off[i]) : int(self.item_ids_off[i + 1])])
        return self.benchmarks[int(self.item_benchmark[i])], raw.decode("utf-8")

    def unchecked(self) -> Counter:
        return Counter(
            {n: f["unchecked_items"] for n, f in self.manifest["benchmarks"] if f.get("unchecked_items")}
        )

    def rows_in(self, doc_set: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(passage, position) of every passage n-gram in ``doc_set`` (a document's sorted distinct
        n-grams): the Bloom filter's "maybe"s, confirmed by binary search of the mapped hashes."""
        maybe = doc_set[self.bloom.might_contain(doc_set)]
        rows = expand_ranges(*self._bounds(maybe))
        return self.passage[rows].astype(np.int64), self.position[rows].astype(np.int64)

    def _bounds(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """np.searchsorted(self.hashes, keys) on the left and on the right, each key searched only
        between the fence hashes around it: row ``i * FENCE`` is the first at or past the key for ``i``
        fence hashes before it (and past it on the right), so its rows lie in one slice of the column."""
        first = np.searchsorted(self.fence, keys, side="left")
        past = np.searchsorted(self.fence, keys, side="right")
        left = np.empty(keys.shape[0], dtype=np.int64)
        right = np.empty(keys.shape[0], dtype=np.int64)
        rows = self.hashes.shape[0]
        for k, (key, a, b) in enumerate(zip(keys, first.tolist(), past.tolist(), strict=True)):
            lo = max(a - 1, 0) * FENCE
            window = self.hashes[lo : min(b * FENCE + 1, rows)]
            left[k] = lo + int(window.searchsorted(key, side="left"))
            right[k] = lo + int(window.searchsorted(key, side="right"))
        return left, right
