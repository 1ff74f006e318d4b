"""The loader positioned at a step of a run, for ``corpus trace``: resumed from the run's record, or
started from the recipe (or mixture) and seed when the run had no checkpoint before that step.

Nothing here knows the sampler: the loader is built as training built it, resumes from the record as
training resumed (redistributed on another world size, the record's skip set of corrupt shards kept),
moves to the step (by arithmetic, or by reading every step in between with ``replay``) and takes that
step's batch with its sources (:meth:`loader.SnapshotLoader.traced_batch`).

``replay`` matters only when a shard was found corrupt *after* the record: a rank that found it
substitutes the whole shard from then on, also for blocks that are sound, and only a process that read
what the rank read since the record finds it at the same step. Seeking verifies just the traced step's
blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from corpus.model.errors import UserError
from corpus.select.recipe import Recipe
from loader.dataset import SnapshotLoader
from loader.prefetch import DEFAULT_PREFETCH_STEPS
from loader.provenance import TokenSource, TracedBatch


def loader_at(
    snapshot: str | Path,
    step: int,
    rank: int,
    world: int,
    *,
    record: Mapping[str, Any] | None = None,
    recipe: Recipe | str | Path | None = None,
    mixture: Mapping[str, float] | None = None,
    seed: int | None = None,
    epoch_caps: Mapping[str, int | None] | int | None = None,
    seq_len: int | None = None,
    batch_size: int | None = None,
    run_len: int | None = None,
    chunk_tokens: int | None = None,
    append_eos: bool | None = None,
    shuffle_buffer: int | None = None,
    packing_window: int | None = None,
    replay: bool = False,
) -> SnapshotLoader:
    """Rank ``rank`` of ``world``'s loader just before ``step``, as the run had it.

    ``record``: the loader record the run resumed from (at or before ``step``, on any world size); its
    seed, mixture, caps, sequence length, batch size, run length, chunk size, EOS setting, shuffle
    buffer and packing window are the defaults of the arguments (a resume may change the mixture, batch size and sequence length: pass
    what the resumed run used). ``recipe``: the run's recipe (it then sets mixture, seed, caps and
    sequence length). Without either record or recipe, ``mixture`` None is the natural mixture.
    """
    rec = dict(record or {})
    if step < 0 or not 0 <= rank < world:
        raise UserError(f"step {step} rank {rank} of world {world}: need step >= 0 and 0 <= rank < world")
    if record is not None and step < int(rec["step"]):
        raise UserError(
            f"the record is from step {rec['step']}, after step {step}: trace that step with an "
            "earlier record, or with none (the recipe or mixture and the seed)"
        )
    # the run halted past its skip budget or it did not; a run that went on read substitutes, and so does this
    common = dict(
        dp_rank=rank,
        dp_world=world,
        max_skip_fraction=1.0,
        run_len=run_len if run_len is not None else int(rec.get("run_len", 8)),
        chunk_tokens=chunk_tokens if chunk_tokens is not None else int(rec.get("chunk_tokens", 1 << 20)),
        append_eos=append_eos if append_eos is not None else rec.get("append_eos"),
        prefetch_steps=DEFAULT_PREFETCH_STEPS if replay else 0,  # a trace reads one step
        packing_window=packing_window if packing_window is not None else int(rec.get("packing", (0,))[0]),
    )
    batch_size = batch_size if batch_size is not None else int(rec.get("batch_size", 1))
    if recipe is not None:
        loader = SnapshotLoader.from_recipe(recipe, snapshot, batch_size=batch_size, **common)
    else:
        loader = SnapshotLoader(
            snapshot,
            mixture if mixture is not None else rec.get("mixture"),
            seed=seed if seed is not None else int(rec.get("seed", 0)),
            seq_len=seq_len if seq_len is not None else int(rec.get("seq_len", 2048)),
            batch_size=batch_size,
            epoch_caps=epoch_caps if epoch_caps is not None else rec.get("epoch_caps"),
            shuffle_buffer=shuffle_buffer
            if shuffle_buffer is not None
            else int(rec.get("shuffle_buffer", 0)),
            **common,
        )
    if record is not None:
        loader.load_record(rec)
    if replay:
        while loader.step < step and not loader.finished:
            loader.next_batch()
    else:
        loader.seek(step)
    if loader.step != step:
        raise UserError(
            f"the stream of rank {rank} of {world} ends at step {loader.step}, before step {step}"
        )
    return loader


def trace_position(loader: SnapshotLoader, position: int) -> TokenSource:
    """The source of ``position`` of the batch ``loader`` delivers next (it takes that step)."""
    step = loader.step
    traced: TracedBatch | None = loader.traced_batch()
    if traced is None:
        raise UserError(f"rank {loader.rank} of {loader.world} reads nothing at step {step}")
    return traced.source(position)
