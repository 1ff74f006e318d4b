"""From stream ranges to training sequences: tokens with EOS between documents, and document boundaries.

A shard's stream is its documents back to back, each followed by EOS when ``append_eos`` (the default,
for shards whose documents do not carry their own EOS). A sequence is ``seq_len`` consecutive stream
positions of one rank's bucket stream, possibly spanning several ranges; boundaries fall at every
document start and every range start (a range may start mid-document, and the previous range is a
different document), so ``cu_seqlens`` / ``position_ids`` give an intra-document attention mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from corpus.megatron import read_index


class OpenShard:
    """A memory-mapped shard with its stream coordinates (``.bin`` + ``.idx``, Megatron layout)."""

    def __init__(self, bin_path: Path, idx_path: Path, eos_id: int, append_eos: bool) -> None:
        index = read_index(idx_path)
        self.lengths = index.lengths.astype(np.int64)
        self.token_starts = index.token_starts()
        # a plain ndarray view of the mapping: slicing a np.memmap subclass costs more than the copy
        self.tokens = np.asarray(np.memmap(bin_path, dtype=index.dtype, mode="r")) if index.num_tokens else \
            np.zeros(0, dtype=index.dtype)
        if self.tokens.shape[0] != index.num_tokens:
            raise ValueError(f"{bin_path}: holds {self.tokens.shape[0]} tokens, its index says {index.num_tokens}")
        self.eos_id, self.append_eos = eos_id, append_eos
        self.stream_starts = self.token_starts[:-1] + (np.arange(index.num_docs) if append_eos else 0)
        self.stream_len = index.num_tokens + (index.num_docs if append_eos else 0)

    @property
    def num_docs(self) -> int:
        return int(self.lengths.shape[0])

    def read(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """Stream positions ``[start, end)`` as int64 tokens, and where documents start (relative to start)."""
        if not 0 <= start <= end <= self.stream_len:
            raise IndexError(f"stream range [{start}, {end}) outside [0, {self.stream_len})")
        starts = self.stream_starts[(self.stream_starts >= start) & (self.stream_starts < end)] - start
        if not self.append_eos:
            return np.asarray(self.tokens[start:end], dtype=np.int64), starts
        # one slice per document touched (a few per sequence), EOS written after each document's end
        first = int(np.searchsorted(self.stream_starts, start, side="right")) - 1
        last = int(np.searchsorted(self.stream_starts, end, side="left"))
        out = np.empty(end - start, dtype=np.int64)
        for i in range(max(first, 0), last):
            doc_start, n, tok_start = int(self.stream_starts[i]), int(self.lengths[i]), int(self.token_starts[i])
            lo, hi = max(start, doc_start), min(end, doc_start + n)
            if hi > lo:
                out[lo - start : hi - start] = self.tokens[tok_start + lo - doc_start : tok_start + hi - doc_start]
            if start <= doc_start + n < end:
                out[doc_start + n - start] = self.eos_id
        return out, starts


@dataclass(frozen=True)
class Batch:
    """One step's sequences for one rank."""

    tokens: torch.Tensor  # int64 [B, L]
    position_ids: torch.Tensor  # int64 [B, L], restarting at 0 at every document boundary
    loss_mask: torch.Tensor  # bool [B, L], False on padding after a bucket's last epoch
    cu_seqlens: torch.Tensor  # int32 [n + 1], document boundaries of the batch packed as one [B * L] row
    buckets: tuple[str, ...]
    step: int


def assemble_sequence(parts: list[tuple[np.ndarray, np.ndarray]], seq_len: int, pad: int, pad_id: int
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


def make_batch(rows: list[tuple[np.ndarray, np.ndarray, np.int64]], buckets: tuple[str, ...], step: int,
               seq_len: int) -> Batch:
    tokens = np.stack([r[0] for r in rows])
    positions = np.stack([position_ids_for(r[1], seq_len) for r in rows])
    valid = np.arange(seq_len)[None, :] < np.array([r[2] for r in rows])[:, None]
    packed = np.unique(np.concatenate([r[1] + i * seq_len for i, r in enumerate(rows)]))
    return Batch(torch.from_numpy(tokens), torch.from_numpy(positions), torch.from_numpy(valid),
                 torch.from_numpy(packed.astype(np.int32)), buckets, step)
