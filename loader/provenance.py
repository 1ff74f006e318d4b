"""Where each token of a delivered batch came from: the shard read, the stream position, the document.

The loader does not compute provenance on the side: :meth:`loader.SnapshotLoader.traced_batch` is its
ordinary step (the same plan, the same reads through :meth:`loader.faults.ShardStore.read`, which names
the file each part was read from, a corrupt shard's substitute included) with the parts kept. So
``corpus trace`` -- a loader resumed from the run's record (or started from the recipe and seed) that
seeks to a step and takes that step's batch -- names the token the run delivered, after epoch caps,
phase changes, resumes at other world sizes and substituted shards alike; a second implementation of
the sampler would drift from the first.
"""

from __future__ import annotations

from dataclasses import dataclass

from corpus.model.errors import UserError
from loader.faults import ShardStore, SourcedPart
from loader.sequences import Batch
from loader.state import SequencePlan


@dataclass(frozen=True)
class TokenSource:
    """One position of one rank's batch at one step, and where the loader read it.

    ``planned_shard``/``planned_position``: the stream position the sampler assigned; ``shard``/
    ``stream_position``: what was read (another shard of the bucket when the planned one is corrupt);
    ``doc``/``offset_in_doc``: the document of ``shard`` (manifest order) and the offset in it, which is
    the document's length for an EOS the loader appended after it (``appended_eos``). Shards here are
    the loader's streams: for a version with buckets by predicate a stream is a (shard, bucket) pair and
    :attr:`loader.versions.LoaderVersion.shard_of` names its shard.
    """

    step: int
    rank: int
    world: int
    phase: str | None
    row: int
    column: int
    bucket: str
    planned_shard: int
    planned_position: int
    shard: int
    stream_position: int
    doc: int
    offset_in_doc: int
    appended_eos: bool
    token_id: int

    @property
    def substituted(self) -> bool:
        return self.shard != self.planned_shard


class Padding(UserError):
    """The position is padding (after a bucket ran out, or a packed sequence's rest): no document is behind it."""


@dataclass(frozen=True)
class TracedBatch:
    """A batch as delivered, with the plan and the sourced parts of every row."""

    batch: Batch
    plans: tuple[SequencePlan, ...]
    parts: tuple[tuple[SourcedPart, ...], ...]
    rank: int
    world: int
    store: ShardStore

    def source(self, position: int) -> TokenSource:
        """The source of ``position`` of the batch, counted row-major over rows of ``seq_len`` tokens."""
        seq_len = int(self.batch.tokens.shape[1])
        row, column = divmod(position, seq_len)
        if not 0 <= position or row >= len(self.plans):
            raise IndexError(f"position {position} outside the batch of {len(self.plans)} × {seq_len} tokens")
        plan = self.plans[row]
        planned, at = None, column
        for shard, a, b in plan.segments:
            if at < b - a:
                planned = (shard, a + at)
                break
            at -= b - a
        if planned is None:
            raise Padding(
                f"position {position} is padding: a packed sequence's rest, or bucket {plan.bucket} ran "
                f"out at step {self.batch.step}"
            )
        at = column
        for part in self.parts[row]:
            n = int(part.tokens.shape[0])
            if at < n:
                doc, offset, appended = self.store.document_at(part.shard, part.start + at)
                return TokenSource(
                    self.batch.step,
                    self.rank,
                    self.world,
                    self.batch.phase,
                    row,
                    column,
                    plan.bucket,
                    planned[0],
                    planned[1],
                    part.shard,
                    part.start + at,
                    doc,
                    offset,
                    appended,
                    int(self.batch.tokens[row, column]),
                )
            at -= n
        raise AssertionError("the parts of a row hold its planned positions")
