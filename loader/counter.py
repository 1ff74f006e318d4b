"""The online mixture counter: per-bucket tokens of the current phase, summed over the data-parallel ranks.

Each rank counts the tokens it delivered (padding excluded) in the current phase; every ``every`` steps
:meth:`MixtureCounter.reduce` all-reduces them and compares each bucket's share with the phase's target
(past ``tolerance`` it warns or raises :class:`MixtureDrift`). Counts restart at each phase boundary and
are part of the checkpoint (global totals, restored on the group's rank 0), so a resumed run reports the
whole phase. See docs/loader.md ("Recipes": online counter).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.stateful import Stateful

from corpus.model.errors import UserError
from loader.sequences import Batch

log = logging.getLogger(__name__)


class MixtureDrift(UserError):
    """A bucket's realized token share strayed past the tolerance from the phase's target."""


class MixtureCounter(Stateful):
    """Per-bucket delivered tokens of one rank in the current phase, reduced over ``group`` on demand."""

    def __init__(
        self, buckets: list[str], every: int, tolerance: float, action: str = "warn", group: Any = None
    ) -> None:
        if every < 1 or not tolerance > 0 or action not in ("warn", "raise"):
            raise ValueError("every must be positive, tolerance > 0, action 'warn' or 'raise'")
        self.buckets, self.every, self.tolerance, self.action, self.group = (
            list(buckets),
            every,
            tolerance,
            action,
            group,
        )
        self.index = {b: i for i, b in enumerate(self.buckets)}
        self.phase: str | None = None
        self.targets: dict[str, float] = {}
        self.local = np.zeros(len(self.buckets), dtype=np.int64)

    def add(self, batch: Batch | None, phase: str | None, weights: Mapping[str, float]) -> None:
        """Count one step's batch (None: nothing read) of ``phase`` with its ``weights``; a new phase restarts
        (so does the first step after a restore of another phase's counts)."""
        if phase != self.phase:
            self.local[:] = 0
        if phase != self.phase or not self.targets:
            total = sum(weights.values())
            self.phase, self.targets = phase, {b: w / total for b, w in sorted(weights.items()) if w > 0}
        if batch is not None:
            for bucket, mask in zip(batch.buckets, batch.loss_mask, strict=True):
                self.local[self.index[bucket]] += int(mask.sum())

    def due(self, steps_done: int) -> bool:
        """Whether every rank reduces now, after ``steps_done`` steps of the run."""
        return steps_done % self.every == 0

    def reduce(self, step: int) -> dict[str, Any]:
        """Sum the counts over the group (a collective: every rank, same step) and check them against the
        phase's targets; the report (identical on every rank), after warning or raising past the tolerance."""
        tokens = self._global_tokens()
        total = sum(tokens.values())
        realized = {b: tokens[b] / total if total else 0.0 for b in self.buckets}
        diff = {b: realized[b] - self.targets.get(b, 0.0) for b in self.buckets}
        worst = max(self.buckets, key=lambda b: abs(diff[b]))
        report = {
            "step": step,
            "phase": self.phase,
            "tokens": tokens,
            "target": dict(self.targets),
            "realized": realized,
            "max_abs_diff": abs(diff[worst]),
        }
        if total and abs(diff[worst]) > self.tolerance:
            msg = (
                f"step {step} phase {self.phase}: bucket {worst!r} realized {realized[worst]:.4f} of the tokens, "
                f"target {self.targets.get(worst, 0.0):.4f} (tolerance {self.tolerance})"
            )
            if self.action == "raise":
                raise MixtureDrift(msg)
            log.warning(msg)
        return report

    def _global_tokens(self) -> dict[str, int]:
        """Per-bucket tokens of the phase summed over the group (a collective)."""
        counts = torch.from_numpy(self.local.copy())
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(counts, group=self.group)
        return {b: int(counts[i]) for i, b in enumerate(self.buckets)}

    def state_dict(self) -> dict[str, Any]:
        """The phase and its per-bucket totals over the group (a collective: every rank of the group calls it
        at the same checkpoint), identical on every rank, so it restores on any number of ranks."""
        return {"counts": json.dumps({"phase": self.phase, "tokens": self._global_tokens()}, sort_keys=True)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take a checkpoint's totals: on the group's rank 0 only, so that the next all-reduce counts them once."""
        saved = json.loads(state["counts"])
        self.phase, self.targets = saved["phase"], {}
        self.local[:] = 0
        dropped = sorted(set(saved["tokens"]) - set(self.index))
        if dropped:
            log.warning(
                "the checkpoint counted tokens of buckets this run does not have: %s (left out)", dropped
            )
        if not (dist.is_available() and dist.is_initialized()) or dist.get_rank(self.group) == 0:
            for bucket, n in saved["tokens"].items():
                if bucket in self.index:
                    self.local[self.index[bucket]] = int(n)
