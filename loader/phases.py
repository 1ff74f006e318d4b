"""The phase clock: at which step each phase of a recipe starts, on a given world and batch size.

It counts nominal global tokens (``world · batch_size · seq_len`` a step, the same on every rank), so
every rank switches at the same step; a phase overshoots by less than one global batch, taken out of the
next. A pure function of (recipe, world, batch size, origin); a resume on another world keeps the
remaining boundaries at the same global tokens. A phase's runs are numbered from its first step
(``run_origin``). See docs/loader.md ("Recipes").
"""

from __future__ import annotations

from dataclasses import dataclass

from corpus.select.recipe import Phase, Recipe


@dataclass(frozen=True)
class PhaseSpan:
    """The steps ``[start, end)`` of one phase (``start``: the clock's origin when it falls inside the
    phase), the global tokens before ``start``, and the step the phase's runs are numbered from."""

    index: int
    phase: Phase
    start: int
    end: int
    start_tokens: int
    run_origin: int

    @property
    def name(self) -> str:
        return self.phase.name


class PhaseClock:
    """The phase of every step from an origin on, for ``world`` ranks of ``batch_size`` sequences each."""

    def __init__(
        self,
        recipe: Recipe,
        world: int,
        batch_size: int,
        step: int = 0,
        tokens: int = 0,
        phase_start: tuple[int, int] | None = None,
    ) -> None:
        """``phase_start``: (phase index, its first step) of the phase a checkpoint of the same recipe was
        in; when the origin falls in that phase its runs stay numbered from that step, otherwise from the
        origin."""
        if world < 1 or batch_size < 1 or step < 0 or tokens < 0:
            raise ValueError("world and batch_size must be positive, step and tokens >= 0")
        self.recipe, self.world, self.batch_size = recipe, world, batch_size
        self.origin_step, self.origin_tokens = step, tokens
        spans: list[PhaseSpan] = []
        for i, (phase, end_tokens) in enumerate(zip(recipe.phases, recipe.boundaries(), strict=True)):
            if tokens >= end_tokens:
                continue  # over before the origin (or skipped by a previous phase's overshoot)
            per_step = world * batch_size * phase.seq_len
            n = -(-(end_tokens - tokens) // per_step)
            resumed = not spans and phase_start is not None and phase_start[0] == i and phase_start[1] <= step
            origin = phase_start[1] if resumed else step
            spans.append(PhaseSpan(i, phase, step, step + n, tokens, origin))
            step, tokens = step + n, tokens + n * per_step
        self.spans = tuple(spans)
        self.end_step = step
        self.end_tokens = tokens

    def at(self, step: int) -> PhaseSpan | None:
        """The phase of ``step`` (None: after the last phase). Steps before the origin are not this clock's."""
        if step < self.origin_step:
            raise ValueError(f"step {step} is before the clock's origin {self.origin_step}")
        for span in self.spans:
            if step < span.end:
                return span
        return None

    def tokens_at(self, step: int) -> int:
        """Nominal global tokens delivered before ``step``."""
        span = self.at(step)
        if span is None:
            return self.end_tokens
        return span.start_tokens + (step - span.start) * self.world * self.batch_size * span.phase.seq_len
