"""The shuffle buffer: a shard's stream read with its documents permuted in windows of N.

With ``shuffle_buffer=N`` a shard's stream (its documents, or a version's selected ones, back to back)
is cut into windows of N consecutive documents, and each window is read in a permuted order: sorted by
a keyed hash of (seed, bucket, shard digest, window, place in the window). A window spans the same
stream positions in either order, so the sampler, the cursors, the checkpoint record and their
redistribution at any world size are untouched: only the map from a stream position to a document
changes, and it is a pure function of the shard and the seed. docs/loader.md, "Shuffle buffer".
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple, Protocol

import numpy as np

from corpus.model.digest import stable_hash64

#: Windows whose permuted layout a shuffled stream keeps (the reads of a chunk walk one window after another).
CACHED_WINDOWS = 8
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class StreamDocuments(Protocol):
    """What a shuffled stream needs of an open shard (:class:`loader.sequences.OpenShard`): its stream's
    documents in file order."""

    def stream_docs(self) -> int: ...

    def stream_doc_at(self, pos: int) -> int: ...

    def stream_spans(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...


class WindowLayout(NamedTuple):
    """A window's entries (documents, or pieces of them) in the order they are read: each one's file-order
    stream start, stream length, first .bin token and token count, and its start in the read stream;
    packing adds where its sequences end and what each entry is (:mod:`loader.packing`)."""

    starts: np.ndarray
    lens: np.ndarray
    tokens: np.ndarray
    bodies: np.ndarray
    placed: np.ndarray
    ends: np.ndarray | None = None
    flags: np.ndarray | None = None


class DocumentPart(NamedTuple):
    """Consecutive positions of one document in a read of the shuffled stream: its tokens, then (when the
    part reaches past them) the EOS appended after it."""

    at: int  # where the part lands, from the start of the read
    stream: int  # its first position in the file-order stream
    token: int  # the .bin index of its first token
    tokens: int  # how many of its positions are the document's tokens
    n: int  # its positions (tokens, then at most one appended EOS)
    starts_document: bool


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64 (wrapping arithmetic): a counter-based hash, the same everywhere."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def window_permutation(key: int, n: int) -> np.ndarray:
    """The order of a window's ``n`` documents: their places sorted by ``mix64(key + place·φ)``. Pure
    integer arithmetic (no RNG stream whose algorithm could change with numpy)."""
    counters = np.arange(n, dtype=np.uint64) * _GOLDEN + np.uint64(key)
    return np.argsort(mix64(counters), kind="stable")


class ShuffledStream:
    """A shard's stream in windowed-permuted document order, read as parts of its documents.

    Holds no reference to the shard (each call is given it), only the key and the last windows' layout.
    """

    def __init__(self, size: int, key: tuple[int | str, ...]) -> None:
        if size < 1:
            raise ValueError(f"a shuffle window holds at least one document, got {size}")
        self.size, self.key = int(size), key
        self._lock = threading.Lock()
        self._windows: OrderedDict[int, tuple[np.ndarray, ...]] = OrderedDict()

    def window(self, shard: StreamDocuments, w: int) -> WindowLayout:
        """Window ``w`` as it is read (:class:`WindowLayout`), computed on its first read and kept for the
        last :data:`CACHED_WINDOWS` windows."""
        with self._lock:  # the prefetch thread and a trace may read one shard at once
            if w in self._windows:
                self._windows.move_to_end(w)
                return self._windows[w]
        layout = self._layout(shard, w)
        with self._lock:
            self._windows[w] = layout
            if len(self._windows) > CACHED_WINDOWS:
                self._windows.popitem(last=False)
        return layout

    def _layout(self, shard: StreamDocuments, w: int) -> WindowLayout:
        """Window ``w``'s documents in their permuted order."""
        lo = w * self.size
        spans = shard.stream_spans(lo, min(lo + self.size, shard.stream_docs()))
        first = int(spans[0][0]) if spans[0].shape[0] else 0  # where the window begins, in either order
        order = window_permutation(stable_hash64("shuffle-buffer", *self.key, w), spans[0].shape[0])
        starts, lens, tokens, bodies = (np.asarray(a, dtype=np.int64)[order] for a in spans)
        placed = first + np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
        return WindowLayout(starts, lens, tokens, bodies, placed)

    def parts(self, shard: StreamDocuments, start: int, end: int) -> list[DocumentPart]:
        """Shuffled positions ``[start, end)`` as parts of documents, in the shuffled order; every part but
        the first starts at its document's start."""
        out: list[DocumentPart] = []
        pos = start
        while pos < end:
            starts, lens, tokens, bodies, placed = self.window(shard, self._window_of(shard, pos))[:5]
            k, before = int(np.searchsorted(placed, pos, side="right")) - 1, pos
            if k < 0:
                raise AssertionError(f"stream position {pos} is before its window")
            while k < placed.shape[0] and pos < end:
                within = pos - int(placed[k])
                n = min(int(lens[k]) - within, end - pos)
                if n > 0:
                    body = int(bodies[k])
                    t0, t1 = min(within, body), min(within + n, body)
                    part = DocumentPart(
                        pos - start, int(starts[k]) + within, int(tokens[k]) + t0, t1 - t0, n, not within
                    )
                    out.append(part)
                    pos += n
                k += 1
            if pos == before:
                raise AssertionError(f"stream position {pos} is in no window")
        return out

    def _window_of(self, shard: StreamDocuments, pos: int) -> int:
        """The window holding position ``pos``: the last one read when it does (no search of the index)."""
        with self._lock:
            last = next(reversed(self._windows.items()), None)
        if last is not None:
            w, layout = last
            lens, placed = layout.lens, layout.placed
            if placed.shape[0] and placed[0] <= pos < placed[-1] + lens[-1]:
                return w
        return self.document_index(shard, pos) // self.size

    def window_of_document(self, shard: StreamDocuments, k: int, start: int) -> int:
        """The window that reads file-order stream document ``k`` (which starts at ``start``)."""
        return k // self.size

    def stream_ranges(self, shard: StreamDocuments, k: int, start: int, n: int) -> list[tuple[int, int]]:
        """Where this stream reads the tokens of file-order document ``k`` (stream positions ``[start,
        start + n)`` in file order): each of its entries in its window, in stream order, EOS left out."""
        layout = self.window(shard, self.window_of_document(shard, k, start))
        mine = np.flatnonzero((layout.starts >= start) & (layout.starts < start + n) & (layout.bodies > 0))
        return sorted((int(layout.placed[e]), int(layout.placed[e] + layout.bodies[e])) for e in mine)

    def document_index(self, shard: StreamDocuments, pos: int) -> int:
        """The document (counted in the order this stream's windows take them) that holds ``pos``: the
        file order's, since a window covers the same positions in either order."""
        return shard.stream_doc_at(pos)

    def file_position(self, shard: StreamDocuments, pos: int) -> int:
        """The file-order stream position that shuffled position ``pos`` reads."""
        return self.parts(shard, pos, pos + 1)[0].stream


def shuffle_window(size: int | None) -> int:
    """The window a loader reads and records for ``shuffle_buffer=size``: 0 (off) for None, 0 and 1 (a
    window of one document is file order)."""
    if size is None:
        return 0
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"shuffle_buffer must be an integer >= 0, got {size!r}")
    return size if size > 1 else 0


def resume_problem(recorded: int, recorded_seed: int, window: int, seed: int, moving: bool) -> str:
    """Why a record's stream positions would name other documents under this shuffle ("" when they do
    not): another window, the same window under another seed, or a move between versions (its
    translation of positions assumes file order)."""
    if moving and (recorded or window):
        return (
            f"checkpoint was taken with shuffle_buffer {recorded}, this loader has {window}: a run moves "
            "between versions only with the shuffle buffer off on both sides"
        )
    if recorded != window:
        return (
            f"checkpoint was taken with shuffle_buffer {recorded}, this loader has {window}: its stream "
            f"positions would name other documents; resume with shuffle_buffer={recorded}"
        )
    if window and recorded_seed != seed:
        return (
            f"checkpoint was taken with seed {recorded_seed} and shuffle_buffer {window}, this loader has "
            f"seed {seed}: the shuffle is keyed by the seed, so its stream positions would name other "
            f"documents; resume with seed {recorded_seed}"
        )
    return ""
