"""Corrupt, missing and unreachable shards; what is verified when; how many shards stay open.

A block of a ``.bin`` is hashed the first time this process reads from it (whole-file sha256 for shards
without block digests); the ``.idx`` is checked on first open. A digest or format failure makes a shard
corrupt: it joins the skip set and its positions are read, modulo length, from a substitute chosen by
content alone, so a replay reads the same tokens. An ``OSError`` is never corruption: retried, then
:class:`ShardUnavailable`. Streams of one shard share its verification. Open shards live in an LRU
cache bounded by a memory budget. See docs/loader.md ("Verification, faults and open shards").
"""

from __future__ import annotations

import errno
import hashlib
import threading
import time
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from corpus.formats.block_layout import BlockLayout
from corpus.formats.megatron import BLOCK_DIGEST_BYTES, read_block_file
from corpus.model import SnapshotManifest
from corpus.model.digest import file_sha256, stable_hash64
from corpus.model.errors import UserError
from loader.packing import PackedStream
from loader.sequences import OpenShard, check_index
from loader.shuffle import ShuffledStream
from loader.sparse import DEFAULT_GAP_BYTES, byte_ranges, request

#: More than this fraction of the snapshot's shards skipped halts the loader.
DEFAULT_MAX_SKIP_FRACTION = 0.001
#: Mapped shard bytes the loader keeps open by default (pages it has read count toward its RSS).
DEFAULT_MEMORY_BUDGET_MB = 1024
#: One open shard per this much of the budget: 64 shards (128 descriptors) at the default budget.
BUDGET_PER_OPEN_SHARD = 16 << 20
#: Seconds to wait before each retry of a shard that could not be opened (an OSError).
DEFAULT_IO_RETRY_DELAYS = (1.0, 4.0, 16.0)


class TooManyCorruptShards(UserError):
    """The snapshot is damaged beyond what substitution should paper over."""


class ShardUnavailable(UserError):
    """A shard's files could not be opened after the retries: an I/O problem, not corruption."""


class SourcedPart(NamedTuple):
    """Positions ``[start, start + len(tokens))`` of shard ``shard``'s stream as read (``shard``: the file
    actually read, a substitute when the planned shard is corrupt), with the document starts inside."""

    shard: int
    start: int
    tokens: np.ndarray
    doc_starts: np.ndarray


class _Corrupt(Exception):
    """A block of a shard did not verify (internal: the store substitutes and reads again)."""


class _Unverified(Exception):
    """A range touches a block not verified yet (internal: it is then read sequence by sequence)."""


def cache_bounds(memory_budget_bytes: int) -> tuple[int, int]:
    """(open shards, mapped bytes) the cache may hold under a memory budget; at least two shards."""
    if memory_budget_bytes < 1:
        raise ValueError(f"memory budget must be positive, got {memory_budget_bytes} bytes")
    return max(2, memory_budget_bytes // BUDGET_PER_OPEN_SHARD), memory_budget_bytes


class ShardStore:
    def __init__(
        self,
        root: Path,
        manifest: SnapshotManifest,
        eos_id: int,
        append_eos: bool,
        max_skip_fraction: float = DEFAULT_MAX_SKIP_FRACTION,
        skipped: set[int] | None = None,
        log: Callable[[str], None] | None = None,
        memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_MB << 20,
        io_retry_delays: Sequence[float] = DEFAULT_IO_RETRY_DELAYS,
        selection: Callable[[int], np.ndarray] | None = None,
        gap_bytes: int = DEFAULT_GAP_BYTES,
        shuffle: tuple[int, int] = (0, 0),
        packing: tuple[int, int] = (0, 0),
    ) -> None:
        self.root, self.manifest = Path(root), manifest
        self.shuffle = shuffle  # (documents a window, seed): streams read shuffled (loader.shuffle)
        self.packing = packing  # (documents a window, seq_len): streams read in bin order (loader.packing)
        self._layouts: dict[int, OpenShard | None] = {}  # skipped shards' own layouts, for packing's bins
        self.gap_bytes = gap_bytes  # selected documents closer than this are one request (loader.sparse)
        self.selection = selection  # a version's bits of shard i (None: every document)
        self.eos_id, self.append_eos = eos_id, append_eos
        self.max_skip_fraction = max_skip_fraction
        self.skipped: set[int] = set(skipped or ())
        self.log = log or (lambda msg: None)
        self.max_open, self.max_mapped = cache_bounds(memory_budget_bytes)
        self.io_retry_delays = tuple(io_retry_delays)
        self._open: OrderedDict[int, OpenShard] = OrderedDict()  # the LRU cache, oldest first
        self._mapped = 0
        self._substitute: dict[int, int] = {}
        self._index_ok: set[str] = set()  # shard files whose index (and whole file, if no blocks) verified
        self._verified: dict[str, np.ndarray] = {}  # shard file -> bool per block: hashed and matched
        self._digests: dict[str, np.ndarray] = {}  # shard file -> (blocks, 32) sha256, read on first open
        self._layouts: dict[str, BlockLayout] = {}  # shard file -> where its blocks lie
        self.bytes_hashed = 0  # .bin bytes this process hashed (block and whole-file checks)
        self.opens = 0  # shard opens (first opens and reopens after eviction)
        self.cache_hits = 0  # reads of a shard already open
        self._spans: dict[int, tuple[int, int, np.ndarray, np.ndarray, list[int]]] = {}  # see _keep_span
        self.bytes_read = 0  # .bin bytes the read requests covered (coalesced: gaps included)
        # held by every read: the prefetch thread (loader.prefetch) and the consumer share the store
        self.lock = threading.RLock()
        # called with (shard, start, end) before every read: where a test or benchmark injects latency
        self.before_read: Callable[[int, int, int], None] | None = None
        self._check_budget()

    def paths(self, i: int) -> tuple[Path, Path]:
        shard = self.manifest.shards[i]
        bin_path = self.root / shard.path
        idx_rel = shard.files.get("idx")
        return bin_path, (self.root / idx_rel if idx_rel else bin_path.with_suffix(".idx"))

    @property
    def open_shards(self) -> int:
        return len(self._open)

    @property
    def mapped_bytes(self) -> int:
        return self._mapped

    # --- opening ------------------------------------------------------------------------------------

    def _get(self, i: int) -> OpenShard | None:
        """Shard ``i`` open and format-checked, or None (and it joins the skip set) when it is corrupt."""
        if i in self.skipped:
            return None
        if i in self._open:
            self._open.move_to_end(i)
            self.cache_hits += 1
            return self._open[i]
        opened = self._open_with_retries(i)
        reason = self._format_problem(i, opened)
        if reason:
            self._mark_corrupt(i, reason)
            return None
        self._open[i] = opened
        self._mapped += opened.mapped_bytes
        self._evict(keep=i)
        return opened

    def _open_with_retries(self, i: int) -> OpenShard | Exception:
        """The opened shard, or the format error (ValueError...) that makes it corrupt; OSError is retried."""
        bin_path, idx_path = self.paths(i)
        for attempt, delay in enumerate((*self.io_retry_delays, None)):
            try:
                self.opens += 1
                selected = self.selection(i) if self.selection is not None else None
                return OpenShard(
                    bin_path, idx_path, self.eos_id, self.append_eos, selected, self._shuffled(i)
                )
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    self.close_all()  # our own cached handles are the ones we can give back
                if delay is None:
                    raise ShardUnavailable(
                        f"shard {self.manifest.shards[i].path} could not be opened after {attempt + 1} "
                        f"attempts: {e}; it is not marked corrupt (fix the filesystem and resume)"
                    ) from e
                self.log(f"shard {self.manifest.shards[i].path}: {e}; retrying in {delay:g}s")
                time.sleep(delay)
            except (ValueError, KeyError) as e:  # a malformed index or .bin: the data is bad
                return e
        raise AssertionError("unreachable")

    def _shuffled(self, i: int) -> ShuffledStream | None:
        """Shard ``i``'s stream order: windows keyed by the seed, its bucket and its content, then packed
        in bins when packing is on (None: file order)."""
        size, seed = self.shuffle
        shard = self.manifest.shards[i]
        shuffled = ShuffledStream(size, (seed, shard.bucket, shard.sha256)) if size else None
        window, seq_len = self.packing
        return PackedStream(window, seq_len, shuffled) if window else shuffled

    def _format_problem(self, i: int, opened: OpenShard | Exception) -> str:
        """Why shard ``i`` is corrupt as opened ("" when it is not); first open only for the costly checks."""
        if isinstance(opened, Exception):
            return f"unreadable index: {opened}"
        shard = self.manifest.shards[i]
        if opened.num_docs != shard.docs or opened.num_tokens != shard.tokens:
            return (
                f"index says {opened.num_docs} docs / {opened.num_tokens} tokens, manifest {shard.docs} / "
                f"{shard.tokens}"
            )
        if shard.path in self._index_ok:
            return ""
        index_reason = None  # checked before the blocks where their layout is the index's
        if shard.block_sha256 or shard.blocks_sha256:
            try:
                digests = self._block_digests(i)
            except (OSError, ValueError) as e:
                return f"block digests: {e}"
            if shard.block_layout:  # the documents layout's blocks are the index's: it must be sound
                index_reason = check_index(opened)
                if index_reason:
                    return index_reason
            n_blocks = self._layout(i, opened).count if shard.block_size > 0 else -1
            if n_blocks != len(digests):
                layout = f" ({shard.block_layout} layout)" if shard.block_layout else ""
                return (
                    f".bin of {opened.bin_size} bytes has {n_blocks} blocks of {shard.block_size}{layout}, "
                    f"the manifest {len(digests)} digests"
                )
        else:  # a snapshot written before block digests: the whole file, once
            self.bytes_hashed += opened.bin_size
            if file_sha256(self.paths(i)[0]) != shard.sha256.removeprefix("sha256:"):
                return "sha256 mismatch"
        reason = check_index(opened) if index_reason is None else index_reason
        if not reason:
            self._index_ok.add(shard.path)
        return reason

    def _mark_corrupt(self, i: int, reason: str) -> None:
        shard = self.manifest.shards[i]
        self.skipped.add(i)
        self._close(i)
        self.log(f"shard {shard.path} skipped ({reason}); reading a substitute from bucket {shard.bucket}")
        self._check_budget()

    def _close(self, i: int) -> None:
        opened = self._open.pop(i, None)
        if opened is not None:
            self._mapped -= opened.mapped_bytes  # the mapping goes when its last view does

    def _evict(self, keep: int) -> None:
        while len(self._open) > 1 and (len(self._open) > self.max_open or self._mapped > self.max_mapped):
            oldest = next(iter(self._open))
            if oldest == keep:
                break
            self._close(oldest)

    def close_all(self) -> None:
        """Drop every cached shard (they reopen on demand; verified blocks stay verified)."""
        for i in list(self._open):
            self._close(i)

    def _check_budget(self) -> None:
        n = len(self.manifest.shards)
        if n and len(self.skipped) > self.max_skip_fraction * n:
            names = ", ".join(dict.fromkeys(self.manifest.shards[i].path for i in sorted(self.skipped)))
            raise TooManyCorruptShards(
                f"{len(self.skipped)} of {n} snapshot shards are corrupt or missing "
                f"(limit {self.max_skip_fraction:.2%}): {names}; repair the snapshot or raise max_skip_fraction"
            )

    # --- verification -------------------------------------------------------------------------------

    def _block_digests(self, i: int) -> np.ndarray:
        """Shard ``i``'s block digests as (blocks, 32) bytes: its ``.blocks`` file, checked against the
        manifest's digest of it (read once per process: a rank reads the digests of the shards it
        reads), or the manifest's own list in a snapshot written before the file."""
        shard = self.manifest.shards[i]
        if shard.path not in self._digests:
            if shard.blocks_sha256:
                digests = read_block_file(self.root / shard.files["blocks"], shard.blocks_sha256)
            else:
                digests = np.frombuffer(b"".join(bytes.fromhex(h) for h in shard.block_sha256), np.uint8)
            self._digests[shard.path] = digests.reshape(-1, BLOCK_DIGEST_BYTES)
        return self._digests[shard.path]

    def _layout(self, i: int, opened: OpenShard) -> BlockLayout:
        """Where shard ``i``'s blocks lie (computed once per process from its index)."""
        shard = self.manifest.shards[i]
        if shard.path not in self._layouts:
            index = opened.index
            self._layouts[shard.path] = BlockLayout.of(
                shard.block_layout,
                shard.block_size,
                opened.bin_size,
                index.offsets,
                index.lengths,
                opened.itemsize,
            )
        return self._layouts[shard.path]

    def _verify_blocks(self, i: int, opened: OpenShard, lo: int, hi: int) -> None:
        """Hash the blocks of the .bin holding tokens ``[lo, hi)`` that this process has not hashed yet."""
        shard = self.manifest.shards[i]
        if not (shard.block_sha256 or shard.blocks_sha256) or hi <= lo:
            return  # no block digests: the whole file was verified on first open
        layout = self._layout(i, opened)
        digests = self._block_digests(i)
        done = self._verified.get(shard.path)
        if done is None:
            done = self._verified[shard.path] = np.zeros(len(digests), dtype=bool)
        for b in layout.covering(lo * opened.itemsize, hi * opened.itemsize):
            if done[b]:
                continue
            start, end = layout.span(b)
            request(opened.mapping, opened.raw, [start], [end])  # one request
            block = opened.raw[start:end]
            self.bytes_hashed += block.shape[0]
            if hashlib.sha256(block).digest() != digests[b].tobytes():
                self._mark_corrupt(i, f"block {b} sha256 mismatch")
                raise _Corrupt(i)
            done[b] = True

    def _require_verified(self, i: int, opened: OpenShard, lo: int, hi: int) -> None:
        """Raise :class:`_Unverified` unless every block holding tokens ``[lo, hi)`` is verified already."""
        shard = self.manifest.shards[i]
        if not (shard.block_sha256 or shard.blocks_sha256) or hi <= lo:
            return
        done = self._verified.get(shard.path)
        if done is None:
            raise _Unverified
        blocks = self._layout(i, opened).covering(lo * opened.itemsize, hi * opened.itemsize)
        if not done[blocks.start : blocks.stop].all():
            raise _Unverified

    def _checked_read(self, i: int, opened: OpenShard, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        return opened.read(start, end, check=lambda lo, hi: self._verify_blocks(i, opened, lo, hi))

    # --- substitution and reading -------------------------------------------------------------------

    def substitute(self, i: int) -> int:
        """The shard whose data stands in for shard ``i`` (``i`` itself when it is sound so far)."""
        return self._source(i)[0]

    def _source(self, i: int) -> tuple[int, OpenShard]:
        opened = self._get(i)
        if opened is not None:
            return i, opened
        j = self._substitute.get(i)
        if j is not None and (sub := self._get(j)) is not None:
            return j, sub
        keys = self.manifest.shard_keys()
        bad = keys[i]
        candidates = sorted(
            (j for j, s in enumerate(keys) if s.bucket == bad.bucket and j != i),
            key=lambda j: stable_hash64("substitute", bad.sha256, keys[j].sha256),
        )
        for j in candidates:
            sub = self._get(j)
            if sub is not None and sub.stream_len > 0:
                self._substitute[i] = j
                return j, sub
        raise TooManyCorruptShards(
            f"shard {bad.path} is corrupt and bucket {bad.bucket} has no sound shard left"
        )

    def fetch(self, i: int, start: int, end: int) -> None:
        """Request from the filesystem the ``.bin`` bytes that reading stream positions ``[start, end)`` of
        shard ``i`` needs (its selected documents', coalesced: :mod:`loader.sparse`), and count them in
        ``bytes_read``. A step fetches each of its merged ranges once, then reads its sequences'
        ranges with ``fetched=True``. A corrupt shard's substitute is counted as it is read."""
        with self.lock:
            if self.before_read is not None:
                self.before_read(i, start, end)
            j, opened = self._source(i)
            if j == i:
                self._request(opened, start, end)
                self._keep_span(i, opened, start, end)

    SPANS = 8  # fetched ranges kept read (each until its last part is read)

    def _keep_span(self, i: int, opened: OpenShard, start: int, end: int) -> None:
        """Read a fetched range of shard ``i`` in one go when every block it comes from is verified already
        (a plain or selected stream): a step's reads of its parts are then slices of it (:meth:`_span_part`),
        the same tokens and document starts. Otherwise its parts are read (and verified) one by one."""
        if len(self._spans) >= self.SPANS:
            self._spans.clear()
        self._spans.pop(i, None)
        if opened.shuffled is not None or end <= start:
            return
        try:
            tokens, starts = opened.read(
                start, end, check=lambda lo, hi: self._require_verified(i, opened, lo, hi)
            )
        except _Unverified:
            return
        self._spans[i] = (start, end, tokens, starts, starts.tolist())

    def _span_part(self, i: int, start: int, end: int) -> SourcedPart | None:
        """Positions ``[start, end)`` of shard ``i`` sliced from a range :meth:`_keep_span` read, or None."""
        span = self._spans.get(i)
        if span is None or not span[0] <= start <= end <= span[1]:
            return None
        at, stop, tokens, starts, listed = span
        if end == stop:  # the step's last part of it: let it go
            del self._spans[i]
        lo, hi = bisect_left(listed, start - at), bisect_left(listed, end - at)
        return SourcedPart(i, start, tokens[start - at : end - at], starts[lo:hi] - (start - at))

    def _request(self, opened: OpenShard, start: int, end: int) -> None:
        lo, hi = byte_ranges(opened, start, end, self.gap_bytes)
        self.bytes_read += sum(hi) - sum(lo)
        request(opened.mapping, opened.raw, lo, hi)

    def read(self, i: int, start: int, end: int, fetched: bool = False) -> list[SourcedPart]:
        """Stream positions ``[start, end)`` of shard ``i`` (or of its substitute), as parts that say where
        they were read: the one place that decides which file a delivered token comes from, so the loader's
        batches and ``corpus trace`` (:meth:`loader.SnapshotLoader.traced_batch`) cannot disagree.
        ``fetched``: :meth:`fetch` already requested (and counted) the range.

        Every block the parts come from is verified first; a block that fails makes its shard corrupt
        and the read starts again from the next substitute, so nothing unverified is returned.
        """
        with self.lock:
            if not fetched:
                self.fetch(i, start, end)
            return self._read(i, start, end)

    def read_fetched(
        self, segments: Sequence[Sequence[tuple[int, int, int]]]
    ) -> tuple[tuple[SourcedPart, ...], ...]:
        """:meth:`read` of each sequence's ``(shard, start, end)`` ranges, already fetched (a step's
        ranges), under one hold of the lock; a range a kept span of its open, sound shard holds is sliced
        from it without :meth:`_read`'s loop (what it would do: the same part, the same cache hit)."""
        out = []
        with self.lock:
            for ranges in segments:
                parts: list[SourcedPart] = []
                for i, start, end in ranges:
                    if i in self._open and i not in self.skipped and (part := self._span_part(i, start, end)):
                        self._get(i)  # its cache hit, as _read's _source would count it
                        parts.append(part)
                    else:
                        parts += self._read(i, start, end)
                out.append(tuple(parts))
        return tuple(out)

    def _read(self, i: int, start: int, end: int) -> list[SourcedPart]:
        while True:
            j, shard = self._source(i)
            try:
                if j == i:
                    part = self._span_part(i, start, end)
                    return [part or SourcedPart(j, start, *self._checked_read(j, shard, start, end))]
                parts = []
                n = shard.stream_len
                pos = start
                while pos < end:  # positions map onto the substitute modulo its length
                    a = pos % n
                    b = min(n, a + (end - pos))
                    self._request(shard, a, b)
                    parts.append(SourcedPart(j, a, *self._checked_read(j, shard, a, b)))
                    pos += b - a
                return parts
            except _Corrupt:
                continue

    # --- packing's bins ------------------------------------------------------------------------------

    def _layout_of(self, i: int) -> OpenShard | None:
        """Shard ``i`` as its own index lays it out, whether or not a block of it was found corrupt (what
        packing's bins are planned from, so a plan never depends on when corruption was found); None
        when its index is unusable, a fact of its files alone. Marks nothing corrupt."""
        if i in self._open:
            return self._open[i]
        if i not in self._layouts:
            opened = self._open_with_retries(i)
            ok = not self._format_problem(i, opened)
            if ok and i not in self.skipped:
                self._open[i] = opened
                self._mapped += opened.mapped_bytes
                self._evict(keep=i)
                return opened
            self._layouts[i] = opened if ok else None
        return self._layouts[i]

    def bin_end(self, i: int, pos: int) -> int | None:
        """Where the packing bin holding stream position ``pos`` of shard ``i`` ends (None: shard ``i``'s
        index is unusable, so it has no bins and its positions are taken as they come)."""
        with self.lock:
            opened = self._layout_of(i)
            return opened.shuffled.bin_end(opened, pos) if opened is not None else None

    def packing_counts(self, i: int, start: int, end: int) -> tuple[int, int, int] | None:
        """:meth:`loader.packing.PackedStream.counts` of shard ``i``'s positions ``[start, end)``."""
        with self.lock:
            opened = self._layout_of(i)
            return opened.shuffled.counts(opened, start, end) if opened is not None else None

    def stream_ranges(self, j: int, doc: int) -> list[tuple[int, int]]:
        """:meth:`loader.sequences.OpenShard.stream_ranges` of stream ``j`` as its index lays it out (the
        positions the sampler plans, whether or not the shard was found corrupt); [] when the index is
        unusable."""
        with self.lock:
            opened = self._layout_of(j)
        return opened.stream_ranges(doc) if opened is not None else []

    def document_at(self, j: int, pos: int) -> tuple[int, int, bool]:
        """:meth:`loader.sequences.OpenShard.document_at` of shard ``j`` (a shard a part was read from)."""
        with self.lock:
            opened = self._get(j)
        if opened is None:
            raise ValueError(f"shard {self.manifest.shards[j].path} was found corrupt after it was read")
        return opened.document_at(pos)
