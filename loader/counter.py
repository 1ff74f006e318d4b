"""The online mixture counter: per-bucket tokens of the current phase, summed over the data-parallel ranks.

``corpus recipe-audit`` says before a run what the mixture will be; this says during the run what it
is, from the tokens actually delivered (padding excluded), so a substituted shard, a bucket that ran out
early or a wrong recipe shows up in the training log while it matters. Each rank counts what it
delivered in the current phase; every ``every`` steps the training loop calls :meth:`MixtureCounter.reduce`
on every rank of the group at the same step (one all-reduce of one int64 per bucket), and each bucket's
realized share is compared with the phase's target: past ``tolerance`` (absolute difference of shares)
it warns or raises :class:`MixtureDrift`, as configured.

Counts cover the current phase since this process entered it: they restart at every phase boundary (the
same step on every rank) and at a resume, so after a resume inside a phase they describe the stretch
since the resume.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from corpus.errors import UserError
from loader.sequences import Batch

log = logging.getLogger(__name__)


class MixtureDrift(UserError):
    """A bucket's realized token share strayed past the tolerance from the phase's target."""


class MixtureCounter:
    """Per-bucket delivered tokens of one rank in the current phase, reduced over ``group`` on demand."""

    def __init__(self, buckets: list[str], every: int, tolerance: float, action: str = "warn",
                 group: Any = None) -> None:
        if every < 1 or not tolerance > 0 or action not in ("warn", "raise"):
            raise ValueError("every must be positive, tolerance > 0, action 'warn' or 'raise'")
        self.buckets, self.every, self.tolerance, self.action, self.group = list(buckets), every, tolerance, action, group
        self.index = {b: i for i, b in enumerate(self.buckets)}
        self.phase: str | None = None
        self.targets: dict[str, float] = {}
        self.local = np.zeros(len(self.buckets), dtype=np.int64)

    def add(self, batch: Batch | None, phase: str | None, weights: Mapping[str, float]) -> None:
        """Count one step's batch (None: nothing read) of ``phase`` with its ``weights``; a new phase restarts."""
        if phase != self.phase or not self.targets:
            total = sum(weights.values())
            self.phase, self.targets = phase, {b: w / total for b, w in sorted(weights.items()) if w > 0}
            self.local[:] = 0
        if batch is not None:
            for bucket, mask in zip(batch.buckets, batch.loss_mask, strict=True):
                self.local[self.index[bucket]] += int(mask.sum())

    def due(self, steps_done: int) -> bool:
        """Whether every rank reduces now, after ``steps_done`` steps of the run."""
        return steps_done % self.every == 0

    def reduce(self, step: int) -> dict[str, Any]:
        """Sum the counts over the group (a collective: every rank, same step) and check them against the
        phase's targets; the report (identical on every rank), after warning or raising past the tolerance."""
        counts = torch.from_numpy(self.local.copy())
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(counts, group=self.group)
        tokens = {b: int(counts[i]) for i, b in enumerate(self.buckets)}
        total = sum(tokens.values())
        realized = {b: tokens[b] / total if total else 0.0 for b in self.buckets}
        diff = {b: realized[b] - self.targets.get(b, 0.0) for b in self.buckets}
        worst = max(self.buckets, key=lambda b: abs(diff[b]))
        report = {"step": step, "phase": self.phase, "tokens": tokens, "target": dict(self.targets),
                  "realized": realized, "max_abs_diff": abs(diff[worst])}
        if total and abs(diff[worst]) > self.tolerance:
            msg = (f"step {step} phase {self.phase}: bucket {worst!r} realized {realized[worst]:.4f} of the tokens, "
                   f"target {self.targets.get(worst, 0.0):.4f} (tolerance {self.tolerance})")
            if self.action == "raise":
                raise MixtureDrift(msg)
            log.warning(msg)
        return report
