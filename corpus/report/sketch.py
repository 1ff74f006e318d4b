"""A mergeable value sketch: full distributions in bounded memory, in one streaming pass.

Values fall into logarithmic buckets (bucket ``k`` holds ``(gamma**(k-1), gamma**k]``, mirrored for
negatives, plus an exact zero bucket), so any quantile is known to within ``(gamma-1)/2`` relative
error whatever the range, and two sketches merge by adding bucket counts. This is what lets the report
histogram a score whose range it does not know in advance (heuristic scores, document lengths)
without holding the values or reading the data twice.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

GAMMA = 1.02  # 1% relative accuracy; a range of 1e-6..1e9 needs under 1,800 buckets


@dataclass
class Sketch:
    gamma: float = GAMMA
    count: int = 0
    total: float = 0.0
    min: float = math.inf
    max: float = -math.inf
    zero: int = 0
    pos: Counter = field(default_factory=Counter)
    neg: Counter = field(default_factory=Counter)

    def add(self, value: float) -> None:
        v = float(value)
        if math.isnan(v) or math.isinf(v):
            return
        self.count += 1
        self.total += v
        self.min = min(self.min, v)
        self.max = max(self.max, v)
        if v == 0.0:
            self.zero += 1
        elif v > 0:
            self.pos[self._key(v)] += 1
        else:
            self.neg[self._key(-v)] += 1

    def _key(self, v: float) -> int:
        return math.ceil(math.log(v) / math.log(self.gamma))

    def _value(self, key: int) -> float:
        """The bucket's representative: the point of least relative error inside it."""
        return 2 * self.gamma**key / (self.gamma + 1)

    def merge(self, other: Sketch) -> None:
        if other.gamma != self.gamma:
            raise ValueError("cannot merge sketches of different accuracy")
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.zero += other.zero
        self.pos.update(other.pos)
        self.neg.update(other.neg)

    def points(self) -> list[tuple[float, int]]:
        """(representative value, count) in increasing order, clamped to the exact min and max."""
        pts = [(-self._value(k), n) for k, n in sorted(self.neg.items(), reverse=True)]
        if self.zero:
            pts.append((0.0, self.zero))
        pts += [(self._value(k), n) for k, n in sorted(self.pos.items())]
        return [(min(max(v, self.min), self.max), n) for v, n in pts]

    def quantile(self, q: float) -> float | None:
        if not self.count:
            return None
        rank = q * (self.count - 1)
        seen = 0
        for v, n in self.points():
            seen += n
            if seen > rank:
                return v
        return self.max

    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def intervals(self) -> list[tuple[float, float, int]]:
        """(low, high, count) of every bucket, clamped to the exact min and max, in increasing order."""
        out = [
            (-(self.gamma**k), -(self.gamma ** (k - 1)), n) for k, n in sorted(self.neg.items(), reverse=True)
        ]
        if self.zero:
            out.append((0.0, 0.0, self.zero))
        out += [(self.gamma ** (k - 1), self.gamma**k, n) for k, n in sorted(self.pos.items())]
        return [(min(max(a, self.min), self.max), min(max(b, self.min), self.max), n) for a, b, n in out]

    def histogram(
        self, bins: int = 40, log: bool = False, lo: float | None = None, hi: float | None = None
    ) -> tuple[list[float], list[float]]:
        """Re-bin into ``bins`` equal-width (with ``log``, equal-ratio) bins over [lo, hi] (default: the
        sketch's own range). A bucket's count is spread over the bins its interval overlaps, so bins
        finer than the buckets show no comb of empty bins; the counts still sum to ``count``."""
        if not self.count:
            return [], []
        lo = self.min if lo is None else lo
        hi = self.max if hi is None else hi
        if log:
            lo = max(lo, 1e-12)
            hi = max(hi, lo)
        if hi <= lo:
            return [lo, lo + (abs(lo) * 0.01 or 1.0)], [float(self.count)]

        def pos(v: float) -> float:  # 0..bins
            if log:
                return bins * (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
            return bins * (v - lo) / (hi - lo)

        edges = [
            10 ** (math.log10(lo) + (math.log10(hi) - math.log10(lo)) * i / bins)
            if log
            else lo + (hi - lo) * i / bins
            for i in range(bins + 1)
        ]
        counts = [0.0] * bins
        for a, b, n in self.intervals():
            x0, x1 = min(max(pos(a), 0.0), bins), min(max(pos(b), 0.0), bins)
            if x1 - x0 < 1e-9:
                counts[min(int(x0), bins - 1)] += n
                continue
            i = int(x0)
            while i < bins and i < x1:
                counts[i] += n * (min(x1, i + 1) - max(x0, i)) / (x1 - x0)
                i += 1
        return edges, [round(c, 3) for c in counts]

    def summary(self) -> dict[str, Any]:
        """The numbers a person compares: count, mean and a few quantiles."""
        out: dict[str, Any] = {"count": self.count}
        if self.count:
            out |= {
                "min": self.min,
                "p05": self.quantile(0.05),
                "p50": self.quantile(0.5),
                "p95": self.quantile(0.95),
                "max": self.max,
                "mean": self.mean(),
            }
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "gamma": self.gamma,
            "count": self.count,
            "sum": self.total,
            "min": self.min if self.count else None,
            "max": self.max if self.count else None,
            "zero": self.zero,
            "pos": {str(k): n for k, n in sorted(self.pos.items())},
            "neg": {str(k): n for k, n in sorted(self.neg.items())},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Sketch:
        return cls(
            gamma=d["gamma"],
            count=d["count"],
            total=d["sum"],
            min=d["min"] if d["min"] is not None else math.inf,
            max=d["max"] if d["max"] is not None else -math.inf,
            zero=d["zero"],
            pos=Counter({int(k): n for k, n in d["pos"].items()}),
            neg=Counter({int(k): n for k, n in d["neg"].items()}),
        )
