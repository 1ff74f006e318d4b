"""The shards a delta build's candidates inherit from its base (``corpus build --base``).

Found through the build layout, never a config value, so where builds live enters no config hash.
docs/snapshot.md, "write_shards", and docs/incremental.md.
"""

from __future__ import annotations

from pathlib import Path

from corpus.model.facts import ShardNumbering
from corpus.model.layout import base_build_of, build_dir_of_stage, candidates_dir, manifest_path
from corpus.model.manifest import read_snapshot_manifest
from runtime.runner import StageError


class BaseShards(ShardNumbering):
    """The shards a build's candidates inherit from its base (``corpus build --base``): the delta's
    candidates list the base's shards first, then its own, and a shard's name is written into every
    row of its metadata table (the version step joins the selection bits on it) while the doc_id index
    addresses shards by their place in that list. So a delta's shards are numbered, per bucket, after
    the highest number of that bucket in the base's candidates (``next_number``), and its doc_id index
    counts its shards after the base's ``shards``; ``label`` is the base candidates' id. Handed on to
    the snapshot as what it is, the manifest's :class:`ShardNumbering`."""

    @classmethod
    def of_build(cls, stage_directory: Path) -> BaseShards | None:
        """The base of the build this stage directory belongs to, found through the build layout (never
        a config value, so where builds live enters no config hash); None without a base."""
        build = build_dir_of_stage(stage_directory)
        found = base_build_of(build) if build is not None else None
        if found is None:
            return None
        base_dir, label = found
        listing = manifest_path(candidates_dir(base_dir))
        try:
            candidates = read_snapshot_manifest(candidates_dir(base_dir))
        except FileNotFoundError:
            raise StageError(
                f"the build's base {base_dir} has no candidates ({listing})", every_rank=True
            ) from None
        if candidates.snapshot_id != label:
            raise StageError(
                f"the candidates of the build's base {base_dir} are {candidates.snapshot_id}, the build was "
                f"forked from {label}: the base changed; rebuild against it into a new directory",
                every_rank=True,
            )
        after: dict[str, int] = {}
        for shard in candidates.shards:
            bucket, number = Path(shard.path).name.removesuffix(".bin").rsplit("-", 1)
            after[bucket] = max(after.get(bucket, 0), int(number) + 1)
        return cls(label, len(candidates.shards), dict(sorted(after.items())))
