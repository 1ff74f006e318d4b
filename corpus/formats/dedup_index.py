"""A persistent dedup index: sorted, immutable, range-partitioned generations behind an atomic pointer.

A new build asks the index "is this key already taken, and by whom?" for the exact-text, MinHash band
and recrawl keys of the builds before it ("in how many documents?" for line keys), without recomputing
them. ``CURRENT`` names the generations, oldest first; an update writes a new generation beside them and
switches the pointer, so a kill leaves the old pointer or the new one, each naming complete generations.
A key's answer is its value in the oldest generation holding it (keep-first), or a line count's sum over
them, through compaction too. One update at a time. Pure library: numpy and files, no MPI; stages split
the work by partition range. Records and keys: :mod:`corpus.formats.dedup_keys`; files:
:mod:`~corpus.formats.dedup_files`; writing: :mod:`~corpus.formats.dedup_write`; probing:
:mod:`~corpus.formats.dedup_probe`. docs/incremental.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from corpus.formats.bloom import BloomSpec
from corpus.formats.dedup_files import (
    CURRENT,
    GENERATIONS,
    MANIFEST,
    PARTIAL,
    Generation,
    IndexDamaged,
    file_sha256,
    fsync_dir,
    fsync_files,
    json_bytes,
    kill_point,
    part_name,
    switch_pointer,
    write_bytes,
)
from corpus.formats.dedup_keys import KINDS, as_void, owned_partitions, partition_of
from corpus.formats.dedup_probe import ProbeResult, ProbeStats, probe_generations
from corpus.formats.dedup_write import MERGE_RECORDS, RUN_RECORDS, PartitionWriter, write_compaction
from corpus.model.digest import json_digest
from corpus.model.layout import build_dir_of_stage, dedup_base_path, dedup_index_dir

FORMAT = "corpus-dedup-index/1"


class IndexMismatch(ValueError):
    """The base index was made with other key parameters (or of another kind) than this build's."""


class IndexMixed(ValueError):
    """A generation holds a base's records and a later build's (a compaction): they cannot be split."""


def _check_params(
    kind: str, params: dict[str, Any], base_kind: str, base: dict[str, Any], where: Path
) -> None:
    if kind != base_kind:
        raise IndexMismatch(f"base index {where} holds {base_kind!r} keys, this build asks for {kind!r}")
    for name in sorted(set(params) | set(base)):
        if params.get(name) != base.get(name):
            raise IndexMismatch(
                f"base index {where} was built with {name}={base.get(name)!r}, this build uses "
                f"{name}={params.get(name)!r}: its keys are not this build's keys"
            )


@dataclass(frozen=True)
class PersistentIndex:
    """One snapshot of an index (what ``CURRENT`` named when it was opened); updates return a new one."""

    root: Path
    kind: str
    params: dict[str, Any]
    partitions: int
    bloom_spec: BloomSpec
    generations: tuple[Generation, ...] = field(default=())
    pointer: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def record(self) -> np.dtype:
        return KINDS[self.kind].record

    @property
    def labels(self) -> list[str]:
        return [label for g in self.generations for label in g.labels]

    @property
    def records(self) -> int:
        """Records over all generations (a key in two generations counts twice)."""
        return sum(g.records for g in self.generations)

    # -- opening

    @classmethod
    def create(
        cls,
        root: Path | str,
        kind: str,
        params: dict[str, Any],
        partitions: int,
        bloom_fp_rate: float = 0.01,
        bloom_spec: BloomSpec | None = None,
    ) -> PersistentIndex:
        """A new, empty index (no generation); refuses a directory that already holds one."""
        root = Path(root)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
        if not 1 <= partitions < 1 << 31:
            raise ValueError(f"partitions must be in [1, 2^31), got {partitions}")
        if (root / CURRENT).exists():
            raise FileExistsError(f"{root} already holds an index")
        spec = bloom_spec or BloomSpec.from_fp_rate(bloom_fp_rate)
        root.mkdir(parents=True, exist_ok=True)
        (root / GENERATIONS).mkdir(exist_ok=True)
        pointer = {
            "format": FORMAT,
            "kind": kind,
            "params": params,
            "partitions": partitions,
            "bloom": spec.to_dict(),
            "generations": [],
        }
        switch_pointer(root, pointer)
        return cls.open(root, kind, params)

    @classmethod
    def open(
        cls, root: Path | str, kind: str | None = None, params: dict[str, Any] | None = None
    ) -> PersistentIndex:
        """The index as ``CURRENT`` names it; with ``kind`` / ``params``, refuses a base made with
        other key parameters (:class:`IndexMismatch`, naming the parameter)."""
        root = Path(root)
        try:
            pointer = json.loads((root / CURRENT).read_bytes())
        except FileNotFoundError:
            raise FileNotFoundError(f"{root} holds no dedup index ({CURRENT} missing)") from None
        if pointer.get("format") != FORMAT:
            raise IndexMismatch(f"{root}: index format {pointer.get('format')!r}, this code reads {FORMAT!r}")
        if kind is not None:
            _check_params(kind, params or {}, pointer["kind"], pointer["params"], root)
        gens = []
        for entry in pointer["generations"]:
            path = root / GENERATIONS / entry["id"]
            data = (path / MANIFEST).read_bytes()
            if hashlib.sha256(data).hexdigest() != entry["manifest_sha256"]:
                raise IndexDamaged(f"{path / MANIFEST}: sha256 differs from {root / CURRENT}")
            manifest = json.loads(data)
            _check_params(pointer["kind"], pointer["params"], manifest["kind"], manifest["params"], path)
            if manifest["partitions"] != pointer["partitions"]:
                raise IndexDamaged(
                    f"{path}: {manifest['partitions']} partitions, the index has {pointer['partitions']}"
                )
            gens.append(Generation(entry["id"], path, manifest))
        return cls(
            root,
            pointer["kind"],
            pointer["params"],
            int(pointer["partitions"]),
            BloomSpec.from_dict(pointer["bloom"]),
            tuple(gens),
            pointer,
        )

    @classmethod
    def open_or_create(
        cls, root: Path | str, kind: str, params: dict[str, Any], partitions: int, bloom_fp_rate: float = 0.01
    ) -> PersistentIndex:
        if (Path(root) / CURRENT).exists():
            return cls.open(root, kind, params)
        return cls.create(root, kind, params, partitions, bloom_fp_rate)

    def reopen(self) -> PersistentIndex:
        return PersistentIndex.open(self.root, self.kind, self.params)

    def held_by(self, labels: Iterable[str]) -> PersistentIndex:
        """This index with only the generations whose builds are all in ``labels`` (in a build's fork:
        its base's, what the build's stages probe, so the build's own generation never answers its own
        probe and a rerun decides as the first run did). A generation holding both (a compaction merged
        the base's records with the build's) cannot be split: :class:`IndexMixed`."""
        labels = set(labels)
        mixed = [g.id for g in self.generations if set(g.labels) & labels and not set(g.labels) <= labels]
        if mixed:
            raise IndexMixed(
                f"{self.root} was compacted (generation {mixed[0]} holds its base's records and its own): "
                f"its base's decisions cannot be told apart; rebuild into a new directory"
            )
        kept = tuple(g for g in self.generations if set(g.labels) <= labels)
        entries = [e for e in self.pointer["generations"] if e["id"] in {g.id for g in kept}]
        return replace(self, generations=kept, pointer={**self.pointer, "generations": entries})

    # -- partitions

    def partition_of(self, keys: Any) -> np.ndarray:
        return partition_of(self.kind, keys, self.partitions)

    def owned(self, rank: int, size: int) -> range:
        return owned_partitions(rank, size, self.partitions)

    # -- probing

    def probe(self, keys: Any, *, use_bloom: bool = True, stats: ProbeStats | None = None) -> ProbeResult:
        """For each key: found, its value in the oldest generation holding it (a kind that sums: the sum
        over every generation), that generation's index. Keys are grouped by partition; one partition's
        filter and map are held at a time."""
        keys = as_void(keys, KINDS[self.kind].key_bytes)
        n = len(keys)
        result = ProbeResult.empty(n, self.record)
        parts = self.partition_of(keys)
        order = np.argsort(parts, kind="stable")
        bounds = np.searchsorted(parts[order], np.arange(self.partitions + 1))
        for p in np.nonzero(np.diff(bounds))[0]:
            idx = order[bounds[p] : bounds[p + 1]]
            r = self.probe_partition(int(p), keys[idx], use_bloom=use_bloom, stats=stats)
            result.found[idx], result.values[idx], result.generation[idx] = r.found, r.values, r.generation
        return result

    def probe_partition(
        self, p: int, keys: Any, *, use_bloom: bool = True, stats: ProbeStats | None = None
    ) -> ProbeResult:
        """:meth:`probe` for keys all of partition ``p`` (what a rank owning ``p`` calls)."""
        keys = as_void(keys, KINDS[self.kind].key_bytes)
        if len(keys) and not (self.partition_of(keys) == p).all():
            raise ValueError(f"probe_partition({p}) was given keys of other partitions")
        return probe_generations(
            self.generations,
            p,
            keys,
            self.record,
            use_bloom=use_bloom,
            stats=stats,
            sums=KINDS[self.kind].sums,
        )

    # -- updating

    def _next_id(self) -> str:
        last = max((int(g.id[1:]) for g in self.generations), default=0)
        return f"g{last + 1:06d}"

    def cleanup(self) -> list[str]:
        """Removes what ``CURRENT`` does not name: partial or orphaned generation directories, a stale
        ``CURRENT.tmp``, generations replaced by a compaction. Only while no update is running."""
        keep = {g.id for g in self.generations}
        removed = []
        gen_dir = self.root / GENERATIONS
        for entry in sorted(gen_dir.iterdir()) if gen_dir.is_dir() else []:
            if entry.name not in keep:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
                removed.append(entry.name)
        tmp = self.root / (CURRENT + ".tmp")
        if tmp.exists():
            tmp.unlink()
            removed.append(tmp.name)
        if removed:
            fsync_dir(gen_dir)
            fsync_dir(self.root)
        return removed

    def begin(self, label: str) -> PendingGeneration | None:
        """Starts adding the generation of build ``label`` (one process, before any writer): cleans
        leftovers, creates the pending directory. None when ``label`` is already in the index (a rerun
        after the switch: nothing to do)."""
        if label in self.labels:
            return None
        self.cleanup()
        pending = self.pending(label)
        pending.path.mkdir(parents=True)
        fsync_dir(self.root / GENERATIONS)
        return pending

    def pending(self, label: str, compacted_from: tuple[str, ...] = ()) -> PendingGeneration:
        """The pending generation :meth:`begin` made (for the other writers: every process computes the
        same name from the same ``CURRENT``)."""
        gid = self._next_id()
        return PendingGeneration(
            self, gid, self.root / GENERATIONS / (gid + PARTIAL), (label,), compacted_from
        )

    def begin_compaction(self) -> PendingGeneration | None:
        """Starts merging every generation into one (None with fewer than two)."""
        if len(self.generations) < 2:
            return None
        self.cleanup()
        pending = self.pending_compaction()
        pending.path.mkdir(parents=True)
        fsync_dir(self.root / GENERATIONS)
        return pending

    def pending_compaction(self) -> PendingGeneration:
        gid = self._next_id()
        return PendingGeneration(
            self,
            gid,
            self.root / GENERATIONS / (gid + PARTIAL),
            tuple(self.labels),
            tuple(g.id for g in self.generations),
        )

    def add_generation(
        self, label: str, batches: Iterable[np.ndarray], run_records: int = RUN_RECORDS
    ) -> PersistentIndex:
        """One process: the records of build ``label`` (batches of the record dtype, any order, any
        size) as a new generation; a rerun after the switch changes nothing."""
        pending = self.begin(label)
        if pending is None:
            return self
        with pending.writer(range(self.partitions), run_records) as writer:
            for rows in batches:
                writer.add(rows)
        return pending.commit()

    def compact(self, merge_records: int = MERGE_RECORDS) -> PersistentIndex:
        """One process: every generation merged into one (keep-first, or summed), switched to, the old ones
        removed."""
        pending = self.begin_compaction()
        if pending is None:
            return self
        pending.compact_partitions(range(self.partitions), merge_records)
        new = pending.commit()
        new.cleanup()
        return new

    def fork(self, new_root: Path | str) -> PersistentIndex:
        """A new index at ``new_root`` naming the same generations, their files hard-linked (copied
        across file systems), with its own ``CURRENT``: what a new build starts from (``--base``). The
        files are immutable, so sharing them is safe; updates of either index never touch the other.
        A kill leaves ``new_root`` without ``CURRENT``; the next fork starts it again."""
        new_root = Path(new_root)
        if (new_root / CURRENT).exists():
            raise FileExistsError(f"{new_root} already holds an index")
        gen_dir = new_root / GENERATIONS
        shutil.rmtree(gen_dir, ignore_errors=True)
        gen_dir.mkdir(parents=True)
        for g in self.generations:
            tmp = gen_dir / (g.id + PARTIAL)
            tmp.mkdir()
            copied = []
            for f in sorted(g.path.iterdir()):
                try:
                    os.link(f, tmp / f.name)
                except OSError:
                    shutil.copyfile(f, tmp / f.name)
                    copied.append(tmp / f.name)
            fsync_files(copied)
            fsync_dir(tmp)
            os.rename(tmp, gen_dir / g.id)
        fsync_dir(gen_dir)
        switch_pointer(new_root, self.pointer)
        return PersistentIndex.open(new_root, self.kind, self.params)

    def verify(self) -> None:
        """Checks the sha256 of every file of every generation (reads them all)."""
        for gen in self.generations:
            for p in range(self.partitions):
                part = gen.part(p)
                for name, sha in ((part["file"], part["sha256"]), (part["bloom_file"], part["bloom_sha256"])):
                    if file_sha256(gen.path / name) != sha:
                        raise IndexDamaged(f"{gen.path / name}: sha256 differs from the manifest")


@dataclass
class PendingGeneration:
    """A generation being written in ``<id>.partial``: filled by writers (one per range of partitions),
    then committed once, by one process."""

    index: PersistentIndex
    id: str
    path: Path
    labels: tuple[str, ...]
    compacted_from: tuple[str, ...] = ()

    def writer(self, parts: range | None = None, run_records: int = RUN_RECORDS) -> PartitionWriter:
        return PartitionWriter(
            self, parts if parts is not None else range(self.index.partitions), run_records
        )

    def compact_partitions(self, parts: range, merge_records: int = MERGE_RECORDS) -> None:
        """Merges partitions ``parts`` of every generation (oldest first wins) into this one."""
        write_compaction(self, parts, merge_records)

    def commit(self) -> PersistentIndex:
        """Every partition complete -> manifest, fsync, rename, pointer switch. Returns the new index."""
        idx = self.index
        now = PersistentIndex.open(idx.root)
        if [g.id for g in now.generations] != [g.id for g in idx.generations]:
            raise RuntimeError(
                f"{idx.root}: the index changed while {self.id} was written (one update at a time)"
            )
        parts, missing = [], []
        for p in range(idx.partitions):
            side = self.path / f"{part_name(p)}.json"
            if side.exists():
                parts.append(json.loads(side.read_bytes()))
            else:
                missing.append(p)
        if missing:
            raise RuntimeError(
                f"{self.path}: partitions {missing[:10]} ({len(missing)} in all) are not written"
            )
        manifest = {
            "format": FORMAT,
            "generation": self.id,
            "kind": idx.kind,
            "record": {"fields": [list(f) for f in idx.record.descr], "itemsize": idx.record.itemsize},
            "partition": {
                "key_bytes": [KINDS[idx.kind].partition_offset, KINDS[idx.kind].partition_offset + 8],
                "rule": "floor(u * P / 2^64), u the big-endian uint64 of those key bytes",
            },
            "params": idx.params,
            "partitions": idx.partitions,
            "bloom": idx.bloom_spec.to_dict(),
            "labels": list(self.labels),
            "compacted_from": list(self.compacted_from),
            "records": sum(int(s["records"]) for s in parts),
            "parts": parts,
        }
        manifest_sha = write_bytes(self.path / MANIFEST, json_bytes(manifest))
        for p in range(idx.partitions):
            (self.path / f"{part_name(p)}.json").unlink()
        shutil.rmtree(self.path / "runs", ignore_errors=True)
        fsync_dir(self.path)
        kill_point("generation-staged")
        final = idx.root / GENERATIONS / self.id
        os.rename(self.path, final)
        fsync_dir(idx.root / GENERATIONS)
        kill_point("generation-renamed")
        entries = [
            {
                "id": g.id,
                "manifest_sha256": hashlib.sha256((g.path / MANIFEST).read_bytes()).hexdigest(),
                "records": g.records,
                "labels": g.labels,
            }
            for g in idx.generations
            if g.id not in self.compacted_from
        ]
        entries.append(
            {
                "id": self.id,
                "manifest_sha256": manifest_sha,
                "records": manifest["records"],
                "labels": list(self.labels),
            }
        )
        switch_pointer(idx.root, {**idx.pointer, "generations": entries})
        return idx.reopen()


@dataclass(frozen=True)
class BaseGenerations:
    """A build's index of one kind as its base left it: only the generations of the builds it was forked
    from (:meth:`PersistentIndex.held_by`), so the build's own generation (committed when the build
    succeeds) never answers its own probe and a rerun of a stage decides as the first run did."""

    index: PersistentIndex
    digest: str  # of the base generations' pointer entries (ids, manifest sha256, labels)

    @property
    def probed(self) -> bool:
        """Whether there is a base to probe (a build without one only records its own keys)."""
        return bool(self.index.generations)

    @property
    def partitions(self) -> int:
        return self.index.partitions

    def part_of(self, key: bytes) -> int:
        return int(self.index.partition_of([key])[0])

    @classmethod
    def of_stage(cls, stage_directory: Path, kind: str, params: dict[str, Any]) -> BaseGenerations | None:
        """The ``kind`` index of the build ``stage_directory`` belongs to; None for a stage run on its own
        (or in a build that keeps no index of that kind). :class:`IndexMismatch` for other key
        parameters, :class:`IndexMixed` for a compacted fork."""
        build = build_dir_of_stage(stage_directory)
        if build is None or not (dedup_index_dir(build, kind) / CURRENT).exists():
            return None
        record = dedup_base_path(build)
        index = PersistentIndex.open(dedup_index_dir(build, kind), kind, params)
        view = index.held_by(json.loads(record.read_text())["labels"] if record.exists() else [])
        return cls(view, json_digest(view.pointer["generations"]))

    def describe(self) -> dict[str, Any]:
        return {
            "partitions": self.partitions,
            "base": self.digest,
            "base_generations": [g.id for g in self.index.generations],
            "base_records": self.index.records,
        }
