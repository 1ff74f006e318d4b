"""The consumption record: what each rank has read, and how unfinished work moves to a new world size.

A *plan* says which pieces each rank of a world owns, bucket by bucket: first the explicit ``carry``
(remainders of epochs that were open at the last checkpoint, redistributed), then every later epoch by
formula (its keyed chunk order, strided over the ranks) up to the bucket's epoch cap. A rank's
*cursor* per bucket is ``(k, off)``: the k-th piece of its queue, ``off`` positions into it. That is all
the state there is; at a checkpoint the cursors of every rank are all-gathered into one global record,
and :func:`redistribute` turns the record into a plan for any world size such that every position of
every open epoch is read exactly once across the save/resume boundary.

Everything here is pure arithmetic on the manifest's shard sizes: no file is opened.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from loader.sampler import (
    SAMPLER_VERSION,
    EpochChunks,
    Piece,
    choose_bucket,
    rank_point,
    run_of,
    shard_cuts,
    strided,
)

RECORD_FORMAT = "loader-state/1"
#: ``unit_end(shard, pos)``: where the unit of stream positions holding ``pos`` ends (None: no units there)
UnitEnd = Callable[[int, int], int | None]


@dataclass(frozen=True)
class Layout:
    """The static view the sampler needs: bucket -> its shards, and the keys of the epoch orders."""

    buckets: Mapping[str, tuple[tuple[int, str, int], ...]]  # bucket -> ((index, sha256, stream_len), ...)
    seed: int
    chunk_tokens: int
    epoch_caps: Mapping[str, int | None]
    cuts: Mapping[str, int] = field(
        default_factory=dict
    )  # bucket -> world it is cut for (sampler.shard_cuts)

    def cap(self, bucket: str) -> int | None:
        return self.epoch_caps.get(bucket)

    def chunks(self, bucket: str, epoch: int) -> EpochChunks:
        return _chunks(self, bucket, epoch)

    def chunks_per_epoch(self, bucket: str) -> int:
        lens = [s[2] for s in self.buckets[bucket]]
        cut = self.cuts.get(bucket, 0)
        pieces = shard_cuts(lens, self.chunk_tokens, cut) if cut else None
        if pieces is not None:
            return sum(pieces)
        return sum(math.ceil(n / self.chunk_tokens) for n in lens)

    def __hash__(self) -> int:
        return hash(
            (tuple(sorted(self.buckets)), self.seed, self.chunk_tokens, tuple(sorted(self.cuts.items())))
        )


def stream_layout(
    shards: Any,
    seed: int,
    chunk_tokens: int,
    epoch_caps: Mapping[str, int | None],
    append_eos: bool,
    world: int,
    cuts: Mapping[str, int] | None = None,
) -> Layout:
    """The layout of a manifest's shards (``SnapshotShard``-like: bucket, sha256, tokens, docs) for ``world`` ranks.

    Buckets with fewer chunks than ranks are cut for ``world`` (:func:`loader.sampler.shard_cuts`);
    ``cuts`` given (from a checkpoint record) overrides that with the cut the record was taken under.
    """
    buckets: dict[str, list[tuple[int, str, int]]] = {}
    for i, s in enumerate(shards):
        buckets.setdefault(s.bucket, []).append((i, s.sha256, s.tokens + (s.docs if append_eos else 0)))
    if cuts is None:
        cuts = {b: world for b, v in buckets.items() if shard_cuts([x[2] for x in v], chunk_tokens, world)}
    caps = {b: epoch_caps.get(b) for b in buckets}
    return Layout(
        {b: tuple(v) for b, v in sorted(buckets.items())},
        seed,
        chunk_tokens,
        caps,
        {b: int(w) for b, w in sorted(cuts.items())},
    )


@functools.lru_cache(maxsize=64)
def _chunks(layout: Layout, bucket: str, epoch: int) -> EpochChunks:
    return EpochChunks(
        layout.buckets[bucket], layout.seed, bucket, epoch, layout.chunk_tokens, layout.cuts.get(bucket, 0)
    )


@dataclass(frozen=True)
class Plan:
    world: int
    fresh_epoch: Mapping[str, int]  # first epoch every rank reads by formula
    carry: Mapping[str, tuple[tuple[Piece, ...], ...]] = field(default_factory=dict)  # bucket -> per rank

    @classmethod
    def fresh(cls, world: int) -> Plan:
        return cls(world, {}, {})

    def to_dict(self) -> dict:
        return {
            "world": self.world,
            "fresh_epoch": dict(sorted(self.fresh_epoch.items())),
            "carry": {
                b: [[p.to_list() for p in pieces] for pieces in per_rank]
                for b, per_rank in sorted(self.carry.items())
            },
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> Plan:
        carry = {
            b: tuple(tuple(Piece.from_list(p) for p in pieces) for pieces in per_rank)
            for b, per_rank in d["carry"].items()
        }
        return cls(int(d["world"]), {b: int(e) for b, e in d["fresh_epoch"].items()}, carry)


class RankQueue:
    """The pieces one rank reads from one bucket, in order; indexable without materializing it."""

    def __init__(self, layout: Layout, plan: Plan, bucket: str, rank: int) -> None:
        self.layout, self.bucket, self.rank, self.world = layout, bucket, rank, plan.world
        cap = layout.cap(bucket)
        carried = plan.carry.get(bucket, ())
        self.carry = tuple(
            p for p in (carried[rank] if rank < len(carried) else ()) if cap is None or p.epoch < cap
        )
        self.fresh = plan.fresh_epoch.get(bucket, 0)
        self.cap = cap
        self.per_epoch = len(strided(layout.chunks_per_epoch(bucket), rank, plan.world))
        self._last: tuple[int, Sequence[Piece]] = (-1, [])  # the epoch last read and its chunks
        self._at: tuple[int, Piece | None] = (-1, None)  # the piece last asked for

    def piece(self, k: int) -> Piece | None:
        at = self._at  # one tuple read: a prefetch thread's copy of the cursor shares this queue
        if at[0] == k:  # asked every step while the cursor is inside one piece
            return at[1]
        p = self._piece(k)
        self._at = (k, p)
        return p

    def _piece(self, k: int) -> Piece | None:
        if k < len(self.carry):
            return self.carry[k]
        if self.per_epoch == 0:
            return None
        epoch, j = divmod(k - len(self.carry), self.per_epoch)
        epoch += self.fresh
        if self.cap is not None and epoch >= self.cap:
            return None
        last = self._last
        if last[0] != epoch:
            last = self._last = (epoch, self.layout.chunks(self.bucket, epoch))
        return last[1][self.rank + j * self.world]


class SequencePlan(NamedTuple):
    """One sequence of a batch: its bucket and the stream ranges it is made of, then ``pad`` pad tokens
    (a named tuple: eight are made a step)."""

    bucket: str
    segments: tuple[tuple[int, int, int], ...]  # (shard index, stream start, stream end)
    pad: int


class RankCursor:
    """One rank's position in its plan; advancing it is the only thing iteration does to the state."""

    def __init__(
        self,
        layout: Layout,
        plan: Plan,
        rank: int,
        step: int = 0,
        cursors: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        self.layout, self.plan, self.rank, self.step = layout, plan, rank, step
        self.queues = {b: RankQueue(layout, plan, b, rank) for b in sorted(layout.buckets)}
        self.cursors = {b: tuple(cursors[b]) if cursors and b in cursors else (0, 0) for b in self.queues}
        self.active = {b for b in self.queues if self.queues[b].piece(self.cursors[b][0]) is not None}
        self._chosen: tuple[Fraction, dict[str, float], set[str], str | None] | None = None

    def copy(self) -> RankCursor:
        """An independent cursor at the same place (the queues are immutable and shared)."""
        twin = copy.copy(self)
        twin.cursors, twin.active = dict(self.cursors), set(self.active)
        return twin

    def _choose(self, point: Fraction, weights: Mapping[str, float]) -> str | None:
        """:func:`choose_bucket`, kept while the point, the weights and the active buckets are the same
        (a whole run: comparing an exact point with the weights' float ends is the costly part)."""
        kept = self._chosen
        same_point = kept is not None and (kept[0] is point or kept[0] == point)  # rank_point is cached
        if not same_point or kept[1] != weights or kept[2] != self.active:
            kept = self._chosen = (
                point,
                dict(weights),
                set(self.active),
                choose_bucket(point, weights, self.active),
            )
        return kept[3]

    def take(self, bucket: str, n: int, collect: bool = True) -> tuple[list[tuple[int, int, int]], int]:
        """Advance ``bucket``'s cursor by up to ``n`` stream positions; the ranges read and how many."""
        q = self.queues[bucket]
        k, off = self.cursors[bucket]
        segments: list[tuple[int, int, int]] = []
        taken = 0
        p = q.piece(k)
        while taken < n and p is not None:
            length = p.end - p.start
            step = min(n - taken, length - off)
            if collect:
                segments.append((p.shard, p.start + off, p.start + off + step))
            taken += step
            off += step
            if off == length:
                k, off = k + 1, 0
                p = q.piece(k)
        self.cursors[bucket] = (k, off)
        if p is None:
            self.active.discard(bucket)
        return segments, taken

    def _rows_inside_piece(self, bucket: str, seq_len: int, n: int, collect: bool) -> list[SequencePlan]:
        """``n`` whole sequences at once when the bucket's current piece holds more than ``n·seq_len``
        positions past the cursor (most steps: a piece is a chunk of many sequences), else none: what
        ``n`` calls of :meth:`take` give there, without their calls (no piece ends, none is fetched)."""
        k, off = self.cursors[bucket]
        p = self.queues[bucket].piece(k)
        if p is None or p.end - p.start - off <= n * seq_len:
            return []
        self.cursors[bucket] = (k, off + n * seq_len)
        if not collect:
            return [SequencePlan(bucket, (), 0)] * n
        at = p.start + off
        return [
            SequencePlan(bucket, ((p.shard, a, a + seq_len),), 0)
            for a in range(at, at + n * seq_len, seq_len)
        ]

    def take_units(
        self, bucket: str, n: int, unit_end: UnitEnd, collect: bool = True
    ) -> tuple[list[tuple[int, int, int]], int]:
        """:meth:`take` of up to ``n`` positions in whole units (packing's bins, cut where a piece ends):
        while the next one fits; a unit longer than ``n`` is cut only when nothing was taken yet."""
        segments: list[tuple[int, int, int]] = []
        taken = 0
        while taken < n and (p := self.queues[bucket].piece(self.cursors[bucket][0])) is not None:
            pos = p.start + self.cursors[bucket][1]
            end = unit_end(p.shard, pos)
            size = min(p.end, end if end is not None else pos + n - taken) - pos
            if size > n - taken and taken:
                break
            got, size = self.take(bucket, min(size, n - taken), collect)
            segments += got
            taken += size
        return segments, taken

    def next_batch(
        self,
        weights: Mapping[str, float],
        seed: int,
        run_len: int,
        seq_len: int,
        batch_size: int,
        collect: bool = True,
        run_origin: int = 0,
        unit_end: UnitEnd | None = None,
    ) -> list[SequencePlan] | None:
        """The sequences of the next step (fewer than ``batch_size`` only at the very end), or None when done.

        Every sequence of a step comes from the bucket the rank's point falls in; a bucket that runs out
        mid-sequence pads that sequence and drops out of the mixture for the rest of the rank's stream.
        Runs are numbered from ``run_origin`` (a recipe phase's first step; 0 without a recipe).
        ``unit_end`` (packing): a sequence takes whole units while they fit (:meth:`take_units`).
        """
        point = rank_point(seed, run_of(self.step - run_origin, run_len), self.rank, self.plan.world)
        out: list[SequencePlan] = []
        bucket = None
        while len(out) < batch_size:
            if bucket not in self.active:  # the choice changes only when a take ends the chosen bucket
                bucket = self._choose(point, weights)
                if bucket is None:
                    break
            if unit_end is None:
                if rows := self._rows_inside_piece(bucket, seq_len, batch_size - len(out), collect):
                    out += rows
                    continue
                segments, taken = self.take(bucket, seq_len, collect)
            else:
                segments, taken = self.take_units(bucket, seq_len, unit_end, collect)
            out.append(SequencePlan(bucket, tuple(segments), seq_len - taken))
        if not out:
            return None
        self.step += 1
        return out

    def seek(
        self,
        step: int,
        weights: Mapping[str, float],
        seed: int,
        run_len: int,
        seq_len: int,
        batch_size: int,
        run_origin: int = 0,
        unit_end: UnitEnd | None = None,
    ) -> None:
        """Advance to ``step`` by arithmetic alone (no reads): a whole run at a time while nothing runs out;
        with ``unit_end`` (packing) a step at a time, through the units (no token is read)."""
        while unit_end is not None and self.step < step:
            if (
                self.next_batch(weights, seed, run_len, seq_len, batch_size, False, run_origin, unit_end)
                is None
            ):
                return
        while self.step < step:
            run = run_of(self.step - run_origin, run_len)
            point = rank_point(seed, run, self.rank, self.plan.world)
            bucket = choose_bucket(point, weights, self.active)
            if bucket is None:
                return
            steps = min(step, run_origin + (run + 1) * run_len) - self.step
            q = self.queues[bucket]
            k, off = self.cursors[bucket]
            need = steps * batch_size * seq_len
            if _available(q, k, off, need) >= need:
                self.take(bucket, need, collect=False)
                self.step += steps
            else:
                self.next_batch(
                    weights, seed, run_len, seq_len, batch_size, collect=False, run_origin=run_origin
                )

    def local_state(self, skipped: set[int]) -> dict:
        return {
            "rank": self.rank,
            "world": self.plan.world,
            "step": self.step,
            "cursors": {b: list(c) for b, c in sorted(self.cursors.items())},
            "skipped": sorted(skipped),
        }


def _available(q: RankQueue, k: int, off: int, need: int) -> int:
    """Positions left in a queue from ``(k, off)``, counted only up to ``need``."""
    total = 0
    p = q.piece(k)
    while p is not None and total < need:
        total += p.length - off
        off = 0
        k += 1
        p = q.piece(k)
    return total


@dataclass(frozen=True, kw_only=True)
class LoaderRecord:
    """The global record a checkpoint saves: the facts every rank shares (snapshot, sampler inputs, recipe
    clock, moves between versions), the plan the ranks read under and each rank's cursors.

    Saved as the JSON of :meth:`to_dict` (``loader-state/1``); :meth:`from_dict` reads any record of that
    format, filling what older records lack (``chunk_cuts``, ``switches``, ``recipe``, ``packing``...)
    with the value that means "none"."""

    snapshot_id: str
    #: the build the version selects from, and where the version lies: what a move to another version needs
    base_snapshot_id: str | None = None
    version_dir: str | None = None
    switches: tuple[dict[str, Any], ...] = ()  # {step, from, to} of every move between versions
    seed: int
    chunk_tokens: int
    append_eos: bool
    epoch_caps: Mapping[str, int | None]
    mixture: Mapping[str, float]
    seq_len: int
    batch_size: int
    run_len: int
    chunk_cuts: Mapping[str, int] = field(default_factory=dict)  # bucket -> world it was cut for
    recipe: Mapping[str, Any] | None = None  # recipe id and hash, phase, phase start, global tokens
    recipe_changes: tuple[dict[str, Any], ...] = ()  # {step, from, to} of every accepted change of recipe
    shuffle_buffer: int = 0  # documents a shuffle window (0: file order); keyed by ``seed``
    packing: tuple[int, int] = (0, 0)  # (documents a packing window, bin length); (0, 0): off
    format: str = RECORD_FORMAT
    sampler_version: str = SAMPLER_VERSION
    step: int
    plan: Plan
    cursors: tuple[Mapping[str, tuple[int, int]], ...]  # per rank: bucket -> (k, off)
    skipped: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.snapshot_id,
            "base_snapshot_id": self.base_snapshot_id,
            "version_dir": self.version_dir,
            "switches": list(self.switches),
            "seed": self.seed,
            "chunk_tokens": self.chunk_tokens,
            "append_eos": self.append_eos,
            "epoch_caps": dict(self.epoch_caps),
            "mixture": dict(self.mixture),
            "seq_len": self.seq_len,
            "batch_size": self.batch_size,
            "run_len": self.run_len,
            "chunk_cuts": dict(self.chunk_cuts),
            "recipe": dict(self.recipe) if self.recipe is not None else None,
            "recipe_changes": list(self.recipe_changes),
            "shuffle_buffer": self.shuffle_buffer,
            # written only when on: every record of a run without packing keeps its bytes
            **({"packing": list(self.packing)} if self.packing[0] else {}),
            "format": self.format,
            "sampler_version": self.sampler_version,
            "step": self.step,
            "plan": self.plan.to_dict(),
            "cursors": [{b: list(c) for b, c in rank.items()} for rank in self.cursors],
            "skipped": list(self.skipped),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LoaderRecord:
        """A record as saved; ``ValueError`` when it is not a ``loader-state/1`` record."""
        if d.get("format") != RECORD_FORMAT:
            raise ValueError(f"not a loader state record (format {d.get('format')!r})")
        return cls(
            snapshot_id=d["snapshot_id"],
            base_snapshot_id=d.get("base_snapshot_id"),
            version_dir=d.get("version_dir"),
            switches=tuple(d.get("switches", [])),
            seed=int(d["seed"]),
            chunk_tokens=int(d["chunk_tokens"]),
            append_eos=bool(d["append_eos"]),
            epoch_caps=dict(d["epoch_caps"]),
            mixture=dict(d["mixture"]),
            seq_len=int(d["seq_len"]),
            batch_size=int(d["batch_size"]),
            run_len=int(d["run_len"]),
            chunk_cuts={b: int(w) for b, w in d.get("chunk_cuts", {}).items()},
            recipe=d.get("recipe"),
            recipe_changes=tuple(d.get("recipe_changes", [])),
            shuffle_buffer=int(d.get("shuffle_buffer", 0)),
            packing=tuple(int(x) for x in d.get("packing", (0, 0))),
            format=d["format"],
            sampler_version=d["sampler_version"],
            step=int(d["step"]),
            plan=Plan.from_dict(d["plan"]),
            cursors=tuple({b: (int(c[0]), int(c[1])) for b, c in rank.items()} for rank in d["cursors"]),
            skipped=tuple(int(i) for i in d["skipped"]),
        )


def merge_local_states(header: Mapping[str, Any], plan: Plan, local_states: list[Mapping]) -> LoaderRecord:
    """One global record from every rank's local state (what the checkpoint all-gather produces).

    ``header`` holds the facts every rank shares (snapshot id, sampler config: the record's fields up to
    ``packing``). Refuses an incomplete or inconsistent set: a record that misses a rank could not
    prove exactly-once.
    """
    ranks = sorted(s["rank"] for s in local_states)
    if ranks != list(range(plan.world)) or any(s["world"] != plan.world for s in local_states):
        raise ValueError(f"checkpoint needs the state of ranks 0..{plan.world - 1}, got ranks {ranks}")
    by_rank = sorted(local_states, key=lambda s: s["rank"])
    return LoaderRecord(
        **header,
        step=max(s["step"] for s in by_rank),
        plan=plan,
        cursors=tuple({b: (int(c[0]), int(c[1])) for b, c in s["cursors"].items()} for s in by_rank),
        skipped=tuple(sorted({i for s in by_rank for i in s["skipped"]})),
    )


def remaining_pieces(
    layout: Layout, plan: Plan, cursors: list[Mapping[str, tuple[int, int]]], bucket: str
) -> tuple[list[Piece], int | None]:
    """The unread parts of every epoch some rank has opened, and the last such epoch (None: none open).

    A rank whose cursor is in epoch ``e`` has read all its share of earlier epochs and none of later
    ones; so the open epochs are those up to the furthest rank's, and everything from each rank's
    cursor up to that epoch is still to be read.
    """
    queues = [RankQueue(layout, plan, bucket, r) for r in range(plan.world)]
    heads = [(q, *cursors[r].get(bucket, (0, 0))) for r, q in enumerate(queues)]
    current = [q.piece(k) for q, k, _ in heads]
    open_epochs = [p.epoch for p in current if p is not None]
    if not open_epochs:
        return [], None
    last = max(open_epochs)
    out: list[Piece] = []
    # walk all ranks epoch by epoch, so each epoch's chunk order is computed once (it stays cached)
    walkers = [[q, k, off, p] for (q, k, off), p in zip(heads, current, strict=True) if p is not None]
    for epoch in range(min(open_epochs), last + 1):
        for w in walkers:
            q, k, off, p = w
            while p is not None and p.epoch == epoch:
                if p.start + off < p.end:
                    out.append(Piece(p.epoch, p.order, p.shard, p.start + off, p.end))
                off, k = 0, k + 1
                p = q.piece(k)
            w[1:] = [k, off, p]
    return sorted(out), last


def redistribute(
    old_layout: Layout,
    record: LoaderRecord,
    new_world: int,
    translate: Callable[[Piece], list[Piece]] | None = None,
) -> Plan:
    """A plan for ``new_world`` ranks that reads exactly what the record's ranks had not read yet.

    Remainders of open epochs are sorted by (epoch, place in the epoch order) and dealt out strided;
    epochs nobody had opened are left to the formula, so they are assigned as if training had started
    on ``new_world`` ranks. ``translate`` maps a remainder of the record's streams onto this loader's
    (a move to another version of the build: :func:`loader.versions.translate_range`).
    """
    plan, cursors = record.plan, list(record.cursors)
    fresh: dict[str, int] = {}
    carry: dict[str, tuple[tuple[Piece, ...], ...]] = {}
    for bucket in sorted(old_layout.buckets):
        pieces, last = remaining_pieces(old_layout, plan, cursors, bucket)
        if last is None:  # nothing left in any opened epoch: whatever comes next is a fresh epoch
            # (a non-empty bucket always has a piece in rank 0's queue unless its epoch cap was reached)
            cap = old_layout.cap(bucket)
            fresh[bucket] = cap if cap is not None else plan.fresh_epoch.get(bucket, 0)
            continue
        fresh[bucket] = last + 1
        if translate is not None:
            pieces = [q for p in pieces for q in translate(p)]
        # ``pieces`` is sorted epoch-major, so dealing it out strided keeps each rank's carry in epoch
        # order and spreads the remainders of consecutive epochs over different ranks
        per_rank = [[pieces[i] for i in strided(len(pieces), r, new_world)] for r in range(new_world)]
        carry[bucket] = tuple(tuple(x) for x in per_rank)
    return Plan(new_world, fresh, carry)


def shards_read(layout: Layout, record: LoaderRecord | Mapping[str, Any]) -> set[int]:
    """The shards of which the record's ranks had read at least one position (in any epoch); ``record``
    parsed or as saved.

    Every epoch covers every position of every shard; epochs before the first still open were read
    whole, and in an open epoch a shard was read where less of it remains than it holds.
    """
    if not isinstance(record, LoaderRecord):
        record = LoaderRecord.from_dict(record)
    plan, cursors = record.plan, list(record.cursors)
    out: set[int] = set()
    for bucket, shards in sorted(layout.buckets.items()):
        pieces, last = remaining_pieces(layout, plan, cursors, bucket)
        started = (
            any(c.get(bucket, (0, 0)) != (0, 0) for c in cursors)
            or bucket in plan.fresh_epoch
            or bucket in plan.carry
        )
        if last is None:  # nothing left open: the bucket was read to its cap, if it was started at all
            out |= {i for i, _, n in shards if n > 0 and started}
            continue
        first = min(p.epoch for p in pieces) if pieces else last
        left: dict[int, int] = {}
        for p in pieces:
            left[p.shard] = left.get(p.shard, 0) + p.length
        for i, _, n in shards:
            if n > 0 and (first > 0 or left.get(i, 0) < (last - first + 1) * n):
                out.add(i)
    return out
