"""A stage's progress as a person reads it: units done of units, MB/s and an ETA, one line from rank 0
every ``CORPUS_PROGRESS_S`` seconds (30 in a batch log, 5 on a terminal; 0: none).

Gathered without blocking: each rank, after each unit, rewrites one small file of its counts in the
stage's work directory, and a thread of rank 0 reads them; no MPI call waits on a slow rank. The
weight of a unit is its bytes (a raw file, a span of one, a previous stage's shard), so the rate is
in MB/s of input and the ETA assumes the rest goes as fast. Lines go through :mod:`runtime.logline`:
with ``--log-json`` each is a JSON object carrying the numbers (units_done, mb_per_s, eta_s, …).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from corpus.model.layout import work_dir
from runtime.logline import LogRecord, emit

#: the environment variable that sets the seconds between two progress lines
PROGRESS_ENV = "CORPUS_PROGRESS_S"


def interval_s(stream: Any = sys.stderr) -> float:
    """Seconds between progress lines: ``$CORPUS_PROGRESS_S``, else 5 on a terminal, 30 in a log."""
    value = os.environ.get(PROGRESS_ENV)
    if value:
        return float(value)
    return 5.0 if stream.isatty() else 30.0


def unit_weight(path: Path, span: tuple[int, int] | None) -> int:
    """The bytes a unit reads: its span, else its file's (or directory's files') size."""
    if span is not None:
        return span[1] - span[0]
    st = path.stat()
    if stat.S_ISDIR(st.st_mode):
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return st.st_size


def eta_text(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class RankProgress:
    """One rank's counts, in ``DIR/r<rank>.json``: units and bytes done by this run, and before it."""

    def __init__(self, directory: Path, rank: int) -> None:
        self.path = directory / f"r{rank}.json"
        directory.mkdir(parents=True, exist_ok=True)
        self.counts = {"units": 0, "bytes": 0, "skipped_units": 0, "skipped_bytes": 0}
        self._write()

    def done(self, weight: int, skipped: bool = False) -> None:
        self.counts["skipped_units" if skipped else "units"] += 1
        self.counts["skipped_bytes" if skipped else "bytes"] += weight
        self._write()

    def _write(self) -> None:  # advisory: renamed in whole, never fsynced
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.counts))
        tmp.replace(self.path)


def read_counts(directory: Path, size: int) -> dict[str, int]:
    """The ranks' counts summed (a rank not yet written, or between two writes, counts as nothing)."""
    total = {"units": 0, "bytes": 0, "skipped_units": 0, "skipped_bytes": 0}
    for r in range(size):
        try:
            counts = json.loads((directory / f"r{r}.json").read_text())
        except (OSError, ValueError):
            continue
        for k in total:
            total[k] += int(counts.get(k, 0))
    return total


def _progress(
    counts: dict[str, int], units: int, weight: int, elapsed: float
) -> tuple[int, int, float, float | None]:
    """(units done, bytes done, bytes/s of this run, seconds left or None) of a stage."""
    done_units = counts["units"] + counts["skipped_units"]
    done_bytes = counts["bytes"] + counts["skipped_bytes"]
    rate = counts["bytes"] / max(elapsed, 1e-9)
    eta = (weight - done_bytes) / rate if 0 < done_units < units and rate > 0 else None
    return done_units, done_bytes, rate, eta


def progress_line(counts: dict[str, int], units: int, weight: int, elapsed: float) -> str:
    done_units, done_bytes, rate, eta = _progress(counts, units, weight, elapsed)
    line = (
        f"{done_units}/{units} units, {done_bytes / 1e6:.1f} of {weight / 1e6:.1f} MB, {rate / 1e6:.2f} MB/s"
    )
    return line if eta is None else f"{line}, ETA {eta_text(eta)}"


def progress_numbers(counts: dict[str, int], units: int, weight: int, elapsed: float) -> dict[str, Any]:
    """The progress line's numbers, for its JSON object (``eta_s`` None where the line has no ETA)."""
    done_units, done_bytes, rate, eta = _progress(counts, units, weight, elapsed)
    return {
        "units_done": done_units,
        "units_total": units,
        "mb_done": round(done_bytes / 1e6, 3),
        "mb_total": round(weight / 1e6, 3),
        "mb_per_s": round(rate / 1e6, 3),
        "eta_s": None if eta is None else round(eta),
    }


class RankLog:
    """Per-rank lines on stderr: ``HH:MM:SS [stage rRANK/SIZE] msg`` (or their JSON objects,
    :mod:`runtime.logline`); within a shard, how far and fast."""

    def __init__(self, stage: str, rank: int, size: int) -> None:
        self.stage, self.rank, self.size = stage, rank, size
        self.last = time.monotonic()

    def say(self, msg: str, event: str = "log", **fields: Any) -> None:
        """One line of this rank; ``fields``: the event's numbers, in its JSON object only."""
        emit(
            LogRecord(
                message=msg, event=event, stage=self.stage, rank=self.rank, ranks=self.size, fields=fields
            )
        )

    def tick(self, shard: str, n: int, t0: float) -> None:
        now = time.monotonic()
        if now - self.last >= 10:
            self.last = now
            rate = n / max(now - t0, 1e-9)
            self.say(
                f"{shard}: {n} docs, {rate:.0f} docs/s",
                "shard_progress",
                shard=shard,
                docs=n,
                docs_per_s=round(rate, 1),
            )


def progress_dir(stage_directory: Path) -> Path:
    return work_dir(stage_directory) / "progress"


class Reporter:
    """Rank 0's thread: a progress line every ``every`` seconds, and a last one when stopped (on
    other ranks, or with ``every`` 0, it does nothing)."""

    def __init__(
        self,
        directory: Path,
        size: int,
        units: int,
        weight: int,
        say: Callable[..., None],
        every: float,
        owner: bool = True,
    ) -> None:
        self.directory, self.size, self.units, self.weight = directory, size, units, weight
        self.owner = owner  # removes the ranks' files when the stage's units are done
        self.say, self.every = say, every
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        if every > 0:
            self._thread.start()

    @classmethod
    def on_rank0(cls, ctx: Any, inputs: Sequence[Any], say: Callable[..., None], every: float) -> Reporter:
        """The stage's reporter: ``inputs`` weighed on rank 0 only."""
        owner = ctx.rank == 0
        every = every if owner else 0
        weight = sum(s.weight for s in inputs) if every > 0 else 0
        return cls(progress_dir(ctx.out_dir), ctx.size, len(inputs), weight, say, every, owner)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.report()

    def report(self) -> None:
        """The progress line (``say(text, "progress", **numbers)``: its JSON object has the numbers)."""
        counts, elapsed = read_counts(self.directory, self.size), time.monotonic() - self.t0
        numbers = progress_numbers(counts, self.units, self.weight, elapsed)
        self.say(
            "progress: " + progress_line(counts, self.units, self.weight, elapsed), "progress", **numbers
        )

    def stop(self) -> None:
        """End the thread; say where the stage got to. Called once every rank is done."""
        if self.every > 0:
            self._stop.set()
            self._thread.join()
            self.report()
        if self.owner:
            shutil.rmtree(self.directory, ignore_errors=True)
