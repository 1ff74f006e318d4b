"""Counting the files a rank opens, for the shape benchmark (``bench/bench_shape.py``).

With ``CORPUS_COUNT_OPENS`` set in a rank's environment, an audit hook counts every ``open`` event
(``open()``, ``io.open``, ``os.open``: NumPy's and pyarrow's Python-level opens included) and the stage
manifest's ``run_info.files_opened_by_rank`` reports them. Off by default: a hook sees every audited
event of the process. docs/scale.md "Shape".
"""

from __future__ import annotations

import os
import sys
from typing import Any

ENV = "CORPUS_COUNT_OPENS"
_opened: list[int] = []


def install() -> None:
    """Start counting, when the environment asks for it (once per process)."""
    if not os.environ.get(ENV) or _opened:
        return
    _opened.append(0)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            _opened[0] += 1

    sys.addaudithook(hook)


def opened() -> int | None:
    """The files this process opened since :func:`install`; None when it is not counting."""
    return _opened[0] if _opened else None


def by_rank(per_rank: list[int | None] | None) -> dict[str, Any]:
    """``files_opened_by_rank`` for a manifest's run_info, when the ranks counted; else nothing."""
    if not per_rank or per_rank[0] is None:
        return {}
    return {"files_opened_by_rank": {str(r): n for r, n in enumerate(per_rank)}}
