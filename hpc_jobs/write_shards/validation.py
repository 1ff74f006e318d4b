"""Shard validation: the numbers a token shard is checked on, and ``validation.json``.

The numbers are computed as the tokens stream past (:class:`ShardStatsAccumulator`, the same as
:func:`shard_stats` on the whole array) in integer arithmetic only (the entropy in millibits), so they
enter the digested ``.meta.json`` with the same value on every CPU. Any failing shard stops the stage
after the report is written; its parts stay checkpointed. docs/snapshot.md, "write_shards".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

import numpy as np

from corpus.formats.docshard import atomic_write_json
from hpc_jobs.write_shards.config import WriteShardsConfig
from runtime.global_phase import Part
from runtime.runner import StageContext, StageError

VALIDATION = "validation.json"


def shard_stats(tokens: np.ndarray, eos_id: int) -> dict[str, Any]:
    """The numbers a shard is validated on (pure; tokens is the shard's flat token array)."""
    n = int(tokens.shape[0])
    if n:
        change = np.flatnonzero(np.diff(tokens.astype(np.int64))) if n > 1 else np.empty(0, np.int64)
        bounds = np.concatenate(([-1], change, [n - 1]))
        runs = np.diff(bounds)
        longest = int(np.argmax(runs))
        max_run, run_token = int(runs[longest]), int(tokens[bounds[longest + 1]])
    else:
        max_run, run_token = 0, -1
    content = tokens[tokens != eos_id].astype(np.int64)
    counts = np.bincount(content) if content.shape[0] else np.zeros(0, np.int64)
    return {
        "tokens": n,
        "max_repeat_run": max_run,
        "max_repeat_token": run_token,
        **token_distribution(counts),
    }


#: fractional bits of the fixed-point base-2 logarithms the entropy is computed with
_LOG2_BITS = 32
#: working bits of :func:`log2_fixed` (the squarings' truncation stays below its last 32 bits)
_LOG2_WORK = 64


def log2_fixed(n: int) -> int:
    """``log2(n)`` for an integer ``n >= 1`` in fixed point with ``_LOG2_BITS`` fractional bits (less
    than one unit of the last place below the exact value), by integer arithmetic only (bit by bit,
    squaring the mantissa): the same value on every machine, whatever its vector unit or libm."""
    k = n.bit_length() - 1
    x = (n << _LOG2_WORK) >> k  # the mantissa n / 2**k in [1, 2), _LOG2_WORK fractional bits
    two = 2 << _LOG2_WORK
    result = k << _LOG2_BITS
    for bit in range(_LOG2_BITS - 1, -1, -1):
        x = (x * x) >> _LOG2_WORK
        if x >= two:
            x >>= 1
            result |= 1 << bit
    return result


def entropy_millibits(counts: Iterable[int]) -> int:
    """The unigram entropy (bits) of a distribution given by its integer counts, in integer millibits
    (rounded half up): ``H = log2(N) - sum(c log2 c) / N`` with ``N = sum(c)``, in exact integer
    arithmetic on the fixed-point logarithms of :func:`log2_fixed` (one per distinct count). No float
    takes part, so the number -- which enters the shard's digested ``.meta.json`` -- has the same value
    on every CPU (a numpy ``log2`` and float sum give last bits that depend on the vector unit)."""
    multiplicity = Counter(c for c in counts if c > 0)
    total = sum(c * m for c, m in multiplicity.items())
    if not total:
        return 0
    weighted = sum(c * m * log2_fixed(c) for c, m in sorted(multiplicity.items()))  # sum of c log2 c
    numerator = 1000 * (total * log2_fixed(total) - weighted)  # 1000 N H, in units of 2**-_LOG2_BITS
    denominator = total << _LOG2_BITS
    return max(0, (2 * numerator + denominator) // (2 * denominator))


def token_distribution(counts: np.ndarray) -> dict[str, Any]:
    """From a shard's per-token-id counts of its non-EOS tokens (a bincount): the entropy in integer
    millibits, the most frequent token (the smallest id of the most frequent) and its share of the
    tokens, ``top / content`` as one correctly rounded division of Python integers, rounded to 6
    decimals (the same double on every machine)."""
    content = int(counts.sum()) if counts.shape[0] else 0
    if not content:
        return {"entropy_millibits": 0, "top_token": -1, "top_token_share": 0.0}
    top = int(np.argmax(counts))
    return {
        "entropy_millibits": entropy_millibits(counts.tolist()),
        "top_token": top,
        "top_token_share": round(int(counts[top]) / content, 6),
    }


class ShardStatsAccumulator:
    """:func:`shard_stats` over a shard's documents as they stream past, one at a time (the same numbers:
    the longest run continues across documents, ties go to the first; the counts are a bincount)."""

    def __init__(self, eos_id: int) -> None:
        self.eos_id = eos_id
        self.n = 0
        self.counts = np.zeros(0, dtype=np.int64)
        self.run_token, self.run_len = -1, 0  # the run still open at the end of what was added
        self.max_run, self.max_token = 0, -1

    def add(self, tokens: np.ndarray) -> None:
        t = np.asarray(tokens).astype(np.int64)
        if t.shape[0] == 0:
            return
        change = np.flatnonzero(np.diff(t)) if t.shape[0] > 1 else np.empty(0, np.int64)
        bounds = np.concatenate(([-1], change, [t.shape[0] - 1]))
        runs = np.diff(bounds)
        starts = bounds[:-1] + 1
        if int(t[0]) == self.run_token:  # the first run continues the one still open
            first = int(runs[0]) + self.run_len
        else:  # the open run ends here: it counts before any of these (the first of equals wins)
            if self.run_len > self.max_run:
                self.max_run, self.max_token = self.run_len, self.run_token
            first = int(runs[0])
        # every run but the last is closed now (in order: the first, then the inner ones); the last
        # stays open for what comes next
        if runs.shape[0] == 1:
            self.run_len, self.run_token = first, int(t[0])
        else:
            if first > self.max_run:
                self.max_run, self.max_token = first, int(t[0])
            if runs.shape[0] > 2:
                k = int(np.argmax(runs[1:-1]))  # the first of the longest
                if int(runs[1 + k]) > self.max_run:
                    self.max_run, self.max_token = int(runs[1 + k]), int(t[starts[1 + k]])
            self.run_len, self.run_token = int(runs[-1]), int(t[starts[-1]])
        content = t[t != self.eos_id]
        if content.shape[0]:
            bc = np.bincount(content)
            if bc.shape[0] > self.counts.shape[0]:
                self.counts = np.concatenate(
                    [self.counts, np.zeros(bc.shape[0] - self.counts.shape[0], np.int64)]
                )
            self.counts[: bc.shape[0]] += bc
        self.n += t.shape[0]

    def result(self) -> dict[str, Any]:
        max_run, run_token = self.max_run, self.max_token
        if self.run_len > max_run:
            max_run, run_token = self.run_len, self.run_token
        return {
            "tokens": self.n,
            "max_repeat_run": max_run if self.n else 0,
            "max_repeat_token": run_token if self.n else -1,
            **token_distribution(self.counts),
        }


def as_written(threshold: float) -> Fraction:
    """A threshold of the config as its decimal spelling says (5.7 is 57/10, not the double just above
    it), so the stored millibits compare with it exactly."""
    return Fraction(str(threshold))


def validation_failures(stats: dict[str, Any], index_tokens: int, cfg: WriteShardsConfig) -> list[str]:
    failures = []
    if stats["tokens"] != index_tokens:
        failures.append(f"token count {stats['tokens']} != {index_tokens} in the index")
    if stats["max_repeat_run"] > cfg.max_repeat_run:
        failures.append(
            f"token {stats['max_repeat_token']} repeats {stats['max_repeat_run']} times in a row "
            f"(max_repeat_run {cfg.max_repeat_run})"
        )
    if Fraction(stats["entropy_millibits"], 1000) < as_written(cfg.min_entropy_bits):
        failures.append(
            f"token entropy {stats['entropy_millibits'] / 1000:.3f} bits < min_entropy_bits "
            f"{cfg.min_entropy_bits}"
        )
    if stats["top_token_share"] > cfg.max_top_token_share:
        failures.append(
            f"top token {stats['top_token']} is {100 * stats['top_token_share']:.1f}% of tokens "
            f"(max_top_token_share {100 * cfg.max_top_token_share:.1f}%)"
        )
    return failures


def validate(ctx: StageContext, parts: list[Part], config: WriteShardsConfig) -> None:
    """Collective: write ``validation.json`` from the shard parts' facts (every rank holds them, in
    shard order); stop the stage if any failed."""
    failed = [p for p in parts if p.facts["validation"]["failures"]]
    if ctx.rank == 0:
        atomic_write_json(
            ctx.out_dir / VALIDATION,
            {
                "passed": not failed,
                "limits": {
                    k: getattr(config, k)
                    for k in ("max_repeat_run", "min_entropy_bits", "max_top_token_share")
                },
                "shards": {p.name: p.facts["validation"] for p in parts},
            },
        )
    ctx.comm.Barrier()  # the report is on disk before any rank stops the job
    if failed:
        lines = [
            f"{p.name} ({p.facts['bucket']}, {p.facts['docs']} docs): "
            + "; ".join(p.facts["validation"]["failures"])
            for p in failed[:10]
        ]
        raise StageError(
            f"{len(failed)} of {len(parts)} shards failed validation (report: "
            f"{ctx.out_dir / VALIDATION}):\n  " + "\n  ".join(lines),
            every_rank=True,  # every rank reads the same parts and raises here
        )
