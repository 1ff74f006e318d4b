"""From stream ranges to training sequences: tokens with EOS between documents, and document boundaries.

A shard's stream is its documents back to back, each followed by EOS when ``append_eos`` (the default,
for shards whose documents do not carry their own EOS). A sequence is ``seq_len`` consecutive stream
positions of one rank's bucket stream, possibly spanning several ranges; boundaries fall at every
document start and every range start (a range may start mid-document, and the previous range is a
different document), so ``cu_seqlens`` / ``position_ids`` give an intra-document attention mask.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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
    just that window of the mapped index, so an open shard builds no per-document array.
    """

    SAMPLE = 64

    def __init__(self, offsets: np.ndarray, itemsize: int, append_eos: bool) -> None:
        self.offsets, self.itemsize, self.append_eos = offsets, itemsize, append_eos
        self.n = int(offsets.shape[0])
        self.sample = self.range(0, self.n, self.SAMPLE)

    def range(self, lo: int, hi: int, step: int = 1) -> np.ndarray:
        starts = np.asarray(self.offsets[lo:hi:step], dtype=np.int64) // self.itemsize
        return (
            starts + np.arange(lo, hi, step, dtype=np.int64)[: starts.shape[0]] if self.append_eos else starts
        )

    def search(self, pos: int, side: str) -> int:
        """``bisect_right`` (side "right") or ``bisect_left`` ("left") of ``pos`` in the stream starts."""
        j = int(np.searchsorted(self.sample, pos, side=side))
        if j == 0:
            return 0
        lo = (j - 1) * self.SAMPLE
        return lo + int(np.searchsorted(self.range(lo, min(lo + self.SAMPLE, self.n)), pos, side=side))


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
        self.stream_starts = _StreamStarts(index.offsets, self.itemsize, append_eos)
        self.stream_len = self.num_tokens + (self.num_docs if append_eos else 0)
        self.selection = None
        if selected is not None:
            self.selection = _SelectedStarts(self.lengths, index.offsets, self.itemsize, selected, append_eos)
            self.stream_len = self.selection.stream_len
        self.shuffled = shuffled  # documents read in windowed-permuted order (loader.shuffle)

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
        # documents [first, last) overlap the range
        first = max(self.stream_starts.search(start, "right") - 1, 0)
        last = self.stream_starts.search(end, "left")
        doc_starts = self.stream_starts.range(first, last)
        starts = doc_starts[doc_starts >= start] - start
        if not self.append_eos:
            if check is not None and end > start:
                check(start, end)
            return np.asarray(self.tokens[start:end], dtype=np.int64), starts
        if check is not None and end > start:
            # the range's first and last positions, as .bin tokens (an appended EOS: its document's last)
            lo = (
                int(doc_starts[0])
                - first
                + min(start - int(doc_starts[0]), max(int(self.lengths[first]) - 1, 0))
            )
            tail = last - 1
            hi = (
                int(doc_starts[-1])
                - tail
                + min(end - 1 - int(doc_starts[-1]), int(self.lengths[tail]) - 1)
                + 1
            )
            lo = min(max(lo, 0), self.num_tokens)
            check(lo, min(max(hi, lo), self.num_tokens))
        # one slice per document touched (a few per sequence), EOS written after each document's end
        out = np.empty(end - start, dtype=np.int64)
        for i in range(first, last):
            doc_start, n = int(doc_starts[i - first]), int(self.lengths[i])
            tok_start = doc_start - i
            lo, hi = max(start, doc_start), min(end, doc_start + n)
            if hi > lo:
                out[lo - start : hi - start] = self.tokens[
                    tok_start + lo - doc_start : tok_start + hi - doc_start
                ]
            if start <= doc_start + n < end:
                out[doc_start + n - start] = self.eos_id
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


def assemble_sequence(
    parts: list[tuple[np.ndarray, np.ndarray]], seq_len: int, pad: int, pad_id: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens, boundaries (sorted, with 0 and seq_len) and the valid length of one sequence from its ranges."""
    tokens = np.full(seq_len, pad_id, dtype=np.int64)
    bounds = [np.array([0, seq_len], dtype=np.int64)]
    at = 0
    for toks, doc_starts in parts:
        tokens[at : at + toks.shape[0]] = toks
        bounds.append(np.array([at], dtype=np.int64))
        bounds.append(doc_starts + at)
        at += toks.shape[0]
    if at != seq_len - pad:
        raise AssertionError(f"sequence has {at} tokens, expected {seq_len - pad}")
    bounds.append(np.array([at], dtype=np.int64))
    return tokens, np.unique(np.concatenate(bounds)), np.int64(at)


def position_ids_for(bounds: np.ndarray, seq_len: int) -> np.ndarray:
    """Position within the current document for every position of a sequence."""
    pos = np.arange(seq_len, dtype=np.int64)
    last = bounds[np.searchsorted(bounds, pos, side="right") - 1]
    return pos - last


def make_batch(
    rows: list[tuple[np.ndarray, np.ndarray, np.int64]],
    buckets: tuple[str, ...],
    step: int,
    seq_len: int,
    phase: str | None = None,
) -> Batch:
    tokens = np.stack([r[0] for r in rows])
    positions = np.stack([position_ids_for(r[1], seq_len) for r in rows])
    valid = np.arange(seq_len)[None, :] < np.array([r[2] for r in rows])[:, None]
    packed = np.unique(np.concatenate([r[1] + i * seq_len for i, r in enumerate(rows)]))
    return Batch(
        torch.from_numpy(tokens),
        torch.from_numpy(positions),
        torch.from_numpy(valid),
        torch.from_numpy(packed.astype(np.int32)),
        buckets,
        step,
        phase,
    )
