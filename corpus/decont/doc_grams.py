"""The per-document 8-gram index the build keeps, and the check after the build that reads it.

The index is one record per (8-gram, document) (:data:`DOC_GRAM_RECORD`), range-partitioned by hash
prefix (:mod:`corpus.formats.partitions`), sorted by (hash, document), unique, read by memory map; the
snapshot links its parts (``decont/8gram_docs/``). :func:`check_benchmark` answers, for a benchmark
published after the build, exactly what the build's scan would have said of every stored document: the
candidates of a passage are the documents of its 8-grams at one residue modulo the run length (none is
lost), and their rows go to :func:`corpus.decont.rule.contaminated`. See docs/snapshot.md ("The
contamination report").
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from corpus.decont.eval_table import expand_ranges
from corpus.decont.matcher import PassageTable
from corpus.decont.registry import Benchmark
from corpus.decont.rule import (
    DEFAULT_MIN_ITEM_WORDS,
    DEFAULT_MIN_RUN,
    check_settings,
    contaminated,
    required_run,
)
from corpus.formats.doc_index import DOC_INDEX_RECORD, part_of_doc_id
from corpus.formats.docshard import atomic_write_json, sidecar_path
from corpus.formats.partitions import map_records, part_of_hashes

#: one record of the per-document index: an 8-gram hash and the key of a document that holds it
DOC_GRAM_RECORD = np.dtype([("gram", "<u8"), ("doc", "<u8")])
#: decontaminate's per-shard records (an artifact kind: ``doc_grams/NAME.rows``, in document order)
DOC_GRAMS = "doc_grams"
DOC_GRAMS_SUFFIX = ".rows"
#: decontaminate's per-document index parts (``doc_gram_index/gNNNNN.dgr`` in the stage directory)
DOC_GRAM_INDEX_DIR = "doc_gram_index"
DOC_GRAM_INDEX_SUFFIX = ".dgr"
#: the key of the index's listing in decontaminate's manifest ``extra`` (``DecontaminationFacts``) and,
#: linked, in a snapshot's ``extra.artifacts``
DOC_GRAM_INDEX = "doc_gram_index"
#: a batch of the check: about this many passage 8-grams (and this many candidate rows) at a time
CHECK_BATCH = 1 << 20


#: the check of a sampled index (``doc_gram_sample`` > 1): a document holding at least
#: :data:`SAMPLED_MIN_HITS` of a passage's sampled 8-grams (all of them where it has fewer) is a hit
SAMPLED_RULE = "passage-sampled-8gram-hits/1"
SAMPLED_MIN_HITS = 2


def sampled_grams(grams: np.ndarray, sample: int) -> np.ndarray:
    """The 8-grams an index sampled at one in ``sample`` keeps: those whose hash is 0 modulo ``sample``
    (a power of two: the hash's low bits, where its parts are chosen by its high bits). An 8-gram is kept
    in every document and passage or in none, so a document holding a passage's text holds every
    sampled 8-gram of it."""
    if sample == 1:
        return grams
    grams = np.asarray(grams, dtype=np.uint64)
    return grams[is_sampled(grams, sample)]


def is_sampled(grams: np.ndarray, sample: int) -> np.ndarray:
    """Which of ``grams`` an index sampled at one in ``sample`` keeps (:func:`sampled_grams`)."""
    return (np.asarray(grams, dtype=np.uint64) & np.uint64(sample - 1)) == 0


def doc_key(doc_id: str) -> int:
    """A document's key in the index: the first 64 bits of its doc_id (32 hex digits)."""
    return int(doc_id[:16], 16)


def key_hex(key: int) -> str:
    return f"{int(key):016x}"


def doc_rows(doc_set: np.ndarray, key: int) -> np.ndarray:
    """The records of one document: each of its distinct 8-grams with its key (sorted by gram)."""
    rows = np.empty(doc_set.shape[0], dtype=DOC_GRAM_RECORD)
    rows["gram"] = doc_set
    rows["doc"] = np.uint64(key)
    return rows


class RowsFile:
    """One shard's records as the stage scans it (document order, unsorted), written under a temporary
    name, hashed while written, renamed on :meth:`close` with a sidecar (sha256, records)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(f".{self.path.name}.tmp.{os.getpid()}")
        self._f = open(self._tmp, "wb", buffering=1 << 20)  # noqa: SIM115 - closed in close()
        self._sha = hashlib.sha256()
        self.records = 0

    def write(self, rows: np.ndarray) -> None:
        data = np.ascontiguousarray(rows, dtype=DOC_GRAM_RECORD).tobytes()
        self._sha.update(data)
        self._f.write(data)
        self.records += int(rows.shape[0])

    def close(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        os.replace(self._tmp, self.path)
        atomic_write_json(sidecar_path(self.path), {"sha256": self._sha.hexdigest(), "records": self.records})

    def abort(self) -> None:
        """A failed shard: the temporary file goes, nothing is renamed."""
        self._f.close()
        self._tmp.unlink(missing_ok=True)


def read_rows(path: Path, batch: int) -> Iterable[np.ndarray]:
    """A rows file in batches of at most ``batch`` records."""
    rows = map_records(path, DOC_GRAM_RECORD)
    for start in range(0, rows.shape[0], batch):
        yield np.array(rows[start : start + batch])


class SortedRowWriter:
    """Writes records arriving in ascending (gram, doc) order once each, batch by batch."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.last: tuple[int, int] | None = None
        self.count = 0

    def add_sorted(self, gram: np.ndarray, doc: np.ndarray) -> None:
        gram, doc = np.asarray(gram, dtype=np.uint64), np.asarray(doc, dtype=np.uint64)
        if not gram.shape[0]:
            return
        later = (gram[1:] > gram[:-1]) | ((gram[1:] == gram[:-1]) & (doc[1:] >= doc[:-1]))
        if not later.all() or (self.last is not None and (int(gram[0]), int(doc[0])) < self.last):
            raise ValueError("records must arrive in ascending (gram, doc) order")
        keep = np.ones(gram.shape[0], dtype=bool)
        keep[1:] = (gram[1:] != gram[:-1]) | (doc[1:] != doc[:-1])
        if self.last is not None:
            keep[0] = (int(gram[0]), int(doc[0])) != self.last
        rows = np.empty(int(keep.sum()), dtype=DOC_GRAM_RECORD)
        rows["gram"], rows["doc"] = gram[keep], doc[keep]
        if rows.shape[0]:
            self.out.write(rows.tobytes())
            self.count += int(rows.shape[0])
        self.last = (int(gram[-1]), int(doc[-1]))


def write_parts(
    rows: np.ndarray, directory: Path, bits: int, suffix: str = DOC_GRAM_INDEX_SUFFIX
) -> list[Path]:
    """Every record of ``rows`` (any order) as the parts the stage writes (one process, in memory: for
    tests and benchmarks; the stage writes its parts through the exchange)."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = np.asarray(rows, dtype=DOC_GRAM_RECORD)
    rows = rows[np.lexsort((rows["doc"], rows["gram"]))]
    parts = part_of_hashes(rows["gram"], bits)
    paths = []
    for p in range(1 << bits):
        path = directory / f"g{p:05d}{suffix}"
        sel = rows[parts == p]
        with open(path, "wb") as f:
            SortedRowWriter(f).add_sorted(sel["gram"], sel["doc"])
        paths.append(path)
    return paths


def _bisect(col: np.ndarray, lo: np.ndarray, hi: np.ndarray, values: np.ndarray, right: bool) -> np.ndarray:
    """Vectorized binary search of each value inside its own sorted range ``col[lo:hi]`` (``col`` a
    memory-mapped column: only the probed pages are read)."""
    lo, hi = np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)
    values = np.asarray(values, dtype=np.uint64)
    active = np.flatnonzero(lo < hi)
    while active.shape[0]:
        mid = (lo[active] + hi[active]) >> 1
        probe = np.asarray(col[mid], dtype=np.uint64)
        go = probe <= values[active] if right else probe < values[active]
        lo[active[go]] = mid[go] + 1
        hi[active[~go]] = mid[~go]
        active = active[lo[active] < hi[active]]
    return lo


class DocGramIndex:
    """The per-document index as its parts (``paths[p]`` holds prefix ``p``), read by memory map."""

    def __init__(self, paths: Sequence[Path], bits: int) -> None:
        if len(paths) != 1 << bits:
            raise ValueError(f"a {bits}-bit partitioned index has {1 << bits} parts, got {len(paths)}")
        self.paths = [Path(p) for p in paths]
        self.bits = bits
        self._maps: dict[int, np.ndarray] = {}

    def part(self, p: int) -> np.ndarray:
        if p not in self._maps:
            self._maps[p] = map_records(self.paths[p], DOC_GRAM_RECORD)
        return self._maps[p]

    def ranges(self, grams: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(part, left, right) of each hash: its records are ``part[left:right]`` (empty when absent)."""
        grams = np.asarray(grams, dtype=np.uint64)
        parts = part_of_hashes(grams, self.bits)
        left = np.zeros(grams.shape[0], dtype=np.int64)
        right = np.zeros(grams.shape[0], dtype=np.int64)
        for p in np.unique(parts).tolist():
            sel = np.flatnonzero(parts == p)
            col = self.part(p)["gram"]
            n = np.full(sel.shape[0], col.shape[0], dtype=np.int64)
            zero = np.zeros(sel.shape[0], dtype=np.int64)
            left[sel] = _bisect(col, zero, n, grams[sel], right=False)
            right[sel] = _bisect(col, left[sel], n, grams[sel], right=True)
        return parts, left, right

    def docs(self, parts: np.ndarray, left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(which range, doc key) of every record in the given ranges."""
        which_all, docs_all = [], []
        for p in np.unique(parts).tolist():
            sel = np.flatnonzero(parts == p)
            idx = expand_ranges(left[sel], right[sel])
            counts = right[sel] - left[sel]
            which_all.append(np.repeat(sel, np.maximum(counts, 0)))
            docs_all.append(np.asarray(self.part(p)["doc"][idx], dtype=np.uint64))
        if not which_all:
            return np.empty(0, np.int64), np.empty(0, np.uint64)
        return np.concatenate(which_all), np.concatenate(docs_all)

    def holds(self, parts: np.ndarray, left: np.ndarray, right: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """Whether each document holds the 8-gram of its range (a binary search inside the range)."""
        found = np.zeros(docs.shape[0], dtype=bool)
        for p in np.unique(parts).tolist():
            sel = np.flatnonzero(parts == p)
            col = self.part(p)["doc"]
            at = _bisect(col, left[sel], right[sel], docs[sel], right=False)
            inside = at < right[sel]
            hit = np.zeros(sel.shape[0], dtype=bool)
            hit[inside] = np.asarray(col[at[inside]], dtype=np.uint64) == docs[sel][inside]
            found[sel] = hit
        return found

    def __len__(self) -> int:
        return sum(p.stat().st_size // DOC_GRAM_RECORD.itemsize for p in self.paths)


def _passage_batches(lengths: np.ndarray, limit: int) -> list[tuple[int, int]]:
    out, start, total = [], 0, 0
    for p, n in enumerate(lengths.tolist()):
        if total and total + n > limit:
            out.append((start, p))
            start, total = p, 0
        total += n
    if start < lengths.shape[0]:
        out.append((start, int(lengths.shape[0])))
    return out


def find_contaminated(
    table: PassageTable, index: DocGramIndex, min_run: int, batch: int = CHECK_BATCH
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(passage, doc key, run) of every passage of ``table`` contaminated in a document of the index."""
    out_p, out_d, out_r = [], [], []
    by_passage = np.lexsort((table.position, table.passage))  # the table's rows in passage order
    starts = np.concatenate(([0], np.cumsum(table.passage_len)))
    for a, b in _passage_batches(table.passage_len, batch):
        rows = by_passage[starts[a] : starts[b]]
        h, p, q = table.hashes[rows], table.passage[rows], table.position[rows]
        uniq, inv = np.unique(h, return_inverse=True)
        u_part, u_left, u_right = index.ranges(uniq)
        df = (u_right - u_left)[inv]
        # the residue (mod K) whose positions are in the fewest documents: its documents are the candidates
        k = np.asarray(required_run(table.passage_len[a:b], min_run), dtype=np.int64)
        slot_base = np.cumsum(k) - k
        local = p - a
        residue = q % k[local]
        cost = np.bincount(slot_base[local] + residue, weights=df, minlength=int(k.sum()))
        seg = np.repeat(np.arange(b - a), k)
        first = np.lexsort((np.arange(cost.shape[0]), cost, seg))
        is_first = np.ones(first.shape[0], dtype=bool)
        is_first[1:] = seg[first][1:] != seg[first][:-1]
        best = first[is_first] - slot_base  # per passage of the batch
        anchor = np.flatnonzero(residue == best[local])
        a_u = inv[anchor]
        which, docs = index.docs(u_part[a_u], u_left[a_u], u_right[a_u])
        if docs.shape[0] == 0:
            continue
        pairs = np.unique(np.stack([p[anchor][which].astype(np.uint64), docs], axis=1), axis=0)
        # every position of each candidate passage, looked up in the candidate document, in chunks
        pair_p = pairs[:, 0].astype(np.int64)
        lens = table.passage_len[pair_p]
        for c0, c1 in _passage_batches(lens, batch):
            cp, cd, cl = pair_p[c0:c1], pairs[c0:c1, 1], lens[c0:c1]
            group = np.repeat(np.arange(c1 - c0, dtype=np.int64), cl)
            offs = np.arange(int(cl.sum()), dtype=np.int64) - np.repeat(np.cumsum(cl) - cl, cl)
            row = starts[cp][group] - starts[a] + offs  # index into this batch's rows
            held = index.holds(u_part[inv[row]], u_left[inv[row]], u_right[inv[row]], cd[group])
            g, hp, run = contaminated(group[held], p[row][held], q[row][held], table.passage_len, min_run)
            out_p.append(hp)
            out_d.append(cd[g])
            out_r.append(run)
    if not out_p:
        return np.empty(0, np.int64), np.empty(0, np.uint64), np.empty(0, np.int64)
    return np.concatenate(out_p), np.concatenate(out_d), np.concatenate(out_r)


def find_sampled(
    table: PassageTable, index: DocGramIndex, sample: int, batch: int = CHECK_BATCH
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(passage, doc key, sampled 8-grams held) of every passage of ``table`` of which a document of an
    index sampled at one in ``sample`` holds at least min(SAMPLED_MIN_HITS, its sampled 8-grams)."""
    keep = is_sampled(table.hashes, sample)
    pairs = np.unique(np.stack([table.passage[keep].astype(np.uint64), table.hashes[keep]], axis=1), axis=0)
    passage, grams = pairs[:, 0].astype(np.int64), pairs[:, 1]  # distinct, in passage order
    n_sampled = np.bincount(passage, minlength=table.passage_len.shape[0])
    bounds = np.searchsorted(passage, np.arange(n_sampled.shape[0] + 1))
    out_p, out_d, out_n = [], [], []
    for a, b in _passage_batches(n_sampled, batch):
        lo, hi = bounds[a], bounds[b]
        uniq, inv = np.unique(grams[lo:hi], return_inverse=True)
        u_part, u_left, u_right = index.ranges(uniq)
        which, docs = index.docs(u_part[inv], u_left[inv], u_right[inv])
        if docs.shape[0] == 0:
            continue
        held, counts = np.unique(
            np.stack([passage[lo:hi][which].astype(np.uint64), docs], axis=1), axis=0, return_counts=True
        )
        p = held[:, 0].astype(np.int64)
        hit = counts >= np.minimum(SAMPLED_MIN_HITS, n_sampled[p])
        out_p.append(p[hit])
        out_d.append(held[hit, 1])
        out_n.append(counts[hit].astype(np.int64))
    if not out_p:
        return np.empty(0, np.int64), np.empty(0, np.uint64), np.empty(0, np.int64)
    return np.concatenate(out_p), np.concatenate(out_d), np.concatenate(out_n)


def check_benchmark(
    benchmark: Benchmark,
    index: DocGramIndex,
    min_run: int = DEFAULT_MIN_RUN,
    min_item_words: int = DEFAULT_MIN_ITEM_WORDS,
    batch: int = CHECK_BATCH,
    sample: int = 1,
) -> dict[str, Any]:
    """Per-benchmark result of the rule against every document of the index: which items are
    contaminated, in which documents (by key) and with what run. Against an index sampled at one 8-gram
    in ``sample``, :data:`SAMPLED_RULE` instead: a match's ``run`` is the sampled 8-grams the document
    holds, and an item with no sampled 8-gram cannot be found (``unsampled_items``)."""
    check_settings(min_run, min_item_words)
    items = list(benchmark.items)
    table = PassageTable.build(items, min_item_words)
    if sample > 1:
        passage, doc, run = find_sampled(table, index, sample, batch)
    else:
        passage, doc, run = find_contaminated(table, index, min_run, batch)
    found: dict[int, dict[int, int]] = {}
    for p, d, r in zip(passage.tolist(), doc.tolist(), run.tolist(), strict=True):
        per = found.setdefault(int(table.passage_item[p]), {})
        per[d] = max(per.get(d, 0), r)
    checked = int((~table.unchecked).sum())
    flagged = sorted(found)
    sampled = {}
    if sample > 1:
        with_sample = np.zeros(len(items), dtype=bool)
        kept = table.passage[is_sampled(table.hashes, sample)]
        with_sample[table.passage_item[kept]] = True
        sampled = {"sample": sample, "unsampled_items": int((~table.unchecked & ~with_sample).sum())}
    return sampled | {
        "benchmark": benchmark.name,
        "sha256": benchmark.sha256,
        "items": len(items),
        "checked_items": checked,
        "unchecked_items": len(items) - checked,
        "flagged_items": len(flagged),
        "rate": len(flagged) / checked if checked else 0.0,
        "longest_run": max((r for per in found.values() for r in per.values()), default=0),
        "flagged_ids": [items[i].item_id for i in flagged],
        "matches": {
            items[i].item_id: [{"doc": key_hex(d), "run": r} for d, r in sorted(found[i].items())]
            for i in flagged
        },
    }


def doc_ids_of_keys(doc_index: Any, keys: Iterable[str]) -> dict[str, list[str]]:
    """The doc_ids behind document keys (16 hex digits), from a snapshot's doc_id index
    (:class:`corpus.formats.doc_index.PartitionedDocIndex`): one binary search in one part per key."""
    out: dict[str, list[str]] = {}
    for key in sorted(set(keys)):
        part = map_records(doc_index.paths[part_of_doc_id(key, doc_index.bits)], DOC_INDEX_RECORD)
        ids = part["doc_id"]
        at = int(np.searchsorted(ids, key.encode()))
        found = []
        while at < ids.shape[0] and bytes(ids[at]).startswith(key.encode()):
            found.append(bytes(ids[at]).decode())
            at += 1
        out[key] = found
    return out
