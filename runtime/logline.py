"""One log line, two spellings: text for a person, one JSON object a line for a program.

Every line a stage's ranks, the build and the command line print about a run is a :class:`LogRecord`
written by :func:`emit`; ``CORPUS_LOG_JSON=1`` (what ``--log-json`` sets, so it reaches every rank and
sbatch job unchanged) picks JSON. The text is what it always was (``HH:MM:SS [stage rRANK/SIZE] msg``,
``corpus build: msg``, ``error: stage: msg``); the JSON object has ``ts`` (UTC, ISO 8601), ``level``,
``event``, ``source``, ``stage``, ``rank``, ``ranks``, ``message`` (the text's message, word for word)
and the event's numbers (docs/scale.md, *Log lines*).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

#: the environment variable that makes every log line a JSON object ("1"); ``--log-json`` sets it
LOG_JSON_ENV = "CORPUS_LOG_JSON"


def json_lines() -> bool:
    """Whether log lines are JSON objects (``CORPUS_LOG_JSON=1``)."""
    return os.environ.get(LOG_JSON_ENV, "") not in ("", "0")


@dataclass(frozen=True, kw_only=True)
class LogRecord:
    """What one line says. ``source``: who speaks when no rank does (``corpus build``, or a stage's
    name); ``fields``: the event's numbers and names, in the JSON object only."""

    message: str
    event: str = "log"
    level: str = "info"  # info | warning | error
    source: str | None = None
    stage: str | None = None
    rank: int | None = None
    ranks: int | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=time.time)


def text_line(r: LogRecord) -> str:
    if r.level == "error":
        where = f" r{r.rank}/{r.ranks}" if r.rank is not None else ""
        return f"{r.source}: error: {r.message}" if r.source else f"error: {r.stage}{where}: {r.message}"
    if r.rank is not None:
        return (
            f"{time.strftime('%H:%M:%S', time.localtime(r.ts))} [{r.stage} r{r.rank}/{r.ranks}] {r.message}"
        )
    return f"{r.source}: {r.message}" if r.source else r.message


def json_line(r: LogRecord) -> str:
    ts = datetime.fromtimestamp(r.ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    base = {"ts": ts, "level": r.level, "event": r.event, "source": r.source, "stage": r.stage}
    base |= {"rank": r.rank, "ranks": r.ranks, "message": r.message}
    return json.dumps(base | dict(r.fields), default=str)


def render(r: LogRecord) -> str:
    return json_line(r) if json_lines() else text_line(r)


def emit(r: LogRecord, stream: TextIO | None = None) -> None:
    """Write the record's line (to stderr unless ``stream``) in one write, newline included, flushed:
    the lines of ranks printing at once interleave whole (``print`` writes the newline apart)."""
    stream = stream or sys.stderr
    stream.write(render(r) + "\n")
    stream.flush()


def passed_on(line: str, source: str) -> str:
    """A line a job printed, as its launcher passes it on: unchanged, except that with JSON lines one
    that is not a record's (a library's warning, ``mpiexec``'s own words, another JSON) is wrapped in one."""
    if not json_lines():
        return line
    try:
        found = json.loads(line)
    except ValueError:
        found = None
    if isinstance(found, dict) and "event" in found:  # a record of ours
        return line
    return json_line(LogRecord(message=line, event="output", source=source))


def command_line(command: str, message: str, level: str = "error", event: str = "error") -> str:
    """The command line's own last word (``corpus build: error: …``, ``corpus build: interrupted``)."""
    return render(LogRecord(message=message, event=event, level=level, source=f"corpus {command}"))
