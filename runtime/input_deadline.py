"""A wall-clock bound on reading one input: a parser that stalls (a quadratic header, a FIFO that never
opens, a pathological archive) costs at most ``seconds``, then the rest of the input is quarantined.

A real-time interval timer (SIGALRM) interrupts the reader even inside a blocking system call; the
exception is raised only while the reader runs (:meth:`InputDeadline.each`), never in the code that
writes what it yielded, so a shard's outputs stay whole. Time spent by the consumer counts toward the
bound (it is time spent on the input) but is never interrupted.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class InputTimeout(BaseException):
    """Reading the input took longer than its deadline. A BaseException, as KeyboardInterrupt is: the
    readers turn an ``Exception`` into a quarantined span and read on, which would hide the bound."""


class InputDeadline:
    """``with InputDeadline(s) as d: for x in d.each(reader): ...``: at most ``s`` seconds of wall time
    from entering the block to the reader's last record. Used from a process's main thread only (the
    one that receives signals); one deadline at a time."""

    def __init__(self, seconds: float) -> None:
        if seconds <= 0:
            raise ValueError("a deadline is a positive number of seconds")
        self.seconds = seconds
        self.expired = False
        self._reading = False
        self._previous: Any = None

    def _on_alarm(self, signum: int, frame: Any) -> None:
        self.expired = True
        if self._reading:
            raise InputTimeout(f"no end of input within {self.seconds:g} s")

    def __enter__(self) -> InputDeadline:
        self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._previous)

    def each(self, items: Iterable[T]) -> Iterator[T]:
        """The reader's records; raises :class:`InputTimeout` from inside the reader once the deadline
        has passed (at once, if it passed while the consumer held a record)."""
        it = iter(items)
        while True:
            self._reading = True
            try:
                if self.expired:
                    raise InputTimeout(f"no end of input within {self.seconds:g} s")
                item = next(it)
            except StopIteration:
                return
            finally:
                self._reading = False
            yield item
