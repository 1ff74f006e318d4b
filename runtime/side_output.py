"""A file a stage writes per input shard beside its documents, with the runner owning its life.

Held-out pages, the copies of duplicates, flagged documents, removed lines: a stage declares them
(``Stage.side_outputs``), writes through ``ctx.side(kind)``, and never opens, aborts or closes them
itself, so a shard marked done always has its side outputs and a failed one leaves no part of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from corpus.formats.docshard import SUFFIX, ShardWriter


class SideWriter(Protocol):
    """What a side output's writer is to the runner: it lands its file on close, leaves none on abort."""

    def close(self) -> Any: ...

    def abort(self) -> None: ...


@dataclass(frozen=True)
class SideOutput:
    """A file a stage writes per input shard beside its documents (``KIND/NAME + suffix``: held-out
    pages, the copies of duplicates, flagged documents, removed lines). The runner opens it before the
    shard (``ctx.side(kind)``), aborts it when the shard fails and closes it with the shard's documents,
    before ``finish_shard``: a shard marked done always has it, a failed one leaves no part of it."""

    kind: str
    suffix: str = SUFFIX
    open: Callable[[Path], SideWriter] = ShardWriter
