"""Which documents a run had read by a checkpoint, and at which step it first read each: arithmetic on
loader records, no replay and no token read.

A record says, bucket by bucket, which epochs its ranks had opened and what of them was still unread
(:func:`loader.state.remaining_pieces`): every position of an epoch before the first one open was read,
and of an open epoch every position outside its unread pieces. Whether a document had been read is
then a question about its stream positions (:meth:`loader.sequences.OpenShard.stream_ranges`, through
a version's selection, the shuffle buffer and packing), whatever the resumes before the record. Between
the last record that had not read it and the first that had, the ranks' queues say which rank reached
it in which piece, and that rank's cursor is bisected over the steps by :meth:`loader.SnapshotLoader.seek`
(arithmetic too) -- only where seeking reproduces the later record's cursors: a run whose settings
changed where no record shows it gets a bracket between two records, not a guess.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loader.sampler import Piece
from loader.state import Layout, LoaderRecord, RankQueue, remaining_pieces

Ranges = Sequence[tuple[int, int]]


def _covered(ranges: Ranges, unread: list[tuple[int, int]]) -> bool:
    """Whether every position of ``ranges`` lies in ``unread`` (sorted, non-overlapping ranges)."""
    for a, b in ranges:
        pos = a
        for u0, u1 in unread:
            if u1 <= pos:
                continue
            if u0 > pos:
                return False
            pos = u1
            if pos >= b:
                break
        if pos < b:
            return False
    return True


@dataclass(frozen=True)
class ReadPositions:
    """What one record says its run had read: per bucket, whether it was started, the first and last
    epochs open (None: none open, read to its cap) and each open epoch's unread ranges per stream."""

    step: int
    started: frozenset[str]
    open_epochs: Mapping[str, tuple[int, int] | None]
    unread: Mapping[tuple[str, int, int], list[tuple[int, int]]]  # (bucket, epoch, stream) -> ranges

    @classmethod
    def of(cls, layout: Layout, record: LoaderRecord) -> ReadPositions:
        plan, cursors = record.plan, list(record.cursors)
        started, open_epochs, unread = set(), {}, {}
        for bucket in sorted(layout.buckets):
            if (
                any(c.get(bucket, (0, 0)) != (0, 0) for c in cursors)
                or bucket in plan.fresh_epoch
                or bucket in plan.carry
            ):
                started.add(bucket)
            pieces, last = remaining_pieces(layout, plan, cursors, bucket)
            open_epochs[bucket] = (
                None if last is None else (min((p.epoch for p in pieces), default=last), last)
            )
            for p in pieces:
                unread.setdefault((bucket, p.epoch, p.shard), []).append((p.start, p.end))
        for ranges in unread.values():
            ranges.sort()
        return cls(record.step, frozenset(started), open_epochs, unread)

    def read(self, bucket: str, stream: int, ranges: Ranges) -> bool:
        """Whether any position of ``ranges`` (of ``stream`` in ``bucket``) had been delivered."""
        if not ranges or bucket not in self.started:
            return False
        epochs = self.open_epochs[bucket]
        if epochs is None or epochs[0] > 0:  # read to its cap, or a whole epoch before the open ones
            return True
        return any(
            not _covered(ranges, self.unread.get((bucket, e, stream), [])) for e in range(epochs[1] + 1)
        )


@dataclass(frozen=True)
class FirstRead:
    """When a run first read a document: at ``step`` exactly, or (``step`` None) after step ``after``
    (None: the run's start) and at or before ``by``, where the records at hand allow no closer answer."""

    step: int | None
    after: int | None
    by: int

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "after_step": self.after, "by_step": self.by}


def _resumed_with(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a run resumed with, read from the record it saved next (a resume may change these)."""
    r = LoaderRecord.from_dict(record)
    if r.recipe:
        return {"batch_size": r.batch_size}
    return {"mixture": dict(r.mixture), "seq_len": r.seq_len, "batch_size": r.batch_size}


def _started_with(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a run started with, read from its first record (the keyed settings no resume changes)."""
    r = LoaderRecord.from_dict(record)
    return {
        "seed": r.seed,
        "epoch_caps": dict(r.epoch_caps),
        "run_len": r.run_len,
        "chunk_tokens": r.chunk_tokens,
        "append_eos": r.append_eos,
        "shuffle_buffer": r.shuffle_buffer,
        "packing_window": r.packing[0],
    }


class RunReads:
    """The documents a run read, from its loader records (oldest first; the last is the one asked
    about), all of one snapshot or version ``snapshot``; ``recipe``: the run's recipe (a run with one
    cannot be resumed without it)."""

    def __init__(self, snapshot: Any, records: Sequence[Mapping[str, Any]], recipe: Any = None) -> None:
        from loader.trace import loader_at  # the loader, built and resumed as training did

        self._loader_at, self.snapshot, self.recipe = loader_at, snapshot, recipe
        self.records = [dict(r) for r in records]
        last = self.records[-1]
        # the streams, their buckets and the store that lays their documents out
        self.probe = self._loader(int(last["step"]), 0, int(last["plan"]["world"]), record=last)
        self.checkpoints = [self._positions(r) for r in self.records]
        self._reproduced: dict[int, bool] = {}
        self._segments: dict[int, Segment] = {}

    def _loader(self, step: int, rank: int, world: int, **kw: Any) -> Any:
        recipe = {"recipe": self.recipe} if self.recipe is not None else {}
        return self._loader_at(self.snapshot, step, rank, world, **recipe, **kw)

    def _positions(self, record: Mapping[str, Any]) -> ReadPositions:
        probe = self._loader(int(record["step"]), 0, int(record["plan"]["world"]), record=record)
        return ReadPositions.of(probe.layout, LoaderRecord.from_dict(record))

    def places(self, shard: int, doc: int) -> list[tuple[str, int, Ranges]]:
        """Where the loader's streams hold document ``doc`` of snapshot shard ``shard``."""
        version = self.probe.version
        streams = [j for j, i in enumerate(version.shard_of) if i == shard] if version else [shard]
        buckets = self.probe.stream_manifest.shards
        return [(buckets[j].bucket, j, self.probe.store.stream_ranges(j, doc)) for j in streams]

    def first_read(self, shard: int, doc: int) -> FirstRead | None:
        """When the run first read the document; None when it had not by the last record."""
        return self.first_reads([(shard, doc)])[0]

    def first_reads(self, docs: Sequence[tuple[int, int]]) -> list[FirstRead | None]:
        """:meth:`first_read` of each (shard, document). The records say between which two the first
        read fell; there, the ranks' queues say which rank reached the document where (the first of its
        positions in each piece holding it), and that rank's cursor alone is bisected over the steps."""
        out: list[FirstRead | None] = [None] * len(docs)
        asked: dict[int, list[tuple[int, str, int, int, int]]] = {}  # segment -> (doc, bucket, rank, k, x)
        for n, where in enumerate(self.places(*d) for d in docs):
            seen = [k for k, rp in enumerate(self.checkpoints) if any(rp.read(*p) for p in where)]
            if not seen or seen[-1] != len(self.checkpoints) - 1:
                continue
            i = seen[0]
            # bracketed unless the segment is reproduced and its queues show where the document was reached
            out[n] = FirstRead(None, int(self.records[i - 1]["step"]) if i else None, self._step(i))
            if self._reproduces(i):
                asked.setdefault(i, []).extend((n, *c) for c in self._segment(i).reaching(where))
        for i, candidates in sorted(asked.items()):
            steps = self._segment(i).first_steps([c[1:] for c in candidates])
            for (n, *_), step in zip(candidates, steps, strict=True):
                if out[n].step is None or step < out[n].step:
                    out[n] = FirstRead(step, None, self._step(i))
        return out

    def _step(self, i: int) -> int:
        return int(self.records[i]["step"])

    def _segment(self, i: int) -> Segment:
        """The steps between records ``i - 1`` (or the run's start) and ``i``, as record ``i``'s ranks ran them."""
        if i not in self._segments:
            after = self.records[i]
            if i:
                kw = {"record": self.records[i - 1], **_resumed_with(after)}
            else:
                kw = _started_with(after) | _resumed_with(after)
            start = int(self.records[i - 1]["step"]) if i else 0
            world = int(after["plan"]["world"])
            self._segments[i] = Segment(lambda r: self._loader(start, r, world, **kw), world, after)
        return self._segments[i]

    def _reproduces(self, i: int) -> bool:
        """Whether seeking from record ``i - 1`` (or the start) to record ``i``'s step gives its cursors:
        else the run changed something no record shows, and its first reads there are bracketed."""
        if i not in self._reproduced:
            after = self.records[i]
            plan = after["plan"]
            known = i > 0 or (not plan["carry"] and not plan["fresh_epoch"])  # a run that began here
            runnable = self.recipe is not None or not after.get("recipe")
            self._reproduced[i] = known and runnable and self._segment(i).reproduces()
        return self._reproduced[i]


class Segment:
    """The steps a run took between two of its records, on the later record's world: each rank's loader
    as the run resumed it (``start(rank)``), its queues, where its cursors started and where the later
    record says they ended."""

    def __init__(self, start: Callable[[int], Any], world: int, after: Mapping[str, Any]) -> None:
        self.start, self.world, self.end_step = start, world, int(after["step"])
        self.begun = [start(r) for r in range(world)]
        self.ended = [{b: tuple(c) for b, c in cur.items()} for cur in after["cursors"]]
        self._pieces: dict[tuple[str, int], list[tuple[int, int, Piece, int, int]]] | None = None

    def reproduces(self) -> bool:
        """Whether the ranks moved from their start by ``seek`` end where the later record says."""
        for r in range(self.world):
            ld = self.start(r)  # a loader of its own: seeking moves its phase as well as its cursor
            ld.seek(self.end_step)
            if {b: tuple(c) for b, c in ld.cursor.cursors.items()} != self.ended[r]:
                return False
        return True

    def reaching(self, places: Sequence[tuple[str, int, Ranges]]) -> list[tuple[str, int, int, int]]:
        """(bucket, rank, k, x): each piece ``k`` of a rank's queue read in this segment that holds a
        position of the document, ``x`` the first such position's offset in the piece."""
        out = []
        for bucket, stream, ranges in places:
            for rank, k, p, lo, hi in self._read_pieces().get((bucket, stream), ()):
                first = min((max(a, lo) for a, b in ranges if a < hi and b > lo), default=None)
                if first is not None:
                    out.append((bucket, rank, k, first - p.start))
        return out

    def _read_pieces(self) -> dict[tuple[str, int], list[tuple[int, int, Piece, int, int]]]:
        """(bucket, stream) -> (rank, k, piece, lo, hi) of every piece the ranks read in this segment,
        ``[lo, hi)`` the part of it read here: the queues walked once, from the start to the end cursors."""
        if self._pieces is None:
            self._pieces = {}
            for r, ld in enumerate(self.begun):
                # uncapped: a later phase of a recipe may raise the caps of the one the segment began in
                uncapped = replace(ld.layout, epoch_caps={})
                for bucket, (k0, off0) in sorted(ld.cursor.cursors.items()):
                    q = RankQueue(uncapped, ld.cursor.plan, bucket, r)
                    k1, off1 = self.ended[r].get(bucket, (0, 0))
                    for k in range(k0, k1 + 1):
                        p = q.piece(k)
                        if p is not None:
                            lo = p.start + (off0 if k == k0 else 0)
                            hi = p.start + off1 if k == k1 else p.end
                            self._pieces.setdefault((bucket, p.shard), []).append((r, k, p, lo, hi))
        return self._pieces

    def first_steps(self, candidates: Sequence[tuple[str, int, int, int]]) -> list[int]:
        """The step whose batch read position ``x`` of piece ``k`` of the rank's ``bucket`` queue, for each
        (bucket, rank, k, x): a bisection per candidate, one rank's loader moved forward through each
        round's steps (its cursor passes a position at one step only)."""
        lo = [self.begun[0].step] * len(candidates)
        hi = [self.end_step] * len(candidates)
        while any(h - low > 1 for low, h in zip(lo, hi, strict=True)):
            by_rank: dict[int, list[int]] = {}
            for c, (_, rank, _, _) in enumerate(candidates):
                if hi[c] - lo[c] > 1:
                    by_rank.setdefault(rank, []).append(c)
            for rank, asked in sorted(by_rank.items()):
                ld = self.start(rank)
                for c in sorted(asked, key=lambda c: (lo[c] + hi[c]) // 2):
                    bucket, _, k, x = candidates[c]
                    mid = (lo[c] + hi[c]) // 2
                    ld.seek(mid)
                    kk, off = ld.cursor.cursors[bucket]
                    lo[c], hi[c] = (lo[c], mid) if (kk, off) > (k, x) else (mid, hi[c])
        return [h - 1 for h in hi]
