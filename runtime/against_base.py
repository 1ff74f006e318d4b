"""A dedup stage against the build's base: the build's index of one kind, as the stage sees it.

Inside a build that keeps indexes every part of the stage's exchange writes its own index records
(``index_records/PART.KIND.rec``: the build's generation, which the build's last step commits); against a
base (``corpus build --base``) the exchange's parts are the index's partitions, so part ``p`` probes
partition ``p`` only, a batch of keys at a time. ingest (``recrawl``), exact_dedup (``exact``) and
minhash_dedup (``band``) use it. docs/incremental.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from itertools import islice
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from corpus.formats.dedup_files import CURRENT
from corpus.formats.dedup_index import BaseGenerations, IndexMismatch, IndexMixed
from corpus.formats.docshard import RecordsFile
from corpus.model.layout import INDEX_RECORDS, build_dir_of_stage, dedup_base_path, dedup_index_dir
from runtime.global_phase import PartWriter
from runtime.runner import StageContext, StageError

#: records of a part whose keys are probed against the base at once (a batch's memory, whatever the
#: size of the base)
PROBE_BATCH = 1 << 16

Group = TypeVar("Group")
Value = TypeVar("Value")


@dataclass(frozen=True)
class IndexFacts:
    """What a part reports about the index, summed into the stage's ``extra.index``: keys the base held,
    this build's documents that are duplicates of the base's, and the records of its own generation."""

    base_keys: int = 0
    base_duplicates: int = 0
    index_records: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def of(cls, facts: Mapping[str, Any]) -> IndexFacts:
        """The index facts among a part's or a phase's facts (those it lacks: zero)."""
        return cls(**{f.name: facts[f.name] for f in fields(cls) if f.name in facts})

    @classmethod
    def summed(cls, parts: Iterable[Mapping[str, Any]]) -> IndexFacts:
        """The facts of every part (dicts with the fields' keys), summed."""
        total = dict.fromkeys((f.name for f in fields(cls)), 0)
        for part in parts:
            for k in total:
                total[k] += part[k]
        return cls(**total)


def keeps_index(stage_directory: Path) -> bool:
    """Whether a stage runs inside a build that keeps indexes (its parts then write what a later build
    against it reads)."""
    build = build_dir_of_stage(stage_directory)
    return build is not None and (dedup_index_dir(build, "exact") / CURRENT).exists()


@dataclass(frozen=True)
class AgainstBase:
    """A stage's view of the build's ``kind`` index: whether its parts write records (``keeps_index``:
    inside a build that keeps indexes) and the base's generations it probes (``base``: None without a
    base), opened by :meth:`open` on every rank."""

    kind: str
    out_dir: Path
    keeps_index: bool
    base: BaseGenerations | None

    @classmethod
    def open(cls, ctx: StageContext, kind: str, params: dict[str, Any]) -> AgainstBase:
        """The view of the build ``ctx.out_dir`` belongs to. Without a base the index is not read (an
        earlier run's own generation, perhaps of other parameters, is replaced anyway); a base of other
        key parameters or a compacted fork ends the job on every rank, in one line."""
        build = build_dir_of_stage(ctx.out_dir)
        keeps = keeps_index(ctx.out_dir)
        if build is None or not dedup_base_path(build).exists():
            return cls(kind, ctx.out_dir, keeps, None)
        try:
            base = BaseGenerations.of_stage(ctx.out_dir, kind, params)
        except IndexMismatch as e:
            raise StageError(
                f"{e} (a changed dedup parameter means a full rebuild)", every_rank=True
            ) from None
        except IndexMixed as e:
            raise StageError(str(e), every_rank=True) from None
        if base is not None and not base.probed:
            ctx.say(
                f"the base's {kind} index holds no generation (a base built before builds kept {kind} "
                f"records): this stage finds nothing of the base's"
            )
        return cls(kind, ctx.out_dir, keeps, base)

    @property
    def probed(self) -> bool:
        """Whether the stage probes a base (a build against a base whose index has generations)."""
        return self.base is not None and self.base.probed

    def parts(self, count: int) -> list[str]:
        """The exchange's parts: the index's partitions when a base is probed (fixed by the index), else
        ``count`` (sized by the data: ``runtime.global_phase.part_count``), never by the rank count."""
        if self.probed:
            return [f"p{p:05d}" for p in range(self.base.partitions)]
        return [f"g{i:05d}" for i in range(count)]

    def phase_key(self) -> dict[str, Any]:
        """What the global phase's key gains from the base: its partitions and its generations' digest."""
        return (
            {"index": {"partitions": self.base.partitions, "base": self.base.digest}} if self.probed else {}
        )

    def remove_stale_records(self, ctx: StageContext, parts: list[str]) -> None:
        """On rank 0: drop the ``index_records`` of parts the phase no longer has (another base, other
        inputs, or none: the stage no longer writes records); a part of this layout keeps its file, which
        its redo replaces. Called before a barrier that precedes the exchange (the phase's opening, or
        an explicit one)."""
        keep = set(parts) if self.keeps_index else set()
        d = self.out_dir / INDEX_RECORDS
        for f in sorted(d.iterdir()) if ctx.rank == 0 and d.is_dir() else []:
            if f.name.split(".")[0] not in keep:
                f.unlink()

    def records(self, writer: PartWriter) -> RecordsFile | None:
        """The part's own index records (``index_records/PART.KIND.rec``), or None when the build keeps
        no index: opened through the part's writer, which closes them before the part's marker and
        removes them when the part fails."""
        if not self.keeps_index:
            return None
        return writer.open_records(self.out_dir / INDEX_RECORDS / f"{writer.name}.{self.kind}.rec")

    def manifest_index(self, facts: Mapping[str, Any]) -> dict[str, Any]:
        """The stage manifest's ``index`` entry: the base described, with the stage's index facts (none
        without a probed base)."""
        return {"index": self.base.describe() | dict(facts)} if self.probed else {}


def with_base_values(
    base: BaseGenerations,
    p: int,
    groups: Iterable[Group],
    *,
    key: Callable[[Group], bytes],
    size: Callable[[Group], int],
    decode: Callable[[np.ndarray], list[Value]],
) -> Iterator[tuple[Group, Value | None]]:
    """Each group of part ``p`` with the base's value of its key (``decode``d), or None. Groups are read
    ahead until :data:`PROBE_BATCH` records (``size``) are held, then their keys are probed at once (one
    Bloom filter and one mapped file of partition ``p`` at a time, every filter hit confirmed by a
    lookup): memory is a batch plus one partition. A group of a whole batch is probed before the next
    group is read, so its caller may stream the rest of it (:func:`first_records`)."""
    held: list[Group] = []
    n = 0

    def flush() -> Iterator[tuple[Group, Value | None]]:
        found = base.index.probe_partition(p, [key(g) for g in held])
        values = decode(found.values)
        for i, g in enumerate(held):
            yield g, values[i] if found.found[i] else None

    for g in groups:
        held.append(g)
        n += size(g)
        if n >= PROBE_BATCH:
            yield from flush()
            held, n = [], 0
    if held:
        yield from flush()


def first_records(
    groups: Iterable[tuple[bytes, Iterator[tuple[bytes, bytes]]]],
) -> Iterator[tuple[bytes, list[bytes], Iterator[bytes]]]:
    """Each sorted group (key, its (key, payload) records) as (key, its first :data:`PROBE_BATCH`
    payloads, the rest unread): a key with millions of copies costs a batch of memory, not its copies."""
    for k, group in groups:
        yield k, [payload for _, payload in islice(group, PROBE_BATCH)], (payload for _, payload in group)
