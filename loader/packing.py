"""Best-fit packing: whole documents into sequences, chosen from a bounded window of upcoming ones.

With ``packing_window=N`` (0, the default: off, plain concatenation) a sequence is filled with whole
documents of the rank's bucket stream, a document longer than ``seq_len`` as ``seq_len`` pieces and a
rest: while one fits, the longest piece of the window (the next N, earliest on ties) that fits the
room left, then padding. Documents come through the rank's cursor in the sampler's order and the
choice is arithmetic on their lengths, so the sequences are a pure function of (seed, step, rank).
The window is not in the checkpoint record: while packing is on, a checkpoint (and a trace) is
refused with :class:`PackingNotResumable`. docs/loader.md, "Packing".
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from corpus.model.errors import UserError
from loader.faults import ShardStore
from loader.sampler import choose_bucket, rank_point, run_of
from loader.sequences import Batch, make_batch
from loader.state import RankCursor


class PackingNotResumable(UserError):
    """A checkpoint or trace asked of a loader that packs: its window of documents is not recorded."""


def refuse_with_packing(packer: Packer | None, what: str) -> None:
    """Raise :class:`PackingNotResumable` for ``what`` (a checkpoint, a trace) when ``packer`` is on."""
    if packer is not None:
        raise PackingNotResumable(
            f"{what} with packing on (packing_window={packer.window}) is not supported yet: the packing "
            "window is not part of the loader record; checkpoint a loader with packing_window=0"
        )


def make_packer(window: int, seq_len: int, recipe: object | None) -> Packer | None:
    """The packer of a loader made with ``packing_window=window`` (None: 0, plain concatenation)."""
    if window < 0:
        raise ValueError(f"packing_window must be >= 0, got {window}")
    if window and recipe is not None:
        raise UserError("packing_window with a recipe is not supported yet (phases change seq_len)")
    return Packer(window, seq_len) if window else None


def best_fit(lengths: list[int], room: int) -> int | None:
    """Index of the longest length that fits ``room`` (the earliest of equals); None when none fits."""
    best = None
    for i, n in enumerate(lengths):
        if n <= room and (best is None or n > lengths[best]):
            best = i
    return best


def packed_row(
    pieces: list[np.ndarray], seq_len: int, pad_id: int
) -> tuple[np.ndarray, np.ndarray, np.int64]:
    """Tokens, boundaries (0, every piece's end, seq_len) and valid length of one packed sequence."""
    ends = np.cumsum([p.shape[0] for p in pieces], dtype=np.int64)
    tokens = np.full(seq_len, pad_id, dtype=np.int64)
    tokens[: int(ends[-1])] = np.concatenate(pieces)
    bounds = np.unique(np.concatenate(([0], ends, [seq_len]))).astype(np.int64)
    return tokens, bounds, np.int64(ends[-1])


@dataclass
class PackingStats:
    """What packing cost so far: padding, documents cut, fragments (documents whose head another chunk has)."""

    sequences: int = 0
    placed: int = 0  # real tokens placed in sequences
    documents: int = 0  # documents (and fragments) that entered the window
    cut: int = 0  # of them, longer than seq_len: cut into seq_len pieces
    fragments: int = 0  # of them, starting mid-document (a chunk boundary cut it)
    pieces: int = 0
    piece_tokens: int = 0

    def as_metrics(self, window: int, seq_len: int) -> dict[str, Any]:
        capacity = self.sequences * seq_len
        return {
            "packing_window": window,
            "packing_sequences": self.sequences,
            "packing_padding_rate": 1 - self.placed / capacity if capacity else 0.0,
            # one piece per sequence, padded: what packing saves
            "packing_naive_padding_rate": (
                1 - self.piece_tokens / (self.pieces * seq_len) if self.pieces else 0.0
            ),
            "packing_documents": self.documents,
            "packing_truncation_rate": self.cut / self.documents if self.documents else 0.0,
            "packing_fragment_rate": self.fragments / self.documents if self.documents else 0.0,
        }


class DocumentFeed:
    """One bucket's stream on this rank as documents: ranges pulled through the cursor, read through the
    store, cut at document starts; a document is complete when the next one starts, when the next range
    is not contiguous with it, or when the bucket ends."""

    def __init__(self, bucket: str, seq_len: int, stats: PackingStats) -> None:
        self.bucket, self.seq_len, self.stats = bucket, seq_len, stats
        self.window: list[np.ndarray] = []
        self.open: list[np.ndarray] = []  # the document being read: its parts so far
        self.open_fragment = False
        self.last: tuple[int, int] | None = None  # (shard, end) of the last range read

    def fill(self, cursor: RankCursor, store: ShardStore, size: int) -> None:
        """Read until the window holds ``size`` pieces or the bucket has nothing left."""
        while len(self.window) < size and self.bucket in cursor.active:
            segments, _ = cursor.take(self.bucket, self.seq_len)
            for shard, a, b in segments:
                self._add_range(store, shard, a, b)
        if self.bucket not in cursor.active:
            self._close()

    def _add_range(self, store: ShardStore, shard: int, a: int, b: int) -> None:
        contiguous = self.last == (shard, a)
        self.last = (shard, b)
        for part in store.read(shard, a, b):
            self._add_part(part.tokens, [int(s) for s in part.doc_starts], contiguous)
            contiguous = True

    def _add_part(self, tokens: np.ndarray, starts: list[int], contiguous: bool) -> None:
        if tokens.shape[0] and (not starts or starts[0] != 0):
            if not contiguous:
                self._close()
                self.open_fragment = True
            self.open.append(tokens[: starts[0] if starts else tokens.shape[0]])
        for lo, hi in pairwise([*starts, tokens.shape[0]]):
            self._close()
            self.open.append(tokens[lo:hi])

    def _close(self) -> None:
        """The open document is complete: into the window, as ``seq_len`` pieces if it is longer."""
        if not self.open:
            return
        doc = np.concatenate(self.open)
        pieces = [doc[i : i + self.seq_len] for i in range(0, doc.shape[0], self.seq_len)]
        s = self.stats
        s.documents, s.cut, s.fragments = (
            s.documents + 1,
            s.cut + (len(pieces) > 1),
            s.fragments + self.open_fragment,
        )
        s.pieces, s.piece_tokens = s.pieces + len(pieces), s.piece_tokens + doc.shape[0]
        self.window.extend(pieces)
        self.open, self.open_fragment = [], False

    def next_sequence(self, cursor: RankCursor, store: ShardStore, size: int) -> list[np.ndarray]:
        """The pieces of the next sequence, best fit from the window; empty when the bucket is done."""
        room, chosen = self.seq_len, []
        while room:
            self.fill(cursor, store, size)
            i = best_fit([p.shape[0] for p in self.window], room)
            if i is None:
                break
            chosen.append(self.window.pop(i))
            room -= chosen[-1].shape[0]
        return chosen


class Packer:
    """A loader's packed steps: each step's bucket from the mixture schedule, as plain steps choose it,
    its sequences packed from that bucket's :class:`DocumentFeed`."""

    def __init__(self, window: int, seq_len: int) -> None:
        self.window, self.seq_len = int(window), int(seq_len)
        self.stats = PackingStats()
        self.feeds: dict[str, DocumentFeed] = {}
        self.cursor: RankCursor | None = None

    def _feed(self, bucket: str) -> DocumentFeed:
        if bucket not in self.feeds:
            self.feeds[bucket] = DocumentFeed(bucket, self.seq_len, self.stats)
        return self.feeds[bucket]

    def next_batch(self, loader: Any) -> Batch | None:
        """The next step of ``loader`` (a :class:`loader.SnapshotLoader`), packed; None when it is done."""
        cursor = loader.cursor
        if cursor is not self.cursor:  # a resume replaced the cursor: the windows read from the old one go
            self.cursor, self.feeds = cursor, {}
        point = rank_point(loader.seed, run_of(cursor.step, loader.run_len), loader.rank, cursor.plan.world)
        rows, buckets = [], []
        while len(rows) < loader.batch_size:
            live = cursor.active | {b for b, f in self.feeds.items() if f.window}
            bucket = choose_bucket(point, loader.mixture, live)
            if bucket is None:
                break
            pieces = self._feed(bucket).next_sequence(cursor, loader.store, self.window)
            if pieces:
                rows.append(packed_row(pieces, self.seq_len, loader.eos_id))
                buckets.append(bucket)
                self.stats.sequences += 1
                self.stats.placed += int(rows[-1][2])
        if not rows:
            return None
        cursor.step += 1
        return make_batch(rows, tuple(buckets), cursor.step - 1, self.seq_len)

    def metrics(self) -> dict[str, Any]:
        return self.stats.as_metrics(self.window, self.seq_len)
