"""Shuffle by key for fixed-width records: numpy structured rows, routed to rank
``dest_of(batch)[i] % comm.size``; each rank gets back sorted numpy batches (by ``order_fields``, then
every other field: :mod:`mpi_kernels.row_order`).

Routing, sorting, spilling and merging are numpy operations on whole batches, no Python work per record.
Received rows stay in memory up to an eighth of the budget (the sort needs the rows, their order and its
temporaries); a round's remainder is held sorted and spilled before the round that would overflow it is
sent; runs are merged in batches, each step emitting every row at or below the smallest block end.
Rounds and the exchange: :mod:`mpi_kernels.shuffle`; docs/dedup.md (*The shuffle's rounds and memory*).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from mpi_kernels.row_order import order_of, sort_columns, sort_rows
from mpi_kernels.shuffle import ShuffleOutputBase, ShuffleStats, exchange_into, private_spill_dir
from mpi_kernels.shuffle_rounds import round_bytes, too_large_error

#: numpy output batches are about this large (rows of the in-memory result are views, not copies)
_OUT_BATCH_BYTES = 4 << 20
#: a spilled run is written in blocks of about this many bytes, gathered through the sort order
_SPILL_WRITE_BYTES = 1 << 20
#: each spilled run is read back in blocks of at least this many rows, however many runs there are
_MIN_MERGE_ROWS = 1024


def _check_dtype(dtype: np.dtype, order_fields: Sequence[str]) -> None:
    if dtype.names is None:
        raise TypeError(f"shuffle_array takes a structured dtype (named fields), got {dtype}")
    if dtype.hasobject:
        raise TypeError(f"shuffle_array takes fixed-width records; dtype {dtype} holds Python objects")
    unknown = [f for f in order_fields if f not in dtype.names]
    if unknown:
        raise ValueError(
            f"shuffle_array: order_fields {unknown} are not fields of {dtype} (fields: {list(dtype.names)})"
        )
    for name in dtype.names:
        base = dtype.fields[name][0].base
        if base.kind not in "iubSV":
            raise TypeError(
                f"shuffle_array orders rows by integer or byte fields; field {name!r} is {dtype.fields[name][0]}"
            )


class _ArrayOutbox:
    """Per-destination queues of row batches: what this rank still has to send."""

    def __init__(
        self,
        batches: Iterable[np.ndarray],
        dtype: np.dtype,
        dest_of: Callable[[np.ndarray], Any],
        size: int,
        limit: int,
    ) -> None:
        self.it = iter(batches)
        self.dtype, self.dest_of, self.size, self.limit = dtype, dest_of, size, limit
        self.chunk_rows = max(1, limit // dtype.itemsize)
        self.current: np.ndarray | None = None
        self.exhausted = False
        self.queues: list[deque[np.ndarray]] = [deque() for _ in range(size)]
        self.rows = np.zeros(size, dtype=np.int64)
        self.records_sent = 0

    def _next_chunk(self) -> np.ndarray | None:
        while self.current is None or not len(self.current):
            try:
                batch = next(self.it)
            except StopIteration:
                return None
            if not isinstance(batch, np.ndarray) or batch.dtype != self.dtype or batch.ndim != 1:
                got = (
                    f"{batch.dtype} with shape {batch.shape}"
                    if isinstance(batch, np.ndarray)
                    else type(batch).__name__
                )
                raise TypeError(f"shuffle_array takes 1-d arrays of dtype {self.dtype}, got {got}")
            self.current = batch
        chunk, self.current = self.current[: self.chunk_rows], self.current[self.chunk_rows :]
        return chunk

    def fill(self) -> None:
        itemsize = self.dtype.itemsize
        while not self.exhausted and int(self.rows.sum()) * itemsize < self.limit:
            chunk = self._next_chunk()
            if chunk is None:
                self.exhausted = True
                break
            dest = np.asarray(self.dest_of(chunk))
            if dest.shape != (len(chunk),) or dest.dtype.kind not in "iu":
                raise TypeError(
                    f"dest_of must return one integer per row, shape ({len(chunk)},); got {dest.dtype} {dest.shape}"
                )
            dest = (dest % self.size).astype(np.intp)
            order = np.argsort(dest, kind="stable")
            counts = np.bincount(dest, minlength=self.size)
            grouped = chunk[order]
            cuts = np.concatenate(([0], np.cumsum(counts)))
            for d in np.flatnonzero(counts):
                self.queues[d].append(grouped[cuts[d] : cuts[d + 1]])
            self.rows += counts

    def wants_and_heads(self) -> tuple[np.ndarray, np.ndarray]:
        itemsize = self.dtype.itemsize
        return self.rows * itemsize, np.where(self.rows > 0, itemsize, 0).astype(np.int64)

    def take(self, grants: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Remove, per peer, as many rows as its grant holds (at least one); return them in rank order as
        one byte buffer, and the bytes per peer."""
        itemsize = self.dtype.itemsize
        take = np.where(grants > 0, np.minimum(self.rows, np.maximum(1, grants // itemsize)), 0)
        send = np.empty(int(take.sum()), dtype=self.dtype)
        at = 0
        for d in np.flatnonzero(take):
            want, got, q = int(take[d]), 0, self.queues[d]
            while got < want:
                head = q.popleft()
                if got + len(head) > want:
                    q.appendleft(head[want - got :])
                    head = head[: want - got]
                send[at : at + len(head)] = head
                at += len(head)
                got += len(head)
        self.rows -= take
        self.records_sent += int(take.sum())
        return send.view(np.uint8), take * itemsize


class _ArrayReceiver:
    """Collects received rows; spills sorted runs when over its budget.

    What it holds between rounds is a list of sorted arrays: a round's remainder is sorted when it
    arrives, while its receive buffer is alive anyway, so that spilling it in a later round (while that
    round's send buffer is alive) is a plain write, with no sort temporaries on top."""

    def __init__(
        self, dtype: np.dtype, order_fields: Sequence[str], budget: int, spill_dir: Path | None
    ) -> None:
        self.dtype, self.order_fields, self.budget, self.spill_dir = dtype, order_fields, budget, spill_dir
        self.tmpdir: Path | None = None
        self.held: list[np.ndarray] = []
        self.held_bytes = 0
        self.runs: list[Path] = []
        self.records = 0

    def make_room(self, nbytes: int) -> None:
        """Spill what is held if a round of up to ``nbytes`` would take it past the threshold: called
        before the round's send and receive buffers are allocated, so that it never shares memory with
        them."""
        if self.held and self.held_bytes + nbytes > self.budget:
            self.spill()

    def add(self, buf: Any) -> None:
        """Spill or hold a round; :meth:`make_room` saw its size (at most) first, so what is held plus it
        fits, or nothing is held."""
        rows = np.frombuffer(buf, dtype=self.dtype)
        self.records += len(rows)
        # a round (a quarter budget) is larger than the threshold: sort and spill it in pieces of that size
        step = max(1, self.budget // self.dtype.itemsize)
        while len(rows) > step:
            self._spill_unsorted(rows[:step])
            rows = rows[step:]
        if len(rows):
            # a sorted copy: a view would keep the whole round's receive buffer alive until the next spill
            self.held.append(rows[order_of(sort_columns(rows, self.order_fields))])
            self.held_bytes += rows.nbytes

    def sorted_held(self) -> np.ndarray:
        """What is held, as one sorted array (sorted again only if it arrived in several rounds)."""
        held = self.held or [np.empty(0, self.dtype)]
        self.held, self.held_bytes = [], 0
        return held[0] if len(held) == 1 else sort_rows(np.concatenate(held), self.order_fields)

    def spill(self) -> None:
        if len(self.held) == 1:
            with self._new_run() as f:
                self.sorted_held().tofile(f)
        else:
            rows = np.concatenate(self.held)
            self.held, self.held_bytes = [], 0
            self._spill_unsorted(rows)

    def _spill_unsorted(self, rows: np.ndarray) -> None:
        """Write ``rows`` as a sorted run, gathered through their sort order a block at a time: a sorted
        copy of the whole would add the threshold again to the peak."""
        order = order_of(sort_columns(rows, self.order_fields))
        step = max(1, _SPILL_WRITE_BYTES // self.dtype.itemsize)
        with self._new_run() as f:
            for start in range(0, len(order), step):
                rows[order[start : start + step]].tofile(f)

    def _new_run(self) -> BinaryIO:
        """The file of the next sorted run, listed in ``runs``."""
        if self.tmpdir is None:
            self.tmpdir = private_spill_dir(self.spill_dir)
        path = self.tmpdir / f"run-{len(self.runs):06d}.bin"
        self.runs.append(path)
        return open(path, "wb")  # noqa: SIM115 - the caller closes it


class _RunSource:
    """A sorted run read back in blocks: from a raw binary file, or from an array in memory."""

    def __init__(
        self, dtype: np.dtype, block_rows: int, path: Path | None = None, rows: np.ndarray | None = None
    ):
        self.dtype, self.block_rows = dtype, block_rows
        self.rows = rows
        self.file = open(path, "rb", buffering=0) if path is not None else None  # noqa: SIM115 - closed below
        self.total = (path.stat().st_size // dtype.itemsize) if path is not None else len(rows)  # type: ignore[arg-type]
        self.pos = 0

    @property
    def more(self) -> bool:
        return self.pos < self.total

    def next_block(self) -> np.ndarray:
        n = min(self.block_rows, self.total - self.pos)
        if self.file is not None:
            block = np.fromfile(self.file, dtype=self.dtype, count=n)
            if len(block) != n:
                raise OSError(f"spill file {self.file.name} is truncated")
        else:
            block = self.rows[self.pos : self.pos + n]  # type: ignore[index]
        self.pos += n
        if not self.more:
            self.close()
        return block

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def _merge_runs(sources: list[_RunSource], order_fields: Sequence[str]) -> Iterator[np.ndarray]:
    """Merge sorted runs in batches, with no work per row in Python.

    Each step sorts the rows loaded and not yet emitted together with one sentinel per run that has rows
    left on disk (the last row loaded from it): every row before the first sentinel is at or below every
    row not yet loaded, so it is emitted; a run whose loaded rows were all emitted loads its next block.
    The run with the smallest sentinel is always emptied, so every step makes progress."""
    dtype = sources[0].dtype
    pool = np.empty(0, dtype)
    pool_src = np.empty(0, dtype=np.int32)
    last: list[np.ndarray | None] = [None] * len(sources)
    need = list(range(len(sources)))
    while True:
        parts, part_src = [pool], [pool_src]
        for i in need:
            if sources[i].more:
                block = sources[i].next_block()
                parts.append(block)
                part_src.append(np.full(len(block), i, dtype=np.int32))
                last[i] = block[-1:]
        rows, src = np.concatenate(parts), np.concatenate(part_src)
        bounds = [i for i, s in enumerate(sources) if s.more]
        if not bounds:
            if len(rows):
                yield sort_rows(rows, order_fields)
            return
        sentinels = np.concatenate([last[i] for i in bounds])  # type: ignore[misc]
        every = np.concatenate([rows, sentinels])
        is_sentinel = np.concatenate([np.zeros(len(rows), np.uint8), np.ones(len(sentinels), np.uint8)])
        order = order_of([*sort_columns(every, order_fields), is_sentinel])
        first = int(np.argmax(is_sentinel[order]))
        if first:
            yield every[order[:first]]
        rest = order[first:]
        rest = rest[rest < len(rows)]
        pool, pool_src = rows[rest], src[rest]
        left = np.bincount(pool_src, minlength=len(sources))
        need = [i for i in bounds if not left[i]]


class ArrayShuffleOutput(ShuffleOutputBase, Iterator[np.ndarray]):
    """This rank's received rows as sorted numpy batches, plus what the exchange did (``stats``)."""

    def __init__(self, receiver: _ArrayReceiver, memory_budget_bytes: int, stats: ShuffleStats) -> None:
        self.stats = stats
        self._tmpdir = receiver.tmpdir
        self._it = self._batches(receiver, memory_budget_bytes)

    def _batches(self, receiver: _ArrayReceiver, budget: int) -> Iterator[np.ndarray]:
        try:
            memory = receiver.sorted_held()
            dtype = receiver.dtype
            if not receiver.runs:
                step = max(1, _OUT_BATCH_BYTES // dtype.itemsize)
                for i in range(0, len(memory), step):
                    yield memory[i : i + step]
                return
            n_sources = len(receiver.runs) + 1
            # the blocks loaded together take a 32nd of the budget: a merge step needs ~10x that
            block_rows = max(_MIN_MERGE_ROWS, budget // (32 * dtype.itemsize * n_sources))
            sources = [_RunSource(dtype, block_rows, path=p) for p in receiver.runs]
            sources.append(_RunSource(dtype, block_rows, rows=memory))
            try:
                yield from _merge_runs(sources, receiver.order_fields)
            finally:
                for s in sources:
                    s.close()
        finally:
            self._cleanup()


def shuffle_array(
    comm: Any,
    batches: Iterable[np.ndarray],
    *,
    dtype: np.dtype | Any,
    dest_of: Callable[[np.ndarray], Any],
    order_fields: Sequence[str] = (),
    memory_budget_bytes: int = 256 << 20,
    spill_dir: Path | None = None,
) -> ArrayShuffleOutput:
    """Send every row to rank ``dest_of(batch)[i] % comm.size``; return this rank's rows as sorted batches.

    ``batches``: 1-d structured arrays of ``dtype`` (integer and byte fields), any sizes, any number
    (an empty iterable on ranks with nothing to send). ``dest_of(batch)`` returns one non-negative
    integer per row (a hash of the key, say), computed from the row alone so that the owner does not
    depend on the rank count. Output order: ``order_fields``, then the other fields (see
    :func:`sort_columns`). Collective, with the same dtype, ``dest_of`` and budget on every rank."""
    dtype = np.dtype(dtype)
    _check_dtype(dtype, order_fields)
    limit = round_bytes(memory_budget_bytes)
    if dtype.itemsize > limit:
        raise too_large_error(dtype.itemsize, memory_budget_bytes)  # the same on every rank: no collective
    size = comm.Get_size()
    outbox = _ArrayOutbox(batches, dtype, dest_of, size, limit)
    receiver = _ArrayReceiver(
        dtype,
        tuple(order_fields),
        max(memory_budget_bytes // 8, dtype.itemsize),
        Path(spill_dir) if spill_dir is not None else None,
    )
    stats = exchange_into(comm, outbox, receiver, limit, memory_budget_bytes, receiver.make_room)
    return ArrayShuffleOutput(receiver, memory_budget_bytes, stats)
