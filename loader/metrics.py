"""What reading costs a rank: read latency, bytes read, shard cache hits, and how long the consumer waited.

Wall-clock figures for the training log and the benchmarks, never an input of what is delivered and never
part of a checkpoint (``state_dict`` does not see them). Latencies are kept for the last ``WINDOW`` reads
and steps; counts are totals since the loader was made. See docs/loader.md ("Metrics").
"""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import Any

import numpy as np

#: Reads (and steps) the latency percentiles are taken over.
WINDOW = 4096


def percentiles_ms(seconds: Any) -> dict[str, float]:
    """p50 and p99 of a sequence of durations, in milliseconds (0 when there are none)."""
    values = np.asarray(list(seconds), dtype=np.float64)
    if values.size == 0:
        return {"p50": 0.0, "p99": 0.0}
    p50, p99 = np.percentile(values, [50, 99]) * 1e3
    return {"p50": round(float(p50), 3), "p99": round(float(p99), 3)}


class LoaderMetrics:
    """Counters the reader thread and the consumer both update (under one lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.read_s: deque[float] = deque(maxlen=WINDOW)
        self.wait_s: deque[float] = deque(maxlen=WINDOW)
        self.reads = 0
        self.steps = self.prefetched_steps = self.stalls = 0
        self.stall_s = 0.0

    def record_read(self, seconds: float) -> None:
        """One store read (one stream range of a sequence)."""
        with self._lock:
            self.read_s.append(seconds)
            self.reads += 1

    def record_wait(self, seconds: float, *, stalled: bool, prefetched: bool) -> None:
        """How long one step's data kept the consumer waiting: the read itself without prefetch; with it,
        the wait for the reader (``stalled``: nothing was ready when the consumer asked)."""
        with self._lock:
            self.wait_s.append(seconds)
            self.steps += 1
            self.prefetched_steps += int(prefetched)
            if stalled:
                self.stalls += 1
                self.stall_s += seconds

    def snapshot(self) -> dict[str, Any]:
        """Every figure as plain JSON values."""
        with self._lock:
            return {
                "read_latency_ms": percentiles_ms(self.read_s),
                "step_wait_ms": percentiles_ms(self.wait_s),
                "reads": self.reads,
                "steps": self.steps,
                "prefetched_steps": self.prefetched_steps,
                "prefetch_stalls": self.stalls,
                "prefetch_stall_s": round(self.stall_s, 6),
            }


def metrics_line(rank: int, world: int, step: int, metrics: dict[str, Any]) -> str:
    """The training-log line of a loader's metrics (what a training script prints every K steps)."""
    return f"[rank {rank}/{world}] loader metrics at step {step}: {json.dumps(metrics, sort_keys=True)}"
