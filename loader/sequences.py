"""From stream ranges to training sequences: tokens with EOS between documents, and document boundaries.

A shard's stream is its documents back to back, each followed by EOS when ``append_eos`` (the default,
for shards whose documents do not carry their own EOS). A sequence is ``seq_len`` consecutive stream
positions of one rank's bucket stream, possibly spanning several ranges; boundaries fall at every
document start and every range start (a range may start mid-document, and the previous range is a
different document), so ``cu_seqlens`` / ``position_ids`` give an intra-document attention mask.
"""

from __future__ import annotations

import functools
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from corpus.formats.megatron import read_index
from loader.shuffle import ShuffledStream
from loader.sparse import map_bin


class _StreamStarts:
    """Stream position of each document's first token, computed from the mapped index on access.

    ``offsets[i] / itemsize`` is where document ``i`` starts in the .bin, plus ``i`` appended EOS
    tokens before it when the loader appends one. Only every ``SAMPLE``-th value is kept in memory
    (8 bytes per 64 documents); a search narrows to one window of ``SAMPLE`` documents with it and reads
    just that window of the mapped index, so an open shard builds no per-document array. The last
    ``KEEP`` windows read stay computed: a rank reads a shard sequentially, so a window serves many reads.
    """

    SAMPLE = 64
    KEEP = 8

    def __init__(self, offsets: np.ndarray, lengths: np.ndarray, itemsize: int, append_eos: bool) -> None:
        self.offsets, self.lengths, self.itemsize, self.append_eos = offsets, lengths, itemsize, append_eos
        self.n = int(offsets.shape[0])
        self.sample = self.range(0, self.n, self.SAMPLE)
        self._windows: dict[int, tuple[np.ndarray, list[int], list[int], np.ndarray]] = {}

    def range(self, lo: int, hi: int, step: int = 1) -> np.ndarray:
        starts = np.asarray(self.offsets[lo:hi:step], dtype=np.int64) // self.itemsize
        return (
            starts + np.arange(lo, hi, step, dtype=np.int64)[: starts.shape[0]] if self.append_eos else starts
        )

    def window(self, w: int) -> tuple[np.ndarray, list[int], list[int], np.ndarray]:
        """Documents ``[w·SAMPLE, (w+1)·SAMPLE)``: their stream starts (as an array and a list), lengths,
        and stream ends (where each one's appended EOS goes)."""
        got = self._windows.get(w)
        if got is None:
            if len(self._windows) >= self.KEEP:
                self._windows.clear()
            lo, hi = w * self.SAMPLE, min((w + 1) * self.SAMPLE, self.n)
            got = self._coordinates(lo, hi)
            self._windows[w] = got
        return got

    def _coordinates(self, lo: int, hi: int) -> tuple[np.ndarray, list[int], list[int], np.ndarray]:
        starts, lengths = self.range(lo, hi), np.asarray(self.lengths[lo:hi], dtype=np.int64)
        return starts, starts.tolist(), lengths.tolist(), starts + lengths

    def search(self, pos: int, side: str) -> int:
        """``bisect_right`` (side "right") or ``bisect_left`` ("left") of ``pos`` in the stream starts."""
        j = int(self.sample.searchsorted(pos, side=side))
        if j == 0:
            return 0
        found = bisect_right if side == "right" else bisect_left
        return (j - 1) * self.SAMPLE + found(self.window(j - 1)[1], pos)

    def docs(self, lo: int, hi: int) -> tuple[np.ndarray, list[int], list[int], np.ndarray]:
        """:meth:`window`'s four of documents ``[lo, hi)``."""
        w = lo // self.SAMPLE
        if hi <= lo or (hi - 1) // self.SAMPLE != w:
            return self._coordinates(lo, hi)
        starts, listed, lengths, ends = self.window(w)
        a, b = lo - w * self.SAMPLE, hi - w * self.SAMPLE
        return starts[a:b], listed[a:b], lengths[a:b], ends[a:b]


class _SelectedStarts:
    """Stream coordinates of a shard read through a version's selection: the stream is the selected
    documents back to back. Unlike :class:`_StreamStarts` this keeps 32 bytes per *selected* document
    (document number, length, token start, stream start), bounded by the shard's size, not by the corpus."""

    def __init__(
        self, lengths: np.ndarray, offsets: np.ndarray, itemsize: int, selected: np.ndarray, append_eos: bool
    ) -> None:
        if selected.shape[0] != lengths.shape[0]:
            raise ValueError(
                f"selection has {selected.shape[0]} bits, the shard {lengths.shape[0]} documents"
            )
        docs = np.flatnonzero(selected)
        self.docs = docs.astype(np.int64)
        self.lengths = np.asarray(lengths[docs], dtype=np.int64)
        self.token_starts = np.asarray(offsets[docs], dtype=np.int64) // itemsize
        step = self.lengths + (1 if append_eos else 0)
        self.starts = np.concatenate(([0], np.cumsum(step)[:-1])).astype(np.int64) if docs.size else step
        self.stream_len = int(step.sum())


class OpenShard:
    """A memory-mapped shard with its stream coordinates (``.bin`` + ``.idx``, Megatron layout).

    Both files are mapped, nothing is copied: what an open shard costs is the pages read so far, and
    they go with the mapping when the shard is closed (see :class:`loader.faults.ShardStore`'s cache).
    The index must already be known consistent (:func:`check_index`); ``offsets`` are trusted here.
    With ``selected`` (a version's bits for this shard) the stream holds only the selected documents;
    with ``shuffled`` they come in windowed-permuted order (:mod:`loader.shuffle`).
    """

    def __init__(
        self,
        bin_path: Path,
        idx_path: Path,
        eos_id: int,
        append_eos: bool,
        selected: np.ndarray | None = None,
        shuffled: ShuffledStream | None = None,
    ) -> None:
        index = read_index(idx_path, mmap=True)
        self.index = index
        self.lengths = index.lengths
        self.itemsize = index.dtype.itemsize
        n_bytes = Path(bin_path).stat().st_size
        self.bin_size = n_bytes
        self.mapped_bytes = n_bytes + Path(idx_path).stat().st_size
        # the raw bytes (block digests are over them) and a plain ndarray token view of the same mapping:
        # slicing a np.memmap subclass costs more than the copy
        # a version's shard is read sparsely: its mapping reads no neighbourhood around a fault (loader.sparse)
        self.mapping, self.raw = map_bin(bin_path, n_bytes, sparse=selected is not None)
        if n_bytes % self.itemsize:
            raise ValueError(f"{bin_path}: {n_bytes} bytes is not a whole number of {index.dtype} tokens")
        self.tokens = self.raw.view(index.dtype)
        self.num_tokens = int(self.tokens.shape[0])
        self.eos_id, self.append_eos = eos_id, append_eos
        self.stream_starts = _StreamStarts(index.offsets, self.lengths, self.itemsize, append_eos)
        self.stream_len = self.num_tokens + (self.num_docs if append_eos else 0)
        self.selection = None
        if selected is not None:
            self.selection = _SelectedStarts(self.lengths, index.offsets, self.itemsize, selected, append_eos)
            self.stream_len = self.selection.stream_len
        self.shuffled = shuffled  # documents read in windowed-permuted order (loader.shuffle)
        self._plain_kept: tuple[int, int, tuple] | None = None

    @property
    def num_docs(self) -> int:
        return int(self.lengths.shape[0])

    # the stream's documents in file order (a version's: the selected ones), what a shuffle permutes

    def stream_docs(self) -> int:
        return int(self.selection.docs.shape[0]) if self.selection is not None else self.num_docs

    def stream_doc_at(self, pos: int) -> int:
        """The stream document (in file order) holding file-order stream position ``pos``."""
        if self.selection is not None:
            return max(int(np.searchsorted(self.selection.starts, pos, side="right")) - 1, 0)
        return max(self.stream_starts.search(pos, "right") - 1, 0)

    def stream_spans(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Stream documents ``lo..hi-1``: file-order stream starts, stream lengths (EOS included), first
        .bin tokens and token counts."""
        eos = 1 if self.append_eos else 0
        if self.selection is not None:
            sel = self.selection
            return sel.starts[lo:hi], sel.lengths[lo:hi] + eos, sel.token_starts[lo:hi], sel.lengths[lo:hi]
        lengths = np.asarray(self.lengths[lo:hi], dtype=np.int64)
        tokens = np.asarray(self.index.offsets[lo:hi], dtype=np.int64) // self.itemsize
        return self.stream_starts.range(lo, hi), lengths + eos, tokens, lengths

    def stream_ranges(self, doc: int) -> list[tuple[int, int]]:
        """The stream positions that read shard document ``doc``'s tokens (not the EOS appended after
        it: delivering that alone reads nothing of the document): one range, one per piece in a packed
        stream; none when a version's selection leaves it out. The inverse of :meth:`document_at`, which
        ``corpus contamination --record`` asks of a few documents."""
        k = doc
        if self.selection is not None:
            k = int(np.searchsorted(self.selection.docs, doc))
            if k == self.selection.docs.shape[0] or int(self.selection.docs[k]) != doc:
                return []
        elif not 0 <= doc < self.num_docs:
            raise IndexError(f"document {doc} outside the shard's {self.num_docs}")
        starts, lens, _, bodies = self.stream_spans(k, k + 1)
        start, n = int(starts[0]), int(lens[0])
        if self.shuffled is None:
            return [(start, start + int(bodies[0]))] if bodies[0] else []
        return self.shuffled.stream_ranges(self, k, start, n)

    def document_at(self, pos: int) -> tuple[int, int, bool]:
        """(document number in the shard, offset in it, whether the position is an EOS the loader appended)
        of stream position ``pos``: the coordinates :meth:`read` lays the stream out in, so ``corpus trace``
        names the document the loader read, through a version's selection too."""
        if not 0 <= pos < self.stream_len:
            raise IndexError(f"stream position {pos} outside [0, {self.stream_len})")
        if self.shuffled is not None:
            pos = self.shuffled.file_position(self, pos)
        if self.selection is not None:
            sel = self.selection
            k = int(np.searchsorted(sel.starts, pos, side="right")) - 1
            doc = int(sel.docs[k])
            within, length = pos - int(sel.starts[k]), int(sel.lengths[k])
        else:
            doc = max(self.stream_starts.search(pos, "right") - 1, 0)
            within, length = pos - int(self.stream_starts.range(doc, doc + 1)[0]), int(self.lengths[doc])
        return doc, within, self.append_eos and within == length

    def _plain(self, start: int, end: int) -> tuple[int, int, np.ndarray, list[int], list[int], np.ndarray]:
        """Of the plain stream's positions ``[start, end)``: the documents ``[first, last)`` it overlaps, their
        stream starts (array, list), lengths and where its EOS positions fall (relative to ``start``). The
        last range asked is kept: a step's fetch asks its .bin slice, then reads the same range."""
        kept = self._plain_kept
        if kept is not None and kept[0] == start and kept[1] == end:
            return kept[2]
        first = max(self.stream_starts.search(start, "right") - 1, 0)
        last = self.stream_starts.search(end, "left")
        doc_starts, listed, lengths, ends = self.stream_starts.docs(first, last)
        # the range starts in document ``first`` (its EOS included) and every later one's EOS is before the
        # next one's start, so only the last document's EOS may fall at or after ``end``
        n = last - first
        if n and listed[-1] + lengths[-1] >= end:
            n -= 1
        eos = ends[:n] - start
        got = (first, last, doc_starts, listed, lengths, eos)
        self._plain_kept = (start, end, got)
        return got

    def bin_slice(self, start: int, end: int) -> tuple[int, int]:
        """The ``.bin`` tokens ``[lo, hi)`` that reading plain stream positions ``[start, end)`` copies:
        from ``start - first`` (an EOS before it per earlier document), all but the EOS positions."""
        if not self.append_eos:
            return start, end
        first, _, _, _, _, eos = self._plain(start, end)
        return start - first, end - first - int(eos.shape[0])

    def read(
        self, start: int, end: int, check: Callable[[int, int], None] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Stream positions ``[start, end)`` as int64 tokens, and where documents start (relative to start).

        ``check(lo, hi)`` is called with the ``.bin`` tokens ``[lo, hi)`` the range reads before any of
        them is copied (the store verifies their blocks there).
        """
        if not 0 <= start <= end <= self.stream_len:
            raise IndexError(f"stream range [{start}, {end}) outside [0, {self.stream_len})")
        if self.shuffled is not None:
            return self._read_shuffled(start, end, check)
        if self.selection is not None:
            return self._read_selected(start, end, check)
        first, last, doc_starts, listed, lengths, eos = self._plain(start, end)
        starts = doc_starts[int(bool(listed) and listed[0] < start) :] - start  # only ``first`` starts before
        if not self.append_eos:
            if check is not None and end > start:
                check(start, end)
            return np.asarray(self.tokens[start:end], dtype=np.int64), starts
        if check is not None and end > start:
            # the range's first and last positions, as .bin tokens (an appended EOS: its document's last)
            lo = listed[0] - first + min(start - listed[0], max(lengths[0] - 1, 0))
            hi = listed[-1] - (last - 1) + min(end - 1 - listed[-1], lengths[-1] - 1) + 1
            lo = min(max(lo, 0), self.num_tokens)
            check(lo, min(max(hi, lo), self.num_tokens))
        # documents are back to back in the .bin: the range is one slice of it (bin_slice), laid out
        # around the EOS positions
        out = np.empty(end - start, dtype=np.int64)
        body = np.ones(end - start, dtype=bool)
        body[eos] = False
        at = start - first
        out[body] = self.tokens[at : at + end - start - eos.shape[0]]
        out[eos] = self.eos_id
        return out, starts

    def _read_shuffled(
        self, start: int, end: int, check: Callable[[int, int], None] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``read`` of the shuffled stream: one slice of the .bin per document part (loader.shuffle)."""
        parts = self.shuffled.parts(self, start, end)
        out = np.empty(end - start, dtype=np.int64)
        for p in parts:
            if p.tokens:
                if check is not None:
                    check(p.token, p.token + p.tokens)
                out[p.at : p.at + p.tokens] = self.tokens[p.token : p.token + p.tokens]
            if p.n > p.tokens:
                out[p.at + p.tokens] = self.eos_id
        return out, np.array([p.at for p in parts if p.starts_document], dtype=np.int64)

    def _read_selected(
        self, start: int, end: int, check: Callable[[int, int], None] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``read`` through a selection: each selected document touched is one slice of the .bin."""
        sel = self.selection
        first = max(int(np.searchsorted(sel.starts, start, side="right")) - 1, 0)
        last = int(np.searchsorted(sel.starts, end, side="left"))
        doc_starts = sel.starts[first:last]
        out = np.empty(end - start, dtype=np.int64)
        for k in range(first, last):
            doc_start, n, tok = int(sel.starts[k]), int(sel.lengths[k]), int(sel.token_starts[k])
            lo, hi = max(start, doc_start), min(end, doc_start + n)
            if hi > lo:
                if check is not None:
                    check(tok + lo - doc_start, tok + hi - doc_start)
                out[lo - start : hi - start] = self.tokens[tok + lo - doc_start : tok + hi - doc_start]
            if self.append_eos and start <= doc_start + n < end:
                out[doc_start + n - start] = self.eos_id
        return out, doc_starts[doc_starts >= start] - start


def check_index(opened: OpenShard, block: int = 1 << 20) -> str:
    """Why the shard's index is inconsistent with its .bin, or "" when it is consistent.

    Lengths must be non-negative, offsets the running sum of the lengths (in bytes), and the lengths
    must add up to the .bin's token count: then every stream position maps inside the file. Checked
    ``block`` documents at a time, so the check costs bounded memory whatever the shard's size.
    """
    lengths, offsets, itemsize = opened.lengths, opened.index.offsets, opened.itemsize
    total = 0
    for lo in range(0, opened.num_docs, block):
        ln = np.asarray(lengths[lo : lo + block], dtype=np.int64)
        if ln.size and int(ln.min()) < 0:
            return f"negative document length in documents {lo}..{lo + ln.size - 1}"
        expect = (total + np.concatenate(([0], np.cumsum(ln[:-1])))) * itemsize
        if not np.array_equal(np.asarray(offsets[lo : lo + block], dtype=np.int64), expect):
            return f"offsets disagree with lengths in documents {lo}..{lo + ln.size - 1}"
        total += int(ln.sum())
    if total != opened.num_tokens:
        return f".bin holds {opened.num_tokens} tokens, its index says {total}"
    return ""


@dataclass(frozen=True)
class Batch:
    """One step's sequences for one rank."""

    tokens: torch.Tensor  # int64 [B, L]
    position_ids: torch.Tensor  # int64 [B, L], restarting at 0 at every document boundary
    loss_mask: torch.Tensor  # bool [B, L], False on padding after a bucket's last epoch
    cu_seqlens: torch.Tensor  # int32 [n + 1], document boundaries of the batch packed as one [B * L] row
    buckets: tuple[str, ...]
    step: int
    phase: str | None = None  # the recipe phase of the step (None without a recipe)


@functools.lru_cache(maxsize=8)
def _positions(n: int) -> np.ndarray:
    """``arange(n)``, read-only and kept: every step of a loader needs the same one."""
    out = np.arange(n, dtype=np.int64)
    out.flags.writeable = False
    return out


class Part(Protocol):
    """What a sequence is assembled from: tokens read, and where documents start among them."""

    tokens: np.ndarray
    doc_starts: np.ndarray


def assemble_batch(
    rows: Sequence[Sequence[Part]], pads: list[int], seq_len: int, pad_id: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens ``[B, L]``, boundaries and valid lengths of a step's sequences, each from its parts. The
    boundaries are of the rows laid end to end (row i's L is row i+1's 0), ascending and distinct: every
    row start, part start and document start, where each row's valid tokens end, and ``B·L`` (the batch's
    ``cu_seqlens``). They come in that order as the rows are walked (a part's document starts lie in
    it), so a boundary can only repeat the one before it: no sort."""
    pieces: list[np.ndarray] = []  # every part's tokens, then its row's padding
    marks = [0]
    valid = []
    for r, parts in enumerate(rows):
        at = row = r * seq_len
        if marks[-1] != row:
            marks.append(row)
        for part in parts:
            toks, doc_starts = part.tokens, part.doc_starts
            pieces.append(toks)
            if marks[-1] != at:
                marks.append(at)
            if doc_starts.shape[0]:
                marks += [at + d for d in doc_starts.tolist() if d]
            at += toks.shape[0]
        if at - row != seq_len - pads[r]:
            raise AssertionError(f"sequence has {at - row} tokens, expected {seq_len - pads[r]}")
        if pads[r]:
            pieces.append(np.full(pads[r], pad_id, dtype=np.int64))
        if marks[-1] != at:
            marks.append(at)
        valid.append(at - row)
    if marks[-1] != len(rows) * seq_len:
        marks.append(len(rows) * seq_len)
    tokens = np.empty((len(rows), seq_len), dtype=np.int64)
    if pieces:
        np.concatenate(pieces, out=tokens.reshape(-1))
    return tokens, np.array(marks, dtype=np.int64), np.array(valid, dtype=np.int64)


def pieces_per_row(bounds: np.ndarray, valid: np.ndarray, seq_len: int) -> np.ndarray:
    """How many of :func:`assemble_batch`'s boundaries fall among each row's valid tokens."""
    starts = _positions(valid.shape[0] * seq_len)[::seq_len]
    return bounds.searchsorted(starts + valid) - bounds.searchsorted(starts)


def make_batch(
    tokens: np.ndarray,
    bounds: np.ndarray,
    valid: np.ndarray,
    buckets: tuple[str, ...],
    step: int,
    phase: str | None = None,
) -> Batch:
    """The batch of :func:`assemble_batch`'s arrays: a position counts from the last boundary at or
    before it."""
    rows, seq_len = tokens.shape
    positions = bounds[:-1].repeat(bounds[1:] - bounds[:-1])
    np.subtract(_positions(rows * seq_len), positions, out=positions)
    loss_mask = np.ones((rows, seq_len), dtype=bool)
    if valid.min() < seq_len:  # padded rows: the last of a bucket, or packed
        for r in np.flatnonzero(valid < seq_len).tolist():
            loss_mask[r, valid[r] :] = False
    return Batch(
        torch.from_numpy(tokens),
        torch.from_numpy(positions.reshape(rows, seq_len)),
        torch.from_numpy(loss_mask),
        torch.from_numpy(bounds.astype(np.int32)),
        buckets,
        step,
        phase,
    )
