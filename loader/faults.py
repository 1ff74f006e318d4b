"""Corrupt or missing shards: verified on first read, replaced deterministically, bounded.

Every shard's ``.bin`` is checked against the manifest's sha256 the first time this process reads it.
A shard that fails (or is missing, or whose index disagrees with the manifest) joins the *skip set*,
which is part of the loader state, and its stream positions are read from a substitute instead: the
first shard of the same bucket, in an order keyed by the bad shard's digest, that itself verifies. The
substitute depends only on the files' contents, never on which rank found the fault first or when, so a
replay (or another rank) reads exactly the same tokens. Positions map onto the substitute modulo its
length, so the amount of data, and therefore every cursor, is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from corpus.digest import file_sha256, stable_hash64
from corpus.errors import UserError
from corpus.model import SnapshotManifest
from loader.sequences import OpenShard

#: More than this fraction of the snapshot's shards skipped halts the loader.
DEFAULT_MAX_SKIP_FRACTION = 0.001


class TooManyCorruptShards(UserError):
    """The snapshot is damaged beyond what substitution should paper over."""


class ShardStore:
    def __init__(self, root: Path, manifest: SnapshotManifest, eos_id: int, append_eos: bool,
                 max_skip_fraction: float = DEFAULT_MAX_SKIP_FRACTION, skipped: set[int] | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        self.root, self.manifest = Path(root), manifest
        self.eos_id, self.append_eos = eos_id, append_eos
        self.max_skip_fraction = max_skip_fraction
        self.skipped: set[int] = set(skipped or ())
        self.log = log or (lambda msg: None)
        self._open: dict[int, OpenShard] = {}
        self._substitute: dict[int, int] = {}
        self._check_budget()

    def paths(self, i: int) -> tuple[Path, Path]:
        shard = self.manifest.shards[i]
        bin_path = self.root / shard.path
        idx_rel = shard.files.get("idx")
        return bin_path, (self.root / idx_rel if idx_rel else bin_path.with_suffix(".idx"))

    def _verify_and_open(self, i: int) -> OpenShard | None:
        """The shard, or None (and it is added to the skip set) when it is missing or does not verify."""
        if i in self.skipped:
            return None
        if i in self._open:
            return self._open[i]
        shard = self.manifest.shards[i]
        bin_path, idx_path = self.paths(i)
        reason = ""
        if not bin_path.is_file() or not idx_path.is_file():
            reason = "missing"
        elif file_sha256(bin_path) != shard.sha256.removeprefix("sha256:"):
            reason = "sha256 mismatch"
        else:
            try:
                opened = OpenShard(bin_path, idx_path, self.eos_id, self.append_eos)
                if opened.num_docs != shard.docs or opened.tokens.shape[0] != shard.tokens:
                    reason = f"index says {opened.num_docs} docs / {opened.tokens.shape[0]} tokens, " \
                             f"manifest {shard.docs} / {shard.tokens}"
            except (ValueError, OSError, KeyError) as e:
                reason = f"unreadable index: {e}"
        if reason:
            self.skipped.add(i)
            self.log(f"shard {shard.path} skipped ({reason}); reading a substitute from bucket {shard.bucket}")
            self._check_budget()
            return None
        self._open[i] = opened
        return opened

    def _check_budget(self) -> None:
        n = len(self.manifest.shards)
        if n and len(self.skipped) > self.max_skip_fraction * n:
            names = ", ".join(self.manifest.shards[i].path for i in sorted(self.skipped))
            raise TooManyCorruptShards(
                f"{len(self.skipped)} of {n} snapshot shards are corrupt or missing "
                f"(limit {self.max_skip_fraction:.2%}): {names}; repair the snapshot or raise max_skip_fraction")

    def substitute(self, i: int) -> int:
        """The shard whose data stands in for shard ``i`` (``i`` itself when it is sound)."""
        if self._verify_and_open(i) is not None:
            return i
        if i in self._substitute and self._substitute[i] not in self.skipped:
            return self._substitute[i]
        bad = self.manifest.shards[i]
        candidates = sorted(
            (j for j, s in enumerate(self.manifest.shards) if s.bucket == bad.bucket and j != i),
            key=lambda j: stable_hash64("substitute", bad.sha256, self.manifest.shards[j].sha256))
        for j in candidates:
            if self._verify_and_open(j) is not None and self._open[j].stream_len > 0:
                self._substitute[i] = j
                return j
        raise TooManyCorruptShards(f"shard {bad.path} is corrupt and bucket {bad.bucket} has no sound shard left")

    def read(self, i: int, start: int, end: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Stream positions ``[start, end)`` of shard ``i`` (or of its substitute), as (tokens, doc starts) parts."""
        j = self.substitute(i)
        shard = self._open[j]
        if j == i:
            return [shard.read(start, end)]
        parts = []
        n = shard.stream_len
        pos = start
        while pos < end:  # positions map onto the substitute modulo its length
            a = pos % n
            b = min(n, a + (end - pos))
            parts.append(shard.read(a, b))
            pos += b - a
        return parts
