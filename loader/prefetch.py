"""Prefetch: a background thread reads the stream ranges of the next steps before the consumer asks.

The thread plans on a private copy of the loader's cursor (the sampler's order, pure arithmetic) and
reads each step's ranges through the shared :class:`loader.faults.ShardStore` into a buffer of at most
``depth`` steps. The consumer plans every step itself and takes a fetched step only when its step and
ranges are the ones it planned; anything else is read synchronously. So what is delivered, and every
checkpoint, is the same with prefetch on or off; shards a read ahead found corrupt are not part of the
delivered state until their step is delivered (:meth:`Prefetcher.ahead`). See docs/loader.md ("Prefetch").
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from loader.faults import ShardStore, SourcedPart
from loader.metrics import LoaderMetrics
from loader.sparse import merge_step_ranges

#: (shard, stream start, stream end) ranges of each sequence of one step
Segments = tuple[tuple[tuple[int, int, int], ...], ...]
Parts = tuple[tuple[SourcedPart, ...], ...]
#: Steps read ahead by default.
DEFAULT_PREFETCH_STEPS = 4
#: Share of the loader's memory budget the fetched-but-undelivered tokens may take.
PREFETCH_BUDGET_SHARE = 8


#: Readers still running, stopped and joined at exit (before the interpreter tears down what they hold).
_RUNNING: weakref.WeakSet[Prefetcher] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for prefetcher in list(_RUNNING):
        prefetcher.stop()


def prefetch_depth(steps: int, memory_budget_bytes: int, step_bytes: int) -> int:
    """Steps to read ahead: ``steps``, at most what 1/PREFETCH_BUDGET_SHARE of the budget holds (at least 1)."""
    if steps < 0:
        raise ValueError(f"prefetch_steps must be >= 0, got {steps}")
    if steps == 0:
        return 0
    return max(1, min(steps, memory_budget_bytes // PREFETCH_BUDGET_SHARE // max(step_bytes, 1)))


def read_segments(store: ShardStore, segments: Segments, metrics: LoaderMetrics) -> Parts:
    """Every sequence's ranges of one step, read (and verified) through the store: the step's touching
    ranges of a shard fetched as one request each (:mod:`loader.sparse`), each request timed."""
    for shard, a, b in merge_step_ranges(segments):
        t0 = time.perf_counter()
        store.fetch(shard, a, b)
        metrics.record_read(time.perf_counter() - t0)
    return store.read_fetched(segments)


@dataclass(frozen=True)
class Fetched:
    """One step read ahead: its ranges, what they read (or the error reading them raised), and the shards
    its reads found corrupt."""

    step: int
    segments: Segments
    parts: Parts | None
    error: BaseException | None
    found: frozenset[int]


class Prefetcher:
    """The reader thread and its bounded buffer of fetched steps, in the order the consumer takes them."""

    def __init__(
        self,
        planned: Iterator[tuple[int, Segments]],
        store: ShardStore,
        depth: int,
        metrics: LoaderMetrics,
    ) -> None:
        self.store, self.depth, self.metrics = store, depth, metrics
        self._planned = planned
        self._items: deque[Fetched] = deque()
        self._ahead: set[int] = set()  # shards found corrupt by steps not yet delivered
        self._cond = threading.Condition()
        self._stopped = self._done = False
        self._thread = threading.Thread(target=self._run, name="loader-prefetch", daemon=True)
        _RUNNING.add(self)
        self._thread.start()

    def _run(self) -> None:
        try:
            for step, segments in self._planned:
                if not self._wait_for_room():
                    return
                item = self._fetch(step, segments)
                with self._cond:
                    self._items.append(item)
                    self._cond.notify_all()
                if item.error is not None:
                    return
        except Exception:  # noqa: BLE001 -- a planning error: the consumer's own planning raises it
            pass
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _wait_for_room(self) -> bool:
        with self._cond:
            while len(self._items) >= self.depth and not self._stopped:
                self._cond.wait()
            return not self._stopped

    def _fetch(self, step: int, segments: Segments) -> Fetched:
        # the store's lock is held for the whole step, so no one sees the skip set half way through it
        with self.store.lock:
            before = set(self.store.skipped)
            parts, error = None, None
            try:
                parts = read_segments(self.store, segments, self.metrics)
            except Exception as e:  # noqa: BLE001 -- delivered, and raised, at its own step
                error = e
            found = frozenset(self.store.skipped - before)
            with self._cond:
                self._ahead |= found
        return Fetched(step, segments, parts, error, found)

    def take(self, step: int, segments: Segments) -> Parts | None:
        """The parts of ``step`` when it was read ahead with these ranges (waiting for the reader if it is
        behind), else None: the caller reads them itself and stops this prefetcher."""
        t0 = time.perf_counter()
        with self._cond:
            stalled = not self._items
            while not self._items and not self._done and not self._stopped:
                self._cond.wait()
            if not self._items:
                return None
            item = self._items.popleft()
            self._ahead -= item.found
            self._cond.notify_all()
        self.metrics.record_wait(time.perf_counter() - t0, stalled=stalled, prefetched=True)
        if item.step != step or item.segments != segments:
            return None
        if item.error is not None:
            raise item.error
        return item.parts

    def ahead(self) -> set[int]:
        """Shards found corrupt by reads whose steps are not delivered yet (call holding ``store.lock``)."""
        with self._cond:
            return set(self._ahead)

    def signal_stop(self) -> None:
        """Ask the reader to stop after its current step (safe from a finalizer: no waiting)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def stop(self) -> None:
        """Stop the reader, drop what it fetched, and forget the corruption it found ahead: a later read
        finds it again at the step that reads it, as without prefetch."""
        self.signal_stop()
        self._thread.join()
        _RUNNING.discard(self)
        with self.store.lock, self._cond:
            self.store.skipped -= self._ahead
            self._ahead.clear()
            self._items.clear()


def planned_steps(
    plan_step: Callable[[], tuple[int, Segments | None] | None],
) -> Iterator[tuple[int, Segments]]:
    """The steps with something to read, from a planner that returns (step, segments or None), None at the end."""
    while (planned := plan_step()) is not None:
        step, segments = planned
        if segments is not None:
            yield step, segments


class StepReader:
    """Where a loader's step data comes from: the prefetch thread when it read that step with those ranges,
    else the store, now. Owns the thread's lifetime (started lazily, stopped on a seek or a resume) and
    the metrics both paths record."""

    def __init__(self, store: ShardStore, depth: int) -> None:
        self.store, self.depth = store, depth
        self.metrics = LoaderMetrics()
        self.prefetcher: Prefetcher | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def running(self) -> bool:
        return self.prefetcher is not None

    def start(self, owner: object, planned: Iterator[tuple[int, Segments]]) -> None:
        """Read ``planned`` ahead; the thread stops when ``owner`` (the loader) is collected. ``planned``
        must not hold ``owner`` (it plans on a copy)."""
        self.stop()
        self.prefetcher = Prefetcher(planned, self.store, self.depth, self.metrics)
        self._finalizer = weakref.finalize(owner, self.prefetcher.signal_stop)

    def stop(self) -> None:
        if self.prefetcher is not None:
            self._finalizer.detach()
            self.prefetcher.stop()
            self.prefetcher = None

    def parts(self, step: int, segments: Segments) -> Parts:
        """The parts of one step's ranges: read ahead when the reader read these, else read now (and the
        reader stopped: the plan changed under it, or it ended; the next step starts a new one)."""
        if self.prefetcher is not None:
            try:
                parts = self.prefetcher.take(step, segments)
            except Exception:
                self.stop()
                raise
            if parts is not None:
                return parts
            self.stop()
        t0 = time.perf_counter()
        parts = read_segments(self.store, segments, self.metrics)
        self.metrics.record_wait(time.perf_counter() - t0, stalled=False, prefetched=False)
        return parts

    def ahead(self) -> set[int]:
        """:meth:`Prefetcher.ahead`, or nothing without a reader (call holding ``store.lock``)."""
        return self.prefetcher.ahead() if self.prefetcher is not None else set()
