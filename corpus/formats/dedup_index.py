"""A persistent dedup index: sorted, immutable, range-partitioned generations behind an atomic pointer.

Issue 13 (continuous operation): a new crawl is built against the dedup decisions of the builds
before it. The index keeps those decisions -- the exact-text keys and the MinHash band keys of every
document already in the corpus, each with the document (or cluster) that owns it -- so a new build
asks "is this key already taken, and by whom?" without recomputing the base. Pure library: numpy and
files, no MPI; the stages partition the work across ranks by partition range (:func:`owned_partitions`).

**Records** (one codec: the numpy structured dtypes below; a file is rows of one of them, packed):

* ``exact`` -- :data:`EXACT_RECORD`, 32 bytes: ``key`` V16 = ``corpus.text.normalize.text_key`` of
  the text (blake2b-128 of its key form, ``KEY_VERSION``); ``value`` V16 = the keeper's doc_id as its
  16 raw bytes (``corpus.dedup.order.doc_id_bytes``).
* ``band`` -- :data:`BAND_RECORD`, 34 bytes: ``key`` V18 = the MinHash band key exactly as
  ``mpi_kernels.minhash`` makes it (band number as big-endian u16, then a 128-bit hash of the band);
  ``value`` V16 = the cluster id (the smallest doc_id of the cluster, ``dup_cluster_id``) as raw bytes.
* ``recrawl`` -- :data:`RECRAWL_RECORD`, 32 bytes: ``key`` V16 = ``corpus.dedup.recrawl.recrawl_key``
  of a fetch (blake2b-128 of its URL and raw digest, ``RECRAWL_KEY_VERSION``); ``value`` V16 = the date
  of the fetch ingest kept, UTF-8, NUL-padded (:func:`date_values`, :func:`dates`).

Keys compare as bytes (memcmp order); :func:`records` builds rows from keys and values (bytes, uint8
rows, void arrays or doc_id hex strings), :func:`doc_ids` turns values back into hex doc_ids.

**Partitions.** ``P`` (fixed when the index is created, recorded) partitions by key range: with ``u``
the big-endian uint64 of key bytes ``[o, o + 8)`` (``o`` = 0 for exact and recrawl, 2 for band: the first bytes
of the hash, never the band number), the key's partition is ``floor(u * P / 2^64)`` (exact integer
arithmetic), so partition ``p`` holds one contiguous range of ``u`` and ranks own contiguous runs of
partitions. Within a partition the records are sorted by key bytes, each key once.

**A generation** (``generations/gNNNNNN/``) is, per partition ``p``, ``part-PPPPP.rec`` (the sorted
records) and ``part-PPPPP.bloom`` (its Bloom filter, :mod:`corpus.formats.bloom`), plus
``manifest.json``: kind, record layout, the parameters that define the keys (``params``: e.g. the key
version, or num_perm / bands / rows / seed / n-grams / normalization version), ``P``, the Bloom
parameters, the labels of the builds it holds, and per partition its record count and the sha256 of
both files. Files are written once and never changed; the same records give the same bytes (no
time, no dict order, no float from a vector unit in anything digested).

**The index** is the ordered list of generations named by ``CURRENT`` (JSON: kind, params, P, Bloom
parameters and, per generation, id, sha256 of its manifest, record count and labels). An update
(:meth:`PersistentIndex.begin` ... :meth:`PendingGeneration.commit`) writes the new generation in
``generations/gNNNNNN.partial/``, fsyncs its files and the directory, renames it to ``gNNNNNN``,
fsyncs ``generations/``, writes ``CURRENT.tmp``, fsyncs it, renames it over ``CURRENT`` and fsyncs
the index directory. A kill at any point leaves either the old pointer or the new one, each naming
complete generations; whatever it names no longer (a ``.partial`` directory, a renamed generation
the pointer never reached, a stale ``CURRENT.tmp``, generations a compaction replaced) is ignored by
readers and removed by the next update (:meth:`PersistentIndex.cleanup`). One update at a time.

**Keep-first.** A key's answer is its value in the OLDEST generation holding it: documents already
in the corpus keep their decisions. Within one generation a key is stored once; when the input of
a generation holds a key twice, the smallest value is kept (whatever the order of the input).
:meth:`PersistentIndex.compact` merges every generation into one with the same answers.

**Probing** (:meth:`PersistentIndex.probe`, per partition :meth:`~PersistentIndex.probe_partition`):
per partition, per generation (oldest first) the keys not yet found are tested against the
generation's Bloom filter of that partition; each "maybe" is confirmed by a binary search of the
memory-mapped sorted file, so a false positive costs one lookup and never changes an answer. At any
time a probe holds its batch of keys, one Bloom filter and one memory map (unmapped after use).

**Writing** streams: :class:`PartitionWriter` buffers at most ``run_records`` records, spills each
full buffer as a sorted run, then k-way merges the runs per partition in bounded chunks; it never
holds all records. Several writers, each owning a range of partitions (one per rank), may fill one
pending generation; one process then commits it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from corpus.dedup.order import doc_id_bytes
from corpus.dedup.recrawl import RECRAWL_KEY_VERSION
from corpus.formats.bloom import BloomFilter, BloomSpec, mix64
from corpus.model.digest import json_digest
from corpus.model.layout import build_dir_of_stage, dedup_base_path, dedup_index_dir
from corpus.text.normalize import KEY_VERSION, NORMALIZATION_VERSION

FORMAT = "corpus-dedup-index/1"
VALUE_BYTES = 16
EXACT_RECORD = np.dtype([("key", "V16"), ("value", f"V{VALUE_BYTES}")])
BAND_RECORD = np.dtype([("key", "V18"), ("value", f"V{VALUE_BYTES}")])
RECRAWL_RECORD = np.dtype([("key", "V16"), ("value", f"V{VALUE_BYTES}")])
CURRENT = "CURRENT"
GENERATIONS = "generations"
MANIFEST = "manifest.json"
PARTIAL = ".partial"
#: default records a writer buffers before spilling a sorted run (32 MiB of exact records)
RUN_RECORDS = 1 << 20
#: records read per source per step of a merge, at most (the merge holds about this many in all)
MERGE_RECORDS = 1 << 20
#: keys hashed into a Bloom filter at a time
HASH_RECORDS = 1 << 16
#: partitions whose files are fsynced together (in threads), before their sidecars are written
FSYNC_BATCH = 64
FSYNC_THREADS = 16
_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_KEY_SEED = np.uint64(0xD6E8FEB86659FD93)


@dataclass(frozen=True)
class KeyKind:
    name: str
    record: np.dtype
    partition_offset: int  # the key bytes [o, o + 8) that choose the partition

    @property
    def key_bytes(self) -> int:
        return self.record["key"].itemsize


KINDS = {
    "exact": KeyKind("exact", EXACT_RECORD, 0),
    "band": KeyKind("band", BAND_RECORD, 2),
    "recrawl": KeyKind("recrawl", RECRAWL_RECORD, 0),
}


class IndexMismatch(ValueError):
    """The base index was made with other key parameters (or of another kind) than this build's."""


class IndexMixed(ValueError):
    """A generation holds a base's records and a later build's (a compaction): they cannot be split."""


class IndexDamaged(RuntimeError):
    """A file of the index is not what its manifest or pointer says."""


# --- test hook: called with the name of each point an update passes (a kill there is tested) ---------
_HOOK: Callable[[str], None] | None = None


def _point(name: str) -> None:
    if _HOOK is not None:
        _HOOK(name)


# --- key parameters ----------------------------------------------------------------------------------


def exact_key_params() -> dict[str, Any]:
    """What defines an exact key: ``corpus.text.normalize.text_key`` at its key version. The recorded
    name is the key's name since the first index was made (a base's parameters must match), not a path."""
    return {"key": "corpus.dedup.normalize.text_key", "key_version": KEY_VERSION}


def band_key_params(
    *, num_perm: int, bands: int, rows: int, seed: int, ngram: int, char_ngram: int,
    normalization_version: str = NORMALIZATION_VERSION,
) -> dict[str, Any]:
    """What defines a band key (``mpi_kernels.minhash.MinHashParams`` and the shingles' normalization)."""
    return {
        "key": "mpi_kernels.minhash.band_keys",
        "normalization_version": normalization_version,
        "num_perm": int(num_perm),
        "bands": int(bands),
        "rows": int(rows),
        "seed": int(seed),
        "ngram": int(ngram),
        "char_ngram": int(char_ngram),
    }


def recrawl_key_params() -> dict[str, Any]:
    """What defines a recrawl key: ``corpus.dedup.recrawl.recrawl_key`` at its key version (the recorded
    name, like the exact key's, is the one every existing index carries)."""
    return {"key": "corpus.ingest.recrawl.recrawl_key", "key_version": RECRAWL_KEY_VERSION}


def _check_params(kind: str, params: dict[str, Any], base_kind: str, base: dict[str, Any], where: Path) -> None:
    if kind != base_kind:
        raise IndexMismatch(f"base index {where} holds {base_kind!r} keys, this build asks for {kind!r}")
    for name in sorted(set(params) | set(base)):
        if params.get(name) != base.get(name):
            raise IndexMismatch(
                f"base index {where} was built with {name}={base.get(name)!r}, this build uses "
                f"{name}={params.get(name)!r}: its keys are not this build's keys"
            )


# --- codec ---------------------------------------------------------------------------------------------


def as_void(x: Any, width: int) -> np.ndarray:
    """``x`` as a 1-D array of ``V{width}``: from such an array, from (n, width) uint8 rows, from a list
    of ``width``-byte strings."""
    if isinstance(x, np.ndarray):
        if x.dtype == np.dtype(f"V{width}"):
            return np.ascontiguousarray(x).reshape(-1)
        if x.dtype == np.uint8 and x.ndim == 2 and x.shape[1] == width:
            return np.ascontiguousarray(x).view(f"V{width}").reshape(-1)
        raise ValueError(f"expected V{width} or (n, {width}) uint8, got {x.dtype} {x.shape}")
    items = list(x)
    if any(len(b) != width for b in items):
        raise ValueError(f"every key or value must be {width} bytes")
    return np.frombuffer(b"".join(items), dtype=f"V{width}").copy() if items else np.zeros(0, f"V{width}")


def doc_id_values(doc_ids: Iterable[str]) -> np.ndarray:
    """doc_ids (32 hex characters) as V16 values."""
    return as_void([doc_id_bytes(d) for d in doc_ids], VALUE_BYTES)


def doc_ids(values: np.ndarray) -> list[str]:
    """V16 values back to doc_ids (32 hex characters)."""
    return [bytes(v).hex() for v in as_void(values, VALUE_BYTES)]


def date_values(dates: Iterable[str]) -> np.ndarray:
    """Fetch dates as the recrawl index's V16 values: UTF-8, NUL-padded, so they compare as the dates do
    (``YYYY-MM-DD``: the smallest value of a key, kept within a generation, is its earliest date)."""
    raw = [d.encode("utf-8") for d in dates]
    long = [d for d in raw if len(d) > VALUE_BYTES or b"\0" in d]
    if long:
        raise ValueError(f"a recrawl index stores dates of at most {VALUE_BYTES} bytes without NUL, got {long[0]!r}")
    return as_void([d.ljust(VALUE_BYTES, b"\0") for d in raw], VALUE_BYTES)


def dates(values: np.ndarray) -> list[str]:
    """The recrawl index's V16 values back to dates."""
    return [bytes(v).rstrip(b"\0").decode("utf-8") for v in as_void(values, VALUE_BYTES)]


def records(kind: str, keys: Any, values: Any) -> np.ndarray:
    """Rows of the kind's record dtype; ``values`` may be V16 / (n, 16) uint8 / bytes or doc_id strings
    (a recrawl index's dates: :func:`date_values`)."""
    k = KINDS[kind]
    vals = list(values) if not isinstance(values, np.ndarray) else values
    if not isinstance(vals, np.ndarray) and vals and isinstance(vals[0], str):
        vals = doc_id_values(vals)
    key_arr, val_arr = as_void(keys, k.key_bytes), as_void(vals, VALUE_BYTES)
    if len(key_arr) != len(val_arr):
        raise ValueError(f"{len(key_arr)} keys but {len(val_arr)} values")
    rows = np.empty(len(key_arr), dtype=k.record)
    rows["key"], rows["value"] = key_arr, val_arr
    return rows


def _words(v: np.ndarray) -> np.ndarray:
    """(n, ceil(w / 8)) native uint64: the big-endian words of V{w} items, zero-padded (their order is
    the items' byte order)."""
    w = v.dtype.itemsize
    nw = -(-w // 8)
    raw = np.ascontiguousarray(v).view(np.uint8).reshape(-1, w)
    if w % 8:
        padded = np.zeros((raw.shape[0], nw * 8), dtype=np.uint8)
        padded[:, :w] = raw
        raw = padded
    return raw.view(">u8").astype(np.uint64)


def _key_hash(words: np.ndarray) -> np.ndarray:
    """One mixed 64-bit hash per key (from all its words): what the Bloom filters hash."""
    h = mix64(words[:, 0] ^ _KEY_SEED)
    for i in range(1, words.shape[1]):
        h = mix64(h ^ words[:, i])
    return h


def _range_part(u: np.ndarray, partitions: int) -> np.ndarray:
    """floor(u * P / 2^64) for uint64 ``u``, exactly, without 128-bit integers (P < 2^31)."""
    hi, lo = u >> _S32, u & _M32
    p = np.uint64(partitions)
    return ((hi * p + ((lo * p) >> _S32)) >> _S32).astype(np.int64)


def partition_of(kind: str, keys: Any, partitions: int) -> np.ndarray:
    """The partition of each key (see the module docstring): monotone in the key's partition bytes."""
    k = KINDS[kind]
    raw = np.ascontiguousarray(as_void(keys, k.key_bytes)).view(np.uint8).reshape(-1, k.key_bytes)
    u = np.ascontiguousarray(raw[:, k.partition_offset : k.partition_offset + 8]).view(">u8").reshape(-1)
    return _range_part(u.astype(np.uint64), partitions)


def owned_partitions(rank: int, size: int, partitions: int) -> range:
    """The contiguous partitions ``[a, b)`` rank ``rank`` of ``size`` owns (blocks differing by <= 1)."""
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in [0, {size})")
    return range(rank * partitions // size, (rank + 1) * partitions // size)


def suggest_partitions(expected_records: int, per_partition: int = 1 << 22, ranks: int = 1) -> int:
    """A P for an index expected to grow to ``expected_records``: partitions of at most about
    ``per_partition`` records (what one probe maps at a time), at least one per rank."""
    return max(ranks, -(-max(1, expected_records) // per_partition))


# --- files ---------------------------------------------------------------------------------------------


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode()


def _write_bytes(path: Path, data: bytes, sync: bool = True) -> str:
    with open(path, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    return hashlib.sha256(data).hexdigest()


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_files(paths: list[Path]) -> None:
    """fsync of many files at once, from threads: the file system commits them together (on a journaling
    file system 10-15x faster than one after the other)."""
    if len(paths) <= 1:
        for path in paths:
            _fsync_file(path)
        return
    with ThreadPoolExecutor(max_workers=min(FSYNC_THREADS, len(paths))) as pool:
        list(pool.map(_fsync_file, paths))


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _map(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    size = path.stat().st_size
    if size != count * dtype.itemsize:
        raise IndexDamaged(f"{path}: {size} bytes, its manifest says {count} records of {dtype.itemsize}")
    return np.memmap(path, dtype=dtype, mode="r") if count else np.zeros(0, dtype=dtype)


def _part_name(p: int) -> str:
    return f"part-{p:05d}"


# --- sorting and merging -----------------------------------------------------------------------------


def _lex_le(bound: tuple[int, ...], cols: np.ndarray) -> np.ndarray:
    """Per row of ``cols`` (n, c): row <= bound, lexicographically."""
    le = np.ones(cols.shape[0], dtype=bool)
    for i in reversed(range(cols.shape[1])):
        b = np.uint64(bound[i])
        le = (cols[:, i] < b) | ((cols[:, i] == b) & le)
    return le


def _lex_less_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row: a < b, lexicographically (both (n, c) uint64)."""
    less = np.zeros(a.shape[0], dtype=bool)
    for i in reversed(range(a.shape[1])):
        less = (a[:, i] < b[:, i]) | ((a[:, i] == b[:, i]) & less)
    return less


def _sort_cols(rows: np.ndarray, source: int | None) -> np.ndarray:
    """Sort columns: key words, then the value's words (``source`` None) or the source number."""
    keys = _words(rows["key"])
    tie = _words(rows["value"]) if source is None else np.full((len(rows), 1), source, dtype=np.uint64)
    return np.concatenate([keys, tie], axis=1)


def _sorted(rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort(cols.T[::-1])
    return rows[order], cols[order]


class _Output:
    """A part file being written: records appended, key-deduplicated against the previous batch."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = open(path, "wb")
        self.sha = hashlib.sha256()
        self.count = 0
        self.last: np.ndarray | None = None  # key words of the last record written

    def write_sorted(self, rows: np.ndarray, keys: np.ndarray) -> None:
        """``rows`` sorted by (key, tie); a key equal to its predecessor (in this batch or the last
        record written) is dropped: the first of a key wins."""
        if not len(rows):
            return
        dup = np.zeros(len(rows), dtype=bool)
        dup[1:] = (keys[1:] == keys[:-1]).all(axis=1)
        if self.last is not None:
            dup[0] = bool((keys[0] == self.last).all())
        kept = rows[~dup]
        data = np.ascontiguousarray(kept).tobytes()
        self.file.write(data)
        self.sha.update(data)
        self.count += len(kept)
        self.last = keys[-1].copy()

    def close(self) -> str:
        """Closes the file (its fsync comes with its partition's batch: :class:`_Finisher`)."""
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


# --- generations ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Generation:
    id: str
    path: Path
    manifest: dict[str, Any]

    @property
    def records(self) -> int:
        return int(self.manifest["records"])

    @property
    def labels(self) -> list[str]:
        return list(self.manifest["labels"])

    def part(self, p: int) -> dict[str, Any]:
        return self.manifest["parts"][p]

    def map_part(self, p: int, record: np.dtype) -> np.ndarray:
        return _map(self.path / self.part(p)["file"], record, int(self.part(p)["records"]))

    def bloom(self, p: int) -> BloomFilter:
        """The partition's Bloom filter, checked against its sha256 (a damaged filter could reject a
        present key: it is refused, never used)."""
        part = self.part(p)
        data = (self.path / part["bloom_file"]).read_bytes()
        if hashlib.sha256(data).hexdigest() != part["bloom_sha256"]:
            raise IndexDamaged(f"{self.path / part['bloom_file']}: sha256 differs from the manifest")
        return BloomFilter.from_bytes(data)


@dataclass
class ProbeStats:
    """What a probe did: keys tested against a filter, rejected by it, looked up, and filter hits the
    lookup found absent (false positives)."""

    bloom_tests: int = 0
    bloom_rejected: int = 0
    lookups: int = 0
    false_positives: int = 0

    @property
    def fp_rate(self) -> float:
        absent = self.bloom_rejected + self.false_positives
        return self.false_positives / absent if absent else 0.0


@dataclass
class ProbeResult:
    found: np.ndarray  # bool
    values: np.ndarray  # V16 (zeros where not found)
    generation: np.ndarray  # int32: index in the index's generation list, -1 where not found


def _search(keys_mm: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized binary search of the key words ``q`` (m, nw) in the sorted memory-mapped keys:
    (position, found). Touches about log2(n) records per query."""
    n = len(keys_mm)
    m = q.shape[0]
    lo = np.zeros(m, dtype=np.int64)
    hi = np.full(m, n, dtype=np.int64)
    active = np.arange(m)
    while len(active):
        mid = (lo[active] + hi[active]) // 2
        less = _lex_less_rows(_words(keys_mm[mid]), q[active])
        lo[active[less]] = mid[less] + 1
        hi[active[~less]] = mid[~less]
        active = active[lo[active] < hi[active]]
    found = np.zeros(m, dtype=bool)
    inside = np.nonzero(lo < n)[0]
    if len(inside):
        found[inside] = (_words(keys_mm[lo[inside]]) == q[inside]).all(axis=1)
    return lo, found


# --- the index -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PersistentIndex:
    """One snapshot of an index (what ``CURRENT`` named when it was opened); updates return a new one."""

    root: Path
    kind: str
    params: dict[str, Any]
    partitions: int
    bloom_spec: BloomSpec
    generations: tuple[Generation, ...] = field(default=())
    pointer: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def record(self) -> np.dtype:
        return KINDS[self.kind].record

    @property
    def labels(self) -> list[str]:
        return [label for g in self.generations for label in g.labels]

    @property
    def records(self) -> int:
        """Records over all generations (a key in two generations counts twice)."""
        return sum(g.records for g in self.generations)

    # -- opening

    @classmethod
    def create(
        cls, root: Path | str, kind: str, params: dict[str, Any], partitions: int,
        bloom_fp_rate: float = 0.01, bloom_spec: BloomSpec | None = None,
    ) -> PersistentIndex:
        """A new, empty index (no generation); refuses a directory that already holds one."""
        root = Path(root)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
        if not 1 <= partitions < 1 << 31:
            raise ValueError(f"partitions must be in [1, 2^31), got {partitions}")
        if (root / CURRENT).exists():
            raise FileExistsError(f"{root} already holds an index")
        spec = bloom_spec or BloomSpec.from_fp_rate(bloom_fp_rate)
        root.mkdir(parents=True, exist_ok=True)
        (root / GENERATIONS).mkdir(exist_ok=True)
        pointer = {
            "format": FORMAT, "kind": kind, "params": params, "partitions": partitions,
            "bloom": spec.to_dict(), "generations": [],
        }
        _switch_pointer(root, pointer)
        return cls.open(root, kind, params)

    @classmethod
    def open(cls, root: Path | str, kind: str | None = None, params: dict[str, Any] | None = None) -> PersistentIndex:
        """The index as ``CURRENT`` names it; with ``kind`` / ``params``, refuses a base made with
        other key parameters (:class:`IndexMismatch`, naming the parameter)."""
        root = Path(root)
        try:
            pointer = json.loads((root / CURRENT).read_bytes())
        except FileNotFoundError:
            raise FileNotFoundError(f"{root} holds no dedup index ({CURRENT} missing)") from None
        if pointer.get("format") != FORMAT:
            raise IndexMismatch(f"{root}: index format {pointer.get('format')!r}, this code reads {FORMAT!r}")
        if kind is not None:
            _check_params(kind, params or {}, pointer["kind"], pointer["params"], root)
        gens = []
        for entry in pointer["generations"]:
            path = root / GENERATIONS / entry["id"]
            data = (path / MANIFEST).read_bytes()
            if hashlib.sha256(data).hexdigest() != entry["manifest_sha256"]:
                raise IndexDamaged(f"{path / MANIFEST}: sha256 differs from {root / CURRENT}")
            manifest = json.loads(data)
            _check_params(pointer["kind"], pointer["params"], manifest["kind"], manifest["params"], path)
            if manifest["partitions"] != pointer["partitions"]:
                raise IndexDamaged(f"{path}: {manifest['partitions']} partitions, the index has {pointer['partitions']}")
            gens.append(Generation(entry["id"], path, manifest))
        return cls(
            root, pointer["kind"], pointer["params"], int(pointer["partitions"]),
            BloomSpec.from_dict(pointer["bloom"]), tuple(gens), pointer,
        )

    @classmethod
    def open_or_create(
        cls, root: Path | str, kind: str, params: dict[str, Any], partitions: int, bloom_fp_rate: float = 0.01
    ) -> PersistentIndex:
        if (Path(root) / CURRENT).exists():
            return cls.open(root, kind, params)
        return cls.create(root, kind, params, partitions, bloom_fp_rate)

    def reopen(self) -> PersistentIndex:
        return PersistentIndex.open(self.root, self.kind, self.params)

    def held_by(self, labels: Iterable[str]) -> PersistentIndex:
        """This index with only the generations whose builds are all in ``labels`` (in a build's fork:
        its base's, what the build's stages probe, so the build's own generation never answers its own
        probe and a rerun decides as the first run did). A generation holding both (a compaction merged
        the base's records with the build's) cannot be split: :class:`IndexMixed`."""
        labels = set(labels)
        mixed = [g.id for g in self.generations if set(g.labels) & labels and not set(g.labels) <= labels]
        if mixed:
            raise IndexMixed(
                f"{self.root} was compacted (generation {mixed[0]} holds its base's records and its own): "
                f"its base's decisions cannot be told apart; rebuild into a new directory"
            )
        kept = tuple(g for g in self.generations if set(g.labels) <= labels)
        entries = [e for e in self.pointer["generations"] if e["id"] in {g.id for g in kept}]
        return replace(self, generations=kept, pointer={**self.pointer, "generations": entries})

    # -- partitions

    def partition_of(self, keys: Any) -> np.ndarray:
        return partition_of(self.kind, keys, self.partitions)

    def owned(self, rank: int, size: int) -> range:
        return owned_partitions(rank, size, self.partitions)

    # -- probing

    def probe(self, keys: Any, *, use_bloom: bool = True, stats: ProbeStats | None = None) -> ProbeResult:
        """For each key: found, its value in the oldest generation holding it, that generation's index.
        Keys are grouped by partition; one partition's filter and map are held at a time."""
        keys = as_void(keys, KINDS[self.kind].key_bytes)
        n = len(keys)
        result = ProbeResult(np.zeros(n, bool), np.zeros(n, f"V{VALUE_BYTES}"), np.full(n, -1, np.int32))
        parts = self.partition_of(keys)
        order = np.argsort(parts, kind="stable")
        bounds = np.searchsorted(parts[order], np.arange(self.partitions + 1))
        for p in np.nonzero(np.diff(bounds))[0]:
            idx = order[bounds[p] : bounds[p + 1]]
            r = self.probe_partition(int(p), keys[idx], use_bloom=use_bloom, stats=stats)
            result.found[idx], result.values[idx], result.generation[idx] = r.found, r.values, r.generation
        return result

    def probe_partition(
        self, p: int, keys: Any, *, use_bloom: bool = True, stats: ProbeStats | None = None
    ) -> ProbeResult:
        """:meth:`probe` for keys all of partition ``p`` (what a rank owning ``p`` calls)."""
        keys = as_void(keys, KINDS[self.kind].key_bytes)
        n = len(keys)
        if n and not (self.partition_of(keys) == p).all():
            raise ValueError(f"probe_partition({p}) was given keys of other partitions")
        result = ProbeResult(np.zeros(n, bool), np.zeros(n, f"V{VALUE_BYTES}"), np.full(n, -1, np.int32))
        words = _words(keys)
        hashes = _key_hash(words) if use_bloom else None
        remaining = np.arange(n)
        for g, gen in enumerate(self.generations):  # oldest first: the first generation holding a key wins
            if not len(remaining):
                break
            if not int(gen.part(p)["records"]):
                continue
            cand = remaining
            if use_bloom:
                maybe = gen.bloom(p).might_contain(hashes[remaining])
                cand = remaining[maybe]
                if stats is not None:
                    stats.bloom_tests += len(remaining)
                    stats.bloom_rejected += int((~maybe).sum())
            if not len(cand):
                continue
            mm = gen.map_part(p, self.record)
            pos, hit = _search(mm["key"], words[cand])
            hits = cand[hit]
            result.found[hits] = True
            result.values[hits] = mm["value"][pos[hit]]
            result.generation[hits] = g
            del mm
            if stats is not None:
                stats.lookups += len(cand)
                if use_bloom:
                    stats.false_positives += int((~hit).sum())
            remaining = remaining[~result.found[remaining]]
        return result

    # -- updating

    def _next_id(self) -> str:
        last = max((int(g.id[1:]) for g in self.generations), default=0)
        return f"g{last + 1:06d}"

    def cleanup(self) -> list[str]:
        """Removes what ``CURRENT`` does not name: partial or orphaned generation directories, a stale
        ``CURRENT.tmp``, generations replaced by a compaction. Only while no update is running."""
        keep = {g.id for g in self.generations}
        removed = []
        gen_dir = self.root / GENERATIONS
        for entry in sorted(gen_dir.iterdir()) if gen_dir.is_dir() else []:
            if entry.name not in keep:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
                removed.append(entry.name)
        tmp = self.root / (CURRENT + ".tmp")
        if tmp.exists():
            tmp.unlink()
            removed.append(tmp.name)
        if removed:
            _fsync_dir(gen_dir)
            _fsync_dir(self.root)
        return removed

    def begin(self, label: str) -> PendingGeneration | None:
        """Starts adding the generation of build ``label`` (one process, before any writer): cleans
        leftovers, creates the pending directory. None when ``label`` is already in the index (a rerun
        after the switch: nothing to do)."""
        if label in self.labels:
            return None
        self.cleanup()
        pending = self.pending(label)
        pending.path.mkdir(parents=True)
        _fsync_dir(self.root / GENERATIONS)
        return pending

    def pending(self, label: str, compacted_from: tuple[str, ...] = ()) -> PendingGeneration:
        """The pending generation :meth:`begin` made (for the other writers: every process computes the
        same name from the same ``CURRENT``)."""
        gid = self._next_id()
        return PendingGeneration(self, gid, self.root / GENERATIONS / (gid + PARTIAL), (label,), compacted_from)

    def begin_compaction(self) -> PendingGeneration | None:
        """Starts merging every generation into one (None with fewer than two)."""
        if len(self.generations) < 2:
            return None
        self.cleanup()
        pending = self.pending_compaction()
        pending.path.mkdir(parents=True)
        _fsync_dir(self.root / GENERATIONS)
        return pending

    def pending_compaction(self) -> PendingGeneration:
        gid = self._next_id()
        return PendingGeneration(
            self, gid, self.root / GENERATIONS / (gid + PARTIAL), tuple(self.labels),
            tuple(g.id for g in self.generations),
        )

    def add_generation(
        self, label: str, batches: Iterable[np.ndarray], run_records: int = RUN_RECORDS
    ) -> PersistentIndex:
        """One process: the records of build ``label`` (batches of the record dtype, any order, any
        size) as a new generation; a rerun after the switch changes nothing."""
        pending = self.begin(label)
        if pending is None:
            return self
        with pending.writer(range(self.partitions), run_records) as writer:
            for rows in batches:
                writer.add(rows)
        return pending.commit()

    def compact(self, merge_records: int = MERGE_RECORDS) -> PersistentIndex:
        """One process: every generation merged into one (keep-first), switched to, the old ones removed."""
        pending = self.begin_compaction()
        if pending is None:
            return self
        pending.compact_partitions(range(self.partitions), merge_records)
        new = pending.commit()
        new.cleanup()
        return new

    def fork(self, new_root: Path | str) -> PersistentIndex:
        """A new index at ``new_root`` naming the same generations, their files hard-linked (copied
        across file systems), with its own ``CURRENT``: what a new build starts from (``--base``). The
        files are immutable, so sharing them is safe; updates of either index never touch the other.
        A kill leaves ``new_root`` without ``CURRENT``; the next fork starts it again."""
        new_root = Path(new_root)
        if (new_root / CURRENT).exists():
            raise FileExistsError(f"{new_root} already holds an index")
        gen_dir = new_root / GENERATIONS
        shutil.rmtree(gen_dir, ignore_errors=True)
        gen_dir.mkdir(parents=True)
        for g in self.generations:
            tmp = gen_dir / (g.id + PARTIAL)
            tmp.mkdir()
            copied = []
            for f in sorted(g.path.iterdir()):
                try:
                    os.link(f, tmp / f.name)
                except OSError:
                    shutil.copyfile(f, tmp / f.name)
                    copied.append(tmp / f.name)
            _fsync_files(copied)
            _fsync_dir(tmp)
            os.rename(tmp, gen_dir / g.id)
        _fsync_dir(gen_dir)
        _switch_pointer(new_root, self.pointer)
        return PersistentIndex.open(new_root, self.kind, self.params)

    def verify(self) -> None:
        """Checks the sha256 of every file of every generation (reads them all)."""
        for gen in self.generations:
            for p in range(self.partitions):
                part = gen.part(p)
                for name, sha in ((part["file"], part["sha256"]), (part["bloom_file"], part["bloom_sha256"])):
                    if _file_sha256(gen.path / name) != sha:
                        raise IndexDamaged(f"{gen.path / name}: sha256 differs from the manifest")


def _switch_pointer(root: Path, pointer: dict[str, Any]) -> None:
    tmp = root / (CURRENT + ".tmp")
    _write_bytes(tmp, _json_bytes(pointer))
    _point("pointer-written")
    os.replace(tmp, root / CURRENT)
    _fsync_dir(root)
    _point("switched")


@dataclass
class PendingGeneration:
    """A generation being written in ``<id>.partial``: filled by writers (one per range of partitions),
    then committed once, by one process."""

    index: PersistentIndex
    id: str
    path: Path
    labels: tuple[str, ...]
    compacted_from: tuple[str, ...] = ()

    def writer(self, parts: range | None = None, run_records: int = RUN_RECORDS) -> PartitionWriter:
        return PartitionWriter(self, parts if parts is not None else range(self.index.partitions), run_records)

    def compact_partitions(self, parts: range, merge_records: int = MERGE_RECORDS) -> None:
        """Merges partitions ``parts`` of every generation (oldest first wins) into this one."""
        gens = self.index.generations
        finisher = _Finisher(self)
        for p in parts:
            def write(out: _Output, p: int = p) -> None:
                _merge([g.map_part(p, self.index.record) for g in gens], out, True, merge_records)

            finisher.partition(p, write)
        finisher.flush()

    def commit(self) -> PersistentIndex:
        """Every partition complete -> manifest, fsync, rename, pointer switch. Returns the new index."""
        idx = self.index
        now = PersistentIndex.open(idx.root)
        if [g.id for g in now.generations] != [g.id for g in idx.generations]:
            raise RuntimeError(f"{idx.root}: the index changed while {self.id} was written (one update at a time)")
        parts, missing = [], []
        for p in range(idx.partitions):
            side = self.path / f"{_part_name(p)}.json"
            if side.exists():
                parts.append(json.loads(side.read_bytes()))
            else:
                missing.append(p)
        if missing:
            raise RuntimeError(f"{self.path}: partitions {missing[:10]} ({len(missing)} in all) are not written")
        manifest = {
            "format": FORMAT,
            "generation": self.id,
            "kind": idx.kind,
            "record": {"fields": [list(f) for f in idx.record.descr], "itemsize": idx.record.itemsize},
            "partition": {"key_bytes": [KINDS[idx.kind].partition_offset, KINDS[idx.kind].partition_offset + 8],
                          "rule": "floor(u * P / 2^64), u the big-endian uint64 of those key bytes"},
            "params": idx.params,
            "partitions": idx.partitions,
            "bloom": idx.bloom_spec.to_dict(),
            "labels": list(self.labels),
            "compacted_from": list(self.compacted_from),
            "records": sum(int(s["records"]) for s in parts),
            "parts": parts,
        }
        manifest_sha = _write_bytes(self.path / MANIFEST, _json_bytes(manifest))
        for p in range(idx.partitions):
            (self.path / f"{_part_name(p)}.json").unlink()
        shutil.rmtree(self.path / "runs", ignore_errors=True)
        _fsync_dir(self.path)
        _point("generation-staged")
        final = idx.root / GENERATIONS / self.id
        os.rename(self.path, final)
        _fsync_dir(idx.root / GENERATIONS)
        _point("generation-renamed")
        entries = [
            {"id": g.id, "manifest_sha256": hashlib.sha256((g.path / MANIFEST).read_bytes()).hexdigest(),
             "records": g.records, "labels": g.labels}
            for g in idx.generations
            if g.id not in self.compacted_from
        ]
        entries.append({"id": self.id, "manifest_sha256": manifest_sha, "records": manifest["records"],
                        "labels": list(self.labels)})
        _switch_pointer(idx.root, {**idx.pointer, "generations": entries})
        return idx.reopen()


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
        _point("run-spilled")

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
                    slices = [self._map_run(path, int(offs[i]), int(offs[i + 1])) for path, offs in self._runs]
                _merge(slices, out, False, self.run_records)

            finisher.partition(p, write)
        finisher.flush()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _map_run(self, path: Path, start: int, stop: int) -> np.ndarray:
        if stop == start:
            return np.zeros(0, dtype=self.record)
        return np.memmap(path, dtype=self.record, mode="r", offset=start * self.record.itemsize, shape=(stop - start,))


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
        name = _part_name(p)
        out = _Output(pending.path / f"{name}.rec")
        write(out)
        sha = out.close()
        bloom = BloomFilter.for_keys(out.count, idx.bloom_spec)
        mm = _map(out.path, idx.record, out.count)
        for at in range(0, out.count, HASH_RECORDS):
            bloom.add(_key_hash(_words(mm["key"][at : at + HASH_RECORDS])))
        del mm
        bloom_sha = _write_bytes(pending.path / f"{name}.bloom", bloom.to_bytes(), sync=False)
        self.done.append((p, {
            "records": out.count, "file": f"{name}.rec", "sha256": sha,
            "bloom_file": f"{name}.bloom", "bloom_sha256": bloom_sha, "bloom_bits": bloom.bits,
        }))
        _point("partition-written")
        if len(self.done) >= FSYNC_BATCH:
            self.flush()

    def flush(self) -> None:
        path = self.pending.path
        _fsync_files([path / side[f] for _, side in self.done for f in ("file", "bloom_file")])
        for p, side in self.done:
            _write_bytes(path / f"{_part_name(p)}.json", _json_bytes(side), sync=False)
        self.done = []


@dataclass(frozen=True)
class BaseGenerations:
    """A build's index of one kind as its base left it: only the generations of the builds it was forked
    from (:meth:`PersistentIndex.held_by`), so the build's own generation (committed when the build
    succeeds) never answers its own probe and a rerun of a stage decides as the first run did."""

    index: PersistentIndex
    digest: str  # of the base generations' pointer entries (ids, manifest sha256, labels)

    @property
    def probed(self) -> bool:
        """Whether there is a base to probe (a build without one only records its own keys)."""
        return bool(self.index.generations)

    @property
    def partitions(self) -> int:
        return self.index.partitions

    def part_of(self, key: bytes) -> int:
        return int(self.index.partition_of([key])[0])

    @classmethod
    def of_stage(cls, stage_directory: Path, kind: str, params: dict[str, Any]) -> BaseGenerations | None:
        """The ``kind`` index of the build ``stage_directory`` belongs to; None for a stage run on its own
        (or in a build made before builds kept that kind). :class:`IndexMismatch` for other key
        parameters, :class:`IndexMixed` for a compacted fork."""
        build = build_dir_of_stage(stage_directory)
        if build is None or not (dedup_index_dir(build, kind) / CURRENT).exists():
            return None
        record = dedup_base_path(build)
        index = PersistentIndex.open(dedup_index_dir(build, kind), kind, params)
        view = index.held_by(json.loads(record.read_text())["labels"] if record.exists() else [])
        return cls(view, json_digest(view.pointer["generations"]))

    def describe(self) -> dict[str, Any]:
        return {
            "partitions": self.partitions,
            "base": self.digest,
            "base_generations": [g.id for g in self.index.generations],
            "base_records": self.index.records,
        }
