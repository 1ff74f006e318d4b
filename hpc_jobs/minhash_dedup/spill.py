"""Records held in memory up to a limit and spilled to a file beyond it: the members of one component
(``clusters``) or the waiting rows of a rank's slices (``giant_clusters``) are never held whole.
docs/dedup.md "Giant clusters".
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


class SpilledRows:
    """Records held in memory up to ``limit`` bytes, beyond that appended to a file under ``spill_dir``
    and read back memory-mapped: a giant component's records are never held whole."""

    def __init__(self, dtype: np.dtype, limit: int, spill_dir: Path) -> None:
        self.dtype, self.limit, self.spill_dir = dtype, limit, spill_dir
        self._chunks: list[bytes] = []
        self._held = 0
        self._file: Any = None
        self._path: Path | None = None
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, rows: np.ndarray) -> None:
        """Add records (an array of ``dtype``)."""
        self._chunks.append(rows.tobytes())
        self._held += rows.nbytes
        self._count += len(rows)
        if self._held > self.limit:
            self._flush()

    def _flush(self) -> None:
        if self._file is None:
            self.spill_dir.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix="component-", dir=self.spill_dir)
            self._file, self._path = os.fdopen(fd, "wb"), Path(name)
        self._file.write(b"".join(self._chunks))
        self._chunks, self._held = [], 0

    @property
    def spilled(self) -> bool:
        return self._path is not None

    def rows(self) -> np.ndarray:
        if self._file is None:
            return np.frombuffer(b"".join(self._chunks), dtype=self.dtype)
        self._flush()
        self._file.flush()
        return np.memmap(self._path, dtype=self.dtype, mode="r", shape=(self._count,))

    def __enter__(self) -> SpilledRows:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._file is not None:
            self._file.close()
            self._path.unlink(missing_ok=True)
