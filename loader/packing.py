"""Best-fit packing as an order of each shard's stream: whole documents into sequences, exactly resumable.

With ``packing_window=N`` (0, the default: off) a shard's stream is cut into windows of N consecutive
documents (in the order the shard is read: file order, or the shuffle buffer's), each document into
``seq_len`` pieces and a rest, and each window is read in *bin order*: its pieces best-fit into bins of
``seq_len`` positions, bin after bin. A window covers the same stream positions in either order, so
the sampler, the cursors, the record and its redistribution are untouched; a sequence takes whole bins
(what is left of one where a chunk cuts it) while they fit. Which tokens form which sequence is then a
pure function of the shard and its positions, not of a rank's history. docs/loader.md, "Packing".
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

import numpy as np

from loader.shuffle import ShuffledStream, StreamDocuments, WindowLayout

#: ``WindowLayout.flags``: the entry is its document's first piece; its document was cut into pieces.
FIRST_PIECE, CUT_DOCUMENT = 1, 2


def best_fit_bins(lengths: list[int], capacity: int) -> list[list[int]]:
    """Indices of ``lengths`` (each at most ``capacity``) in bins: each bin takes, while one fits, the
    longest length left that fits its room (the earliest of equals). Integer arithmetic, no ties left."""
    m = len(lengths) + 1
    keys = sorted(n * m + (m - 1 - i) for i, n in enumerate(lengths))  # by length, then earliest first
    bins: list[list[int]] = []
    while keys:
        room, chosen = capacity, []
        while keys and (j := bisect_right(keys, room * m + m - 1) - 1) >= 0:
            i = m - 1 - keys.pop(j) % m
            chosen.append(i)
            room -= lengths[i]
        bins.append(chosen)
    return bins


class PackedStream(ShuffledStream):
    """A shard's stream read in bin order, window by window (over ``inner``'s order when the shuffle
    buffer is on); its layouts carry the bins' ends and each piece's flags."""

    def __init__(self, size: int, seq_len: int, inner: ShuffledStream | None = None) -> None:
        super().__init__(size, ("packing", int(seq_len)))
        self.seq_len, self.inner = int(seq_len), inner

    def document_index(self, shard: StreamDocuments, pos: int) -> int:
        if self.inner is None:
            return shard.stream_doc_at(pos)
        w = self.inner._window_of(shard, pos)
        placed = self.inner.window(shard, w).placed
        return w * self.inner.size + int(np.searchsorted(placed, pos, side="right")) - 1

    def window_of_document(self, shard: StreamDocuments, k: int, start: int) -> int:
        """Windows take documents in ``inner``'s order when the shuffle buffer is on."""
        if self.inner is None:
            return k // self.size
        w = self.inner.window_of_document(shard, k, start)
        at = int(np.flatnonzero(self.inner.window(shard, w).starts == start)[0])
        return (w * self.inner.size + at) // self.size

    def _documents(self, shard: StreamDocuments, lo: int, hi: int) -> WindowLayout:
        """Documents ``lo..hi-1`` in the order the shard is read, each where that order places it."""
        if self.inner is None:
            spans = [np.asarray(a, dtype=np.int64) for a in shard.stream_spans(lo, hi)]
            return WindowLayout(*spans, spans[0])
        size = self.inner.size
        windows = [self.inner.window(shard, w) for w in range(lo // size, (hi - 1) // size + 1)]
        cut = slice(lo - lo // size * size, hi - lo // size * size)
        return WindowLayout(
            *(np.concatenate([getattr(x, f) for x in windows])[cut] for f in WindowLayout._fields[:5])
        )

    def _layout(self, shard: StreamDocuments, w: int) -> WindowLayout:
        """Window ``w``'s pieces in bin order; odd windows put their last (least full) bin first, so that
        it follows the last bin of the window before and the two share a sequence when they fit."""
        lo = w * self.size
        docs = self._documents(shard, lo, min(lo + self.size, shard.stream_docs()))
        first, n = (int(docs.placed[0]), docs.lens) if docs.lens.shape[0] else (0, docs.lens)
        count = -(-n // self.seq_len)
        doc = np.repeat(np.arange(n.shape[0]), count)
        q = np.arange(doc.shape[0], dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        skip = q * self.seq_len
        lens = np.minimum(self.seq_len, n[doc] - skip)
        flags = np.where(q == 0, FIRST_PIECE, 0) | np.where(n[doc] > self.seq_len, CUT_DOCUMENT, 0)
        bins = best_fit_bins(lens.tolist(), self.seq_len)
        if w % 2 and len(bins) > 1:
            bins = [bins[-1], *bins[:-1]]
        order = np.array([i for b in bins for i in b], dtype=np.int64)
        lens, doc, skip = lens[order], doc[order], skip[order]
        placed = first + np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
        bin_starts = np.cumsum([0] + [len(b) for b in bins[:-1]])
        ends = placed[bin_starts] + np.add.reduceat(lens, bin_starts) if bins else placed
        bodies = np.clip(docs.bodies[doc] - skip, 0, lens)
        tokens = docs.tokens[doc] + np.minimum(skip, docs.bodies[doc])
        return WindowLayout(docs.starts[doc] + skip, lens, tokens, bodies, placed, ends, flags[order])

    def bin_end(self, shard: StreamDocuments, pos: int) -> int:
        """Where the bin holding stream position ``pos`` ends."""
        ends = self.window(shard, self._window_of(shard, pos)).ends
        return int(ends[int(np.searchsorted(ends, pos, side="right"))])

    def counts(self, shard: StreamDocuments, a: int, b: int) -> tuple[int, int, int]:
        """Of the range ``[a, b)``: documents whose first piece starts in it, of them those cut into
        pieces, and 1 when it starts inside a piece (a chunk boundary cut a bin there), else 0."""
        docs = cut = fragment = 0
        pos = a
        while pos < b:
            layout = self.window(shard, self._window_of(shard, pos))
            lo, hi = (int(k) for k in np.searchsorted(layout.placed, (pos, b), side="left"))
            if pos == a:
                fragment = int(lo == layout.placed.shape[0] or int(layout.placed[lo]) != a)
            f = layout.flags[lo:hi]
            docs += int(np.count_nonzero(f & FIRST_PIECE))
            cut += int(np.count_nonzero(f == FIRST_PIECE | CUT_DOCUMENT))  # a cut document's first piece
            pos = int(layout.placed[-1] + layout.lens[-1])
        return docs, cut, fragment


@dataclass
class PackingStats:
    """What packing cost so far on this rank: padding, pieces, documents cut and fragments delivered."""

    window: int
    seq_len: int
    sequences: int = 0
    placed: int = 0  # real tokens delivered in sequences
    pieces: int = 0  # pieces (and parts of pieces) delivered: one boundary each
    documents: int = 0  # documents whose first piece was delivered
    cut: int = 0  # of them, longer than seq_len: cut into seq_len pieces
    fragments: int = 0  # sequence parts that begin inside a piece (a chunk boundary cut its bin)

    def add_row(self, pieces: int, valid: int) -> None:
        """A delivered sequence: its boundaries among its valid tokens, and how many those are."""
        self.sequences += 1
        self.placed += valid
        self.pieces += pieces

    def add_range(self, counts: tuple[int, int, int] | None) -> None:
        if counts is not None:
            self.documents, self.cut, self.fragments = (
                self.documents + counts[0],
                self.cut + counts[1],
                self.fragments + counts[2],
            )

    def as_metrics(self) -> dict[str, Any]:
        capacity = self.sequences * self.seq_len
        return {
            "packing_window": self.window,
            "packing_sequences": self.sequences,
            "packing_padding_rate": 1 - self.placed / capacity if capacity else 0.0,
            # one piece per sequence, padded: what packing saves
            "packing_naive_padding_rate": (
                1 - self.placed / (self.pieces * self.seq_len) if self.pieces else 0.0
            ),
            "packing_documents": self.documents,
            "packing_truncation_rate": self.cut / self.documents if self.documents else 0.0,
            "packing_fragment_rate": self.fragments / self.documents if self.documents else 0.0,
        }


def check_packing_window(window: int) -> int:
    """The window a loader packs with (0: off), checked."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"packing_window must be an integer >= 0, got {window!r}")
    return window


def resume_problem(recorded: tuple[int, int], packing: tuple[int, int], moving: bool) -> str:
    """Why a record's stream positions would name other documents under this loader's packing ("" when
    they do not): another window or sequence length (both lay the bins out), or a move between versions
    with packing on (its translation of positions assumes file order). Pairs are (window, seq_len)."""
    if moving and (recorded[0] or packing[0]):
        return (
            f"checkpoint was taken with packing_window {recorded[0]}, this loader has {packing[0]}: a run "
            "moves between versions only with packing off on both sides"
        )
    if recorded != packing:
        return (
            f"checkpoint was taken with packing (window, seq_len) {recorded}, this loader has {packing}: "
            f"its stream positions would name other documents; resume with packing_window={recorded[0]}"
            + (f" and a packing length of {recorded[1]}" if recorded[0] else "")
        )
    return ""
