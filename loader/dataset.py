"""``SnapshotLoader``: the training-time view of a snapshot, resumable exactly at any world size.

What rank ``r`` of ``W`` reads at step ``n`` is a pure function of (manifest, mixture, seed, epoch caps,
step, rank, world) -- or of (manifest, recipe, step, rank, world) for a loader made with
:meth:`SnapshotLoader.from_recipe` -- and of the plan the last resume produced; the only mutable state is
each rank's cursor per bucket (:mod:`loader.state`). ``state_dict`` / ``load_state_dict`` follow
``torch.distributed.checkpoint``'s Stateful protocol: ``state_dict`` all-gathers every rank's cursors
over the data-parallel process group (``dp_group``; default the whole world, gloo on CPU) into one
global record, identical on all ranks of the group, so it can be saved beside the model;
``load_state_dict`` on any number of ranks redistributes the unread remainder of every open epoch.
With tensor or pipeline parallelism, pass the data-parallel group: ranks of one model replica read
the same data, and only the replicas are data-parallel ranks.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from corpus.model import SnapshotManifest
from corpus.model.errors import UserError
from corpus.select.recipe import Recipe, load_recipe
from corpus.version.open import manifest_at
from loader.faults import (
    DEFAULT_IO_RETRY_DELAYS,
    DEFAULT_MAX_SKIP_FRACTION,
    DEFAULT_MEMORY_BUDGET_MB,
    ShardStore,
)
from loader.manifest import default_append_eos, load_manifest, natural_mixture_of, parsed_manifest
from loader.metrics import metrics_line
from loader.packing import PackingStats, check_packing_window
from loader.packing import resume_problem as packing_problem
from loader.phases import PhaseClock, PhaseSpan
from loader.prefetch import DEFAULT_PREFETCH_STEPS, Segments, StepReader, planned_steps, prefetch_depth
from loader.provenance import TracedBatch
from loader.sampler import SAMPLER_VERSION
from loader.sequences import Batch, assemble_batch, make_batch, pieces_per_row
from loader.shuffle import resume_problem, shuffle_window
from loader.sparse import DEFAULT_GAP_BYTES
from loader.state import (
    LoaderRecord,
    Plan,
    RankCursor,
    merge_local_states,
    redistribute,
    shards_read,
    stream_layout,
)
from loader.versions import LoaderVersion, RunMove, predicate_buckets, same_streams
from loader.world import World, gather_states


class ResumeRefused(UserError):
    """A checkpoint that cannot be resumed exactly with this loader, and no override was given."""


def _log_line(rank: int, world: int, msg: str) -> None:
    print(f"[loader rank {rank}/{world}] {msg}", file=sys.stderr, flush=True)


def _recipe_name(recipe_id: str | None, recipe_hash: str | None) -> str:
    return f"recipe {recipe_id} ({recipe_hash[:19]}…)" if recipe_hash else "no recipe"


class SnapshotLoader(IterableDataset):
    """Fixed-length training sequences of a snapshot for one data-parallel rank.

    Iterating yields one :class:`Batch` per step; wrap it in ``DataLoader(loader, batch_size=None)``
    (it batches itself, and its state lives in this process, so ``num_workers=0``).
    """

    def __init__(
        self,
        snapshot: str | Path | SnapshotManifest,
        mixture: Mapping[str, float] | None = None,
        seed: int = 0,
        seq_len: int = 2048,
        batch_size: int = 1,
        dp_rank: int | None = None,
        dp_world: int | None = None,
        *,
        epoch_caps: Mapping[str, int | None] | int | None = None,
        run_len: int = 8,
        chunk_tokens: int = 1 << 20,
        append_eos: bool | None = None,
        max_skip_fraction: float = DEFAULT_MAX_SKIP_FRACTION,
        root: str | Path | None = None,
        verbose: bool = False,
        dp_group: Any = None,
        memory_budget_mb: int = DEFAULT_MEMORY_BUDGET_MB,
        io_retry_delays: Sequence[float] = DEFAULT_IO_RETRY_DELAYS,
        recipe: Recipe | None = None,
        prefetch_steps: int = DEFAULT_PREFETCH_STEPS,
        gap_bytes: int = DEFAULT_GAP_BYTES,
        packing_window: int = 0,
        shuffle_buffer: int | None = None,
    ) -> None:
        """``recipe`` (what :meth:`from_recipe` passes): the mixture, seed, sequence length and epoch caps are
        the recipe's, phase by phase, and ``run_len`` is the default of phases that state none.
        ``prefetch_steps``: steps a background thread reads ahead (0: read each step when it is asked for).
        ``gap_bytes``: selected documents of a version closer than this are fetched in one request.
        ``shuffle_buffer``: documents a shuffle window (0 or 1: off; with a recipe, the recipe's).
        ``packing_window``: documents a packing window (0: off; with a recipe, bins of its longest phase)."""
        super().__init__()
        if recipe is not None and (
            mixture is not None or epoch_caps is not None or shuffle_buffer is not None
        ):
            raise ValueError(
                "a recipe sets the mixture, epoch caps and shuffle buffer: pass none of them with it"
            )
        # a version reads the build's shards through its selection; a snapshot reads every document. The
        # manifest is parsed once, whichever it is
        found = manifest_at(Path(snapshot)) if isinstance(snapshot, (str, Path)) else None
        self.version = LoaderVersion.of(found)
        # streams are what the sampler and the shard store index: a snapshot's or version's shards, or a
        # version's (shard, predicate bucket) pairs (``stream_manifest``: one entry per stream)
        if self.version is not None:
            self.manifest, self.root = self.version.manifest, self.version.root
            self.snapshot_id, self.stream_shards = self.version.snapshot_id, self.version.stream_shards
            self.stream_manifest = self.version.stream_manifest
        else:
            self.manifest, self.root = (
                parsed_manifest(*found, root) if found is not None else load_manifest(snapshot, root)
            )
            self.snapshot_id, self.stream_shards = self.manifest.snapshot_id, self.manifest.shard_keys()
            self.stream_manifest = self.manifest
        self.dp_group = dp_group
        if dp_group is not None and (dp_rank is None or dp_world is None):
            dp_rank = dist.get_rank(dp_group) if dp_rank is None else dp_rank
            dp_world = dist.get_world_size(dp_group) if dp_world is None else dp_world
        if dp_rank is None or dp_world is None:
            world = World.detect()
            dp_rank = world.rank if dp_rank is None else dp_rank
            dp_world = world.world_size if dp_world is None else dp_world
        if not 0 <= dp_rank < dp_world:
            raise ValueError(f"dp_rank {dp_rank} outside a world of {dp_world}")
        buckets = sorted({s.bucket for s in self.stream_shards})
        if recipe is not None:
            # the buckets are whatever this snapshot or version defines; the recipe only names them
            recipe.check_pinned(self.snapshot_id, self.manifest.tokenizer.get("sha256"))
            recipe.check_buckets(buckets)
            first = recipe.phases[0]
            mixture, seed, seq_len, epoch_caps = (
                dict(first.weights),
                recipe.seed,
                first.seq_len,
                dict(first.max_epochs),
            )
        self.mixture = dict(natural_mixture_of(self.stream_shards) if mixture is None else mixture)
        unknown = sorted(set(self.mixture) - set(buckets))
        if unknown:
            raise UserError(f"mixture names buckets the snapshot does not have: {unknown} (it has {buckets})")
        if any(w < 0 for w in self.mixture.values()) or not any(w > 0 for w in self.mixture.values()):
            raise UserError("mixture weights must be >= 0 with at least one > 0")
        if isinstance(epoch_caps, int) or epoch_caps is None:
            epoch_caps = {b: epoch_caps for b in buckets}
        self.epoch_caps = {b: epoch_caps.get(b) for b in buckets}
        if "eos_id" not in self.manifest.tokenizer:
            raise UserError("the snapshot manifest's tokenizer has no eos_id")
        self.eos_id = int(self.manifest.tokenizer["eos_id"])
        self.seed, self.seq_len, self.batch_size = int(seed), int(seq_len), int(batch_size)
        if append_eos is None:
            append_eos = default_append_eos(self.manifest)
        self.run_len, self.chunk_tokens, self.append_eos = int(run_len), int(chunk_tokens), bool(append_eos)
        self.rank, self.world = dp_rank, dp_world
        self.verbose = verbose
        self.shuffle_buffer = shuffle_window(recipe.shuffle_buffer if recipe is not None else shuffle_buffer)
        self.layout = stream_layout(
            self.stream_shards, self.seed, self.chunk_tokens, self.epoch_caps, self.append_eos, self.world
        )
        if memory_budget_mb < 1:
            raise UserError(f"memory_budget_mb must be positive, got {memory_budget_mb}")
        seq_max = max(p.seq_len for p in recipe.phases) if recipe is not None else self.seq_len
        window = check_packing_window(packing_window)  # docs/loader.md, Packing
        self.packing = (window, seq_max) if window else (0, 0)  # (window, bin length)
        self.packing_stats = PackingStats(*self.packing) if window else None
        self.store = ShardStore(
            self.root,
            self.stream_manifest,
            self.eos_id,
            self.append_eos,
            max_skip_fraction,
            log=partial(_log_line, self.rank, self.world),  # not self: the prefetch thread holds the store
            memory_budget_bytes=int(memory_budget_mb) << 20,
            io_retry_delays=io_retry_delays,
            selection=self.version.selected if self.version is not None else None,
            gap_bytes=int(gap_bytes),
            shuffle=(self.shuffle_buffer, self.seed),
            packing=self.packing,
        )
        self.cursor = RankCursor(self.layout, Plan.fresh(self.world), self.rank)
        self.prefetch_depth = prefetch_depth(
            int(prefetch_steps), int(memory_budget_mb) << 20, self.batch_size * seq_max * 8
        )
        self.reader = StepReader(self.store, self.prefetch_depth)
        self.switches: list[dict[str, Any]] = []  # (step, from, to) of every move between versions
        self.recipe_changes: list[dict[str, Any]] = []  # (step, from, to) of every accepted change of recipe
        self.recipe, self.default_run_len = recipe, self.run_len
        self.clock: PhaseClock | None = None
        self.span: PhaseSpan | None = None  # the phase of the current step (None: no recipe, or it is over)
        if recipe is not None:
            recipe.check_supply({b: sum(s[2] for s in shards) for b, shards in self.layout.buckets.items()})
            self.clock = PhaseClock(recipe, self.world, self.batch_size)
            self._sync_phase()

    @classmethod
    def from_recipe(
        cls,
        recipe: Recipe | str | Path,
        snapshot: str | Path | SnapshotManifest,
        batch_size: int = 1,
        dp_rank: int | None = None,
        dp_world: int | None = None,
        **kwargs: Any,
    ) -> SnapshotLoader:
        """A loader that runs ``recipe`` (a :class:`~corpus.select.recipe.Recipe` or a TOML file) on ``snapshot``.

        Refused (one line, :class:`~corpus.select.recipe.RecipeError`) when the recipe is pinned to another
        snapshot or tokenizer, names a bucket the snapshot (or version) does not define, or has caps that
        cannot supply a phase. Phases switch at the step where the global token count (``dp_world ·
        batch_size · seq_len`` per step) reaches each phase's end, the same step on every rank
        (:class:`loader.phases.PhaseClock`); each bucket's stream position and epoch count carry over.
        ``kwargs`` are the other loader parameters (``run_len``: the default of phases without one).
        """
        clash = sorted(set(kwargs) & {"mixture", "seed", "seq_len", "epoch_caps", "shuffle_buffer"})
        if clash:
            raise ValueError(f"the recipe sets {clash}: pass them in the recipe, not to from_recipe")
        if not isinstance(recipe, Recipe):
            recipe = load_recipe(recipe)
        return cls(
            snapshot, batch_size=batch_size, dp_rank=dp_rank, dp_world=dp_world, recipe=recipe, **kwargs
        )

    # --- recipe phases ------------------------------------------------------------------------------

    def _apply_phase(self, span: PhaseSpan) -> None:
        """The phase's weights, sequence length, run length and caps (not yet the cursor)."""
        phase = span.phase
        self.span = span
        self.mixture, self.seq_len = dict(phase.weights), phase.seq_len
        self.run_len = phase.run_len or self.default_run_len
        self.epoch_caps = {b: phase.max_epochs.get(b) for b in self.layout.buckets}
        self.layout = replace(self.layout, epoch_caps=dict(self.epoch_caps))

    def _sync_phase(self) -> None:
        """Enter the phase of the current step if it is a new one. The cursors carry over: a bucket's stream
        goes on where it stood and its epochs are counted across phases; caps only rise (the recipe
        says so), so a bucket at its old cap comes back when a phase raises it."""
        span = self.clock.at(self.cursor.step)
        if span is None:
            self.span = None  # the recipe is over
        elif span != self.span:
            self._apply_phase(span)
            self.cursor = RankCursor(
                self.layout, self.cursor.plan, self.rank, self.cursor.step, self.cursor.cursors
            )

    @property
    def phase(self) -> str | None:
        """The name of the current step's phase (None without a recipe or after its last phase)."""
        return self.span.name if self.span is not None else None

    @property
    def finished(self) -> bool:
        """No batch will come any more: the recipe's last phase is over, or (without a recipe) every bucket
        of this rank reached its cap. With a recipe, a rank with nothing left to read in a phase gets
        None from ``next_batch`` but is not finished: the next phase may raise a cap."""
        if self.recipe is not None:
            return self.span is None
        return not self.cursor.active

    # --- iteration --------------------------------------------------------------------------------

    def _log(self, msg: str) -> None:
        print(f"[loader rank {self.rank}/{self.world}] {msg}", file=sys.stderr, flush=True)

    @property
    def step(self) -> int:
        return self.cursor.step

    def __iter__(self) -> Iterator[Batch]:
        if get_worker_info() is not None:
            raise RuntimeError(
                "SnapshotLoader keeps its resume state in this process: use DataLoader(num_workers=0)"
            )
        while (batch := self.next_batch()) is not None:
            yield batch

    def next_batch(self) -> Batch | None:
        """This rank's batch of the next step; None when it has nothing to read. With a recipe the step
        counts even then (every rank changes phase at the same step), so call it in step with the others."""
        delivered = self._deliver()
        return delivered[0] if delivered is not None else None

    def traced_batch(self) -> TracedBatch | None:
        """:meth:`next_batch` with the plan and the sourced parts it was read from (what ``corpus trace``
        asks: the step delivery takes, not a replica of it); None when this rank reads nothing."""
        delivered = self._deliver()
        if delivered is None:
            return None
        batch, plans, sourced = delivered
        return TracedBatch(batch, tuple(plans), sourced, self.rank, self.world, self.store)

    def _deliver(self) -> tuple[Batch, list, tuple] | None:
        """The next step's batch, its sequences' plans and the parts they were read from."""
        if self.prefetch_depth and not self.reader.running and not self.finished:
            self._start_prefetch()
        planned = self._plan_step()
        if planned is None or planned[2] is None:
            return None
        step, span, plans = planned
        sourced = self.reader.parts(step, tuple([sp.segments for sp in plans]))
        tokens, bounds, valid = assemble_batch(
            sourced,
            [sp.pad for sp in plans],
            self._seq_len_of(span),
            self.eos_id,
        )
        if self.packing_stats is not None:
            self._count_packing(plans, pieces_per_row(bounds, valid, tokens.shape[1]), valid)
        name = span.name if span is not None else None
        batch = make_batch(tokens, bounds, valid, tuple([sp.bucket for sp in plans]), step, name)
        return batch, plans, sourced

    def _count_packing(self, plans: list, pieces: Any, valid: Any) -> None:
        """Add a delivered step to the packing figures (``metrics``)."""
        for sp, n, v in zip(plans, pieces.tolist(), valid.tolist(), strict=True):
            self.packing_stats.add_row(n, v)
            for shard, a, b in sp.segments:
                self.packing_stats.add_range(self.store.packing_counts(shard, a, b))

    @property
    def _unit_end(self) -> Any:
        """Where a sequence may end inside a stream (packing's bins), None without packing."""
        return self.store.bin_end if self.packing[0] else None

    def _seq_len_of(self, span: PhaseSpan | None) -> int:
        """The sequence length of a step in ``span`` (the loader's own without a recipe)."""
        return span.phase.seq_len if span is not None else self.seq_len

    def _plan_step(self) -> tuple[int, PhaseSpan | None, list | None] | None:
        """Advance the cursor (and the phase) by one step: (step, its phase, its sequences' plans); None when
        the rank is finished; plans None for a recipe step with nothing to read (the step still counts)."""
        span = self.span
        if self.recipe is not None and span is None:
            return None
        step = self.cursor.step
        plans = self.cursor.next_batch(
            self.mixture,
            self.seed,
            self.run_len,
            self.seq_len,
            self.batch_size,
            run_origin=span.run_origin if span is not None else 0,
            unit_end=self._unit_end,
        )
        if plans is None and span is None:
            return None
        if plans is None:
            self.cursor.step += 1
        if span is not None:
            self._sync_phase()
        return step, span, plans

    def _planned_segments(self) -> tuple[int, Segments | None] | None:
        planned = self._plan_step()
        if planned is None:
            return None
        step, _, plans = planned
        return step, tuple(sp.segments for sp in plans) if plans is not None else None

    # --- prefetch and metrics -----------------------------------------------------------------------

    def _start_prefetch(self) -> None:
        """A reader thread planning on a copy of this loader's cursor and phase, from the next step on."""
        twin = copy.copy(self)
        twin.cursor, twin.reader, twin.dp_group = self.cursor.copy(), None, None
        self.reader.start(self, planned_steps(twin._planned_segments))

    def metrics(self) -> dict[str, Any]:
        """Read latency p50/p99, bytes read, shard cache hits and opens, the consumer's wait per step and the
        prefetch stalls (docs/loader.md, "Metrics"): wall-clock figures, not part of any checkpoint."""
        store = self.store
        return {
            "step": self.step,
            "prefetch_steps": self.prefetch_depth,
            **self.reader.metrics.snapshot(),
            "bytes_read": store.bytes_read,
            "shard_cache_hits": store.cache_hits,
            "shard_opens": store.opens,
            "bytes_hashed": store.bytes_hashed,
            **(self.packing_stats.as_metrics() if self.packing_stats is not None else {}),
        }

    def metrics_line(self) -> str:
        """:meth:`metrics` as one training-log line (what a training script prints every K steps)."""
        return metrics_line(self.rank, self.world, self.step, self.metrics())

    def close(self) -> None:
        """Stop the prefetch thread (it also stops when the loader is collected)."""
        self.reader.stop()

    def seek(self, step: int) -> None:
        """Jump forward to ``step`` without reading anything (as if the steps before had been consumed)."""
        self.reader.stop()
        if self.recipe is None:
            self.cursor.seek(
                step,
                self.mixture,
                self.seed,
                self.run_len,
                self.seq_len,
                self.batch_size,
                unit_end=self._unit_end,
            )
            return
        while self.cursor.step < step and self.span is not None:
            target = min(step, self.span.end)
            self.cursor.seek(
                target,
                self.mixture,
                self.seed,
                self.run_len,
                self.seq_len,
                self.batch_size,
                run_origin=self.span.run_origin,
                unit_end=self._unit_end,
            )
            self.cursor.step = target  # a rank with nothing left in the phase still follows the clock
            self._sync_phase()

    # --- checkpoint state ---------------------------------------------------------------------------

    def _header(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.snapshot_id,
            # what a later loader needs to move this run to another version of the same build
            "base_snapshot_id": self.manifest.snapshot_id,
            "version_dir": str(self.version.version.dir.resolve()) if self.version is not None else None,
            "switches": tuple(self.switches),
            "seed": self.seed,
            "chunk_tokens": self.chunk_tokens,
            "append_eos": self.append_eos,
            "epoch_caps": dict(sorted(self.epoch_caps.items())),
            "mixture": dict(sorted(self.mixture.items())),
            "seq_len": self.seq_len,
            "batch_size": self.batch_size,
            "run_len": self.run_len,
            "chunk_cuts": dict(self.layout.cuts),
            "recipe": self._recipe_header(),
            "recipe_changes": tuple(self.recipe_changes),
            "shuffle_buffer": self.shuffle_buffer,
            "packing": self.packing,
        }

    def _recipe_header(self) -> dict[str, Any] | None:
        """Which recipe, and where its clock stands: the global token count at this step (what a resume on
        another world continues from) and the first step of the current phase (what its runs count from)."""
        if self.recipe is None:
            return None
        span = self.span
        return {
            "recipe_id": self.recipe.recipe_id,
            "recipe_hash": self.recipe.recipe_hash,
            "phase": span.index if span is not None else len(self.recipe.phases),
            "phase_name": span.name if span is not None else None,
            "phase_start": span.run_origin if span is not None else None,
            "tokens": self.clock.tokens_at(self.cursor.step),
        }

    def local_state(self) -> dict[str, Any]:
        """This rank's part of the record (what ``state_dict`` all-gathers): the delivered position, and the
        shards found corrupt by the steps delivered so far (not by those the prefetch read ahead)."""
        with self.store.lock:
            return self.cursor.local_state(self.store.skipped - self.reader.ahead())

    def global_record(self, local_states: list[Mapping[str, Any]]) -> dict[str, Any]:
        """The record of every rank's local state, as saved (:meth:`LoaderRecord.to_dict`)."""
        return merge_local_states(self._header(), self.cursor.plan, list(local_states)).to_dict()

    def state_dict(self) -> dict[str, Any]:
        """The global record, all-gathered over ``dp_group`` (a collective: every rank of the group calls it
        at the same checkpoint; with several data-parallel groups, each gathers its own replicas)."""
        return {
            "record": json.dumps(
                self.global_record(gather_states(self.local_state(), self.world, self.dp_group)),
                sort_keys=True,
            )
        }

    def load_state_dict(
        self,
        state: Mapping[str, Any],
        *,
        allow_snapshot_mismatch: bool = False,
        allow_version_mismatch: bool = False,
        allow_tombstoned: bool = False,
        allow_recipe_mismatch: bool = False,
    ) -> None:
        record = state["record"]
        record = json.loads(record) if isinstance(record, (str, bytes)) else record
        self.load_record(
            record,
            allow_snapshot_mismatch=allow_snapshot_mismatch,
            allow_version_mismatch=allow_version_mismatch,
            allow_tombstoned=allow_tombstoned,
            allow_recipe_mismatch=allow_recipe_mismatch,
        )

    def load_record(
        self,
        record: Mapping[str, Any],
        *,
        allow_snapshot_mismatch: bool = False,
        allow_version_mismatch: bool = False,
        allow_tombstoned: bool = False,
        allow_recipe_mismatch: bool = False,
    ) -> None:
        """Resume from a global record. A record of another version of the same build moves the run
        to this loader's version (docs/loader.md, "Moving to another version"); a record that read a
        shard this version tombstones is refused unless ``allow_tombstoned``; a record of another recipe
        (or of a run without one, for a loader with one, and the reverse) unless ``allow_recipe_mismatch``,
        which is then noted in the record (``recipe_changes``). ``record``: as saved (:meth:`global_record`)."""
        self.reader.stop()
        try:
            rec = LoaderRecord.from_dict(record)
        except ValueError as e:
            raise ResumeRefused(str(e)) from None
        # another selection of this build (a version, or the build itself when no version dir is recorded)
        same_build = rec.base_snapshot_id == self.manifest.snapshot_id and (
            rec.version_dir is not None or rec.snapshot_id == rec.base_snapshot_id
        )
        if rec.snapshot_id != self.snapshot_id and not same_build and not allow_snapshot_mismatch:
            raise ResumeRefused(
                f"checkpoint was taken on snapshot {rec.snapshot_id}, this loader reads "
                f"{self.snapshot_id}; pass allow_snapshot_mismatch=True to start this snapshot's "
                "epochs from the recorded step instead"
            )
        if rec.sampler_version != SAMPLER_VERSION and not allow_version_mismatch:
            raise ResumeRefused(
                f"checkpoint was taken with sampler {rec.sampler_version}, this is {SAMPLER_VERSION}; "
                "pass allow_version_mismatch=True to accept a different stream"
            )
        self._resume_recipe(rec, allow_recipe_mismatch)
        skipped = {i for i in rec.skipped if i < len(self.stream_manifest.shards)}
        cursors = None
        self.switches = list(rec.switches)
        moving = rec.sampler_version == SAMPLER_VERSION and rec.snapshot_id != self.snapshot_id and same_build
        old = self._recorded_version(rec) if moving else None
        if moving and not same_streams(old, self.version):
            theirs, mine = (", ".join(predicate_buckets(v)) or "physical" for v in (old, self.version))
            if not allow_snapshot_mismatch:
                raise ResumeRefused(
                    f"checkpoint was taken on version {rec.snapshot_id} with buckets ({theirs}), this loader "
                    f"reads {self.snapshot_id} with buckets ({mine}): a run moves only between versions with the same "
                    "buckets in the same order; pass allow_snapshot_mismatch=True to start this version's epochs "
                    "from the recorded step instead"
                )
            moving = False  # fresh epochs of this version's streams, below
        if moving:
            self._check_shuffle(rec, moving=True)
            if rec.append_eos != self.append_eos:
                raise ResumeRefused(
                    "checkpoint was taken with a different append_eos: stream positions differ"
                )
            plan = self._move_plan(rec, old, allow_tombstoned)
            self.switches.append({"step": rec.step, "from": rec.snapshot_id, "to": self.snapshot_id})
            if self.verbose:
                self._log(f"moved from version {rec.snapshot_id} to {self.snapshot_id} at step {rec.step}")
        elif rec.snapshot_id != self.snapshot_id or rec.sampler_version != SAMPLER_VERSION:
            plan = Plan.fresh(self.world)  # the recorded positions mean nothing here: new epochs, same step
            skipped = set()
        else:
            # the layout the record was taken under, cut as recorded (records before cuts: none)
            recorded = stream_layout(
                self.stream_shards,
                rec.seed,
                rec.chunk_tokens,
                rec.epoch_caps,
                rec.append_eos,
                rec.plan.world,
                cuts=rec.chunk_cuts,
            )
            if rec.append_eos != self.append_eos:
                raise ResumeRefused(
                    "checkpoint was taken with a different append_eos: stream positions differ"
                )
            self._check_shuffle(rec, moving=False)
            if rec.plan.world == self.world and recorded == self.layout:
                # Same world, same sampler inputs: continue every rank's own stream, bit for bit.
                plan = rec.plan
                cursors = dict(rec.cursors[self.rank])
            else:
                plan = redistribute(recorded, rec, self.world)
        self.store.skipped |= skipped
        self.store._check_budget()
        self.cursor = RankCursor(self.layout, plan, self.rank, step=rec.step, cursors=cursors)
        if self.verbose:
            self._log(f"resumed at step {rec.step} from a record of {rec.plan.world} ranks")

    def _check_shuffle(self, record: LoaderRecord, moving: bool) -> None:
        """Refuse a record whose stream positions name other documents here: another shuffle window or,
        with one, another seed; other packing bins; a move between versions with either on (docs/loader.md)."""
        problem = resume_problem(
            record.shuffle_buffer, record.seed, self.shuffle_buffer, self.seed, moving
        ) or packing_problem(tuple(record.packing), self.packing, moving)
        if problem:
            raise ResumeRefused(problem)

    def _resume_recipe(self, record: LoaderRecord, allow_override: bool) -> None:
        """Check the record's recipe against this loader's and restart the phase clock at the recorded step
        and global token count (so the boundaries left stay at the same global tokens on any world)."""
        recorded = record.recipe
        old = recorded["recipe_hash"] if recorded else None
        new = self.recipe.recipe_hash if self.recipe is not None else None
        changes = list(record.recipe_changes)
        if old != new:
            if not allow_override:
                theirs = _recipe_name(recorded["recipe_id"] if recorded else None, old)
                mine = _recipe_name(self.recipe.recipe_id if self.recipe is not None else None, new)
                raise ResumeRefused(
                    f"checkpoint was taken under {theirs}, this loader runs {mine}; pass allow_recipe_mismatch=True "
                    "to go on under this loader's recipe from the recorded global token count"
                )
            changes.append({"step": record.step, "from": old, "to": new})
            self._log(f"recipe changed at step {record.step}: {old} -> {new} (allow_recipe_mismatch)")
        self.recipe_changes = changes
        if self.recipe is None:
            return
        step = record.step
        if recorded:
            tokens = int(recorded["tokens"])
        else:  # a run without a recipe: its steps were all of the recorded shape
            tokens = step * record.plan.world * record.batch_size * record.seq_len
        same = old == new and recorded["phase_start"] is not None
        self.clock = PhaseClock(
            self.recipe,
            self.world,
            self.batch_size,
            step,
            tokens,
            phase_start=(int(recorded["phase"]), int(recorded["phase_start"])) if same else None,
        )
        span = self.clock.at(step)
        if span is not None:
            self._apply_phase(span)
        self.span = span

    def _recorded_version(self, record: LoaderRecord) -> LoaderVersion | None:
        """The version a record of another selection of this build was taken on (None: the build itself)."""
        if not record.version_dir:
            return None
        old = LoaderVersion.open(Path(record.version_dir))
        if old is None or old.snapshot_id != record.snapshot_id:
            raise ResumeRefused(
                f"checkpoint was taken on version {record.snapshot_id} at {record.version_dir}, "
                "which is no longer there: its selection is needed to move the run to this version"
            )
        return old

    def _move_plan(self, record: LoaderRecord, old: LoaderVersion | None, allow_tombstoned: bool) -> Plan:
        """The plan that moves a run recorded on another selection of this build (``old``, with the same
        streams) onto this one: positions already read stay read, documents this version drops are never
        read again, and every other unread position of the open epochs is read exactly once."""
        move = RunMove(self.stream_manifest, self.root, old, self.version, self.append_eos)
        recorded = stream_layout(
            move.old_stream_shards,
            record.seed,
            record.chunk_tokens,
            record.epoch_caps,
            record.append_eos,
            record.plan.world,
            cuts=record.chunk_cuts,
        )
        read = shards_read(recorded, record)
        for i in move.newly_tombstoned():
            if i in read:
                name = self.version.name(i)
                msg = (
                    f"checkpoint at step {record.step} read shard {name}, which version {self.snapshot_id} "
                    f"tombstones ({self.version.tombstones[name]['reason']})"
                )
                if not allow_tombstoned:
                    raise ResumeRefused(f"{msg}; pass allow_tombstoned=True to go on without it")
                self._log(f"{msg}; going on without it (allow_tombstoned)")
        return redistribute(recorded, record, self.world, translate=move.translate)
