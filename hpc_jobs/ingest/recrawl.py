"""Recrawl collapse: identical (url, raw digest) fetches count once; the earliest is kept.

Three steps of a checkpointed global phase: ``keys`` (map: each input file's fetches), ``groups``
(exchange: each key to the part owning its (url, raw digest), which decides its groups with the pure
:func:`decide_group`) and ``decisions`` (each verdict to the input file it is about). Inside a build
every part also writes the (key, date) record of each fetch it keeps (``index_records/PART.recrawl.rec``);
with a base the parts are the recrawl index's partitions, probed a batch of keys at a time, and a pair
the base kept makes every fetch of this build a duplicate of the base's. docs/ingest-and-filters.md,
"ingest", and docs/incremental.md.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

from corpus.dedup.recrawl import RecordKey, base_fetches, kept_fetch, later_fetches, recrawl_key
from corpus.formats.dedup_index import BaseGenerations, PersistentIndex
from corpus.formats.dedup_keys import date_values, dates
from corpus.formats.docshard import RecordsFile
from corpus.model.digest import canonical_json
from corpus.model.layout import INDEX_RECORDS
from hpc_jobs.ingest.items import Item
from mpi_kernels.shuffle_bytes import stable_key_hash
from runtime.global_phase import GlobalPhase, Part, PartWriter, route_verdicts, write_verdicts
from runtime.runner import InputShard, StageContext, StageError

#: bump when the same file would be read into different keys (invalidates the global phase)
READER_VERSION = "2"  # docs/ingest-and-filters.md, "Stage versions"
# the recrawl collapse's steps (runtime.global_phase)
KEYS = "keys"
KEYS_FILE = ".keys.jsonl"
GROUPS = "groups"
DECISIONS = "decisions"
#: a part's records inside a build (``index_records/PART.recrawl.rec``): the (key, date) record of each
#: fetch it kept, for the build's own generation of the recrawl index (RECRAWL_RECORD rows, a sidecar)
INDEX_RECORDS_SUFFIX = ".recrawl.rec"
#: fetches of a part whose keys are probed against the base at once (a group is never split)
PROBE_BATCH = 1 << 16
#: what a part reports with a base: (url, raw digest) pairs the base kept, this build's fetches of them
#: (each a recrawl duplicate of the base's fetch) and the records of this build's own generation
INDEX_FACTS = ("base_keys", "base_duplicates", "index_records")


@dataclass(frozen=True)
class GroupVerdict:
    """What becomes of the fetches of one (url, raw digest): the repeats dropped, each with the date of
    the fetch kept; ``on_base`` when the base kept the pair (its fetch stays the kept one), else
    ``kept``, this build's kept fetch (the record of its own generation of the index)."""

    repeats: tuple[tuple[RecordKey, str], ...]
    on_base: bool
    kept: RecordKey | None


@dataclass(frozen=True)
class PartFacts:
    """A groups part's counts; the base's counts are reported only when the part probed a base."""

    duplicates: int = 0
    base_keys: int = 0
    base_duplicates: int = 0
    index_records: int = 0

    def to_facts(self, probed: bool) -> dict[str, Any]:
        return {"duplicates": self.duplicates} | (
            {k: getattr(self, k) for k in INDEX_FACTS} if probed else {}
        )


def group_names(base: BaseGenerations | None, inputs: list[InputShard]) -> list[str]:
    """The groups step's parts: the recrawl index's partitions when a base is probed (fixed by the
    index), else one per input file (fixed by the data)."""
    if base is not None and base.probed:
        return [f"p{p:05d}" for p in range(base.index.partitions)]
    return [f"g{i:05d}" for i in range(len(inputs))]


def write_keys(shard: InputShard, writer: PartWriter, items: Iterable[Item]) -> dict[str, Any]:
    """One input file's keys part: (url, raw digest, date, input digest, position) of each document."""
    f = writer.open(KEYS_FILE)
    n = 0
    for it in items:
        if it.doc is not None:
            f.write(
                canonical_json([it.doc.url, it.doc.raw_digest, it.doc.crawl_date, shard.sha256, it.index])
                + b"\n"
            )
            n += 1
    return {"records": n}


def collapse(
    ctx: StageContext,
    phase: GlobalPhase,
    inputs: list[InputShard],
    groups: list[str],
    base: BaseGenerations | None,
) -> dict[str, Any]:
    """Collective: the groups and decisions steps, after the keys step; returns the phase's facts."""
    probed = base is not None and base.probed
    names = [s.name for s in inputs]
    # 1. identical files share one digest and so one set of verdicts
    names_of_sha: dict[str, list[str]] = {}
    for s in inputs:
        names_of_sha.setdefault(s.sha256, []).append(s.name)
    # 2. every key to the part of its (url, raw digest), which decides its groups (inside a build, also
    #    writing the records of the fetches it keeps)
    index = base.index if probed else None
    records_dir = ctx.out_dir / INDEX_RECORDS if base is not None else None
    senders = phase.comm.bcast(phase.parts(KEYS, names) if ctx.rank == 0 else None, root=0)
    phase.exchange(
        GROUPS,
        groups,
        senders,
        lambda part: send_keys(part, index, len(groups)),
        lambda g, records, writer: decide_part(
            g,
            records,
            writer,
            index=index,
            names_of_sha=names_of_sha,
            records_path=records_dir / f"{groups[g]}{INDEX_RECORDS_SUFFIX}" if records_dir else None,
        ),
    )
    # 3. every verdict to the input file it is about
    route_verdicts(phase, DECISIONS, GROUPS, groups, names)
    # 4. the phase's facts, summed by rank 0
    facts = None
    if ctx.rank == 0:
        decided_parts = phase.parts(GROUPS, groups)
        facts = {
            "records": sum(p.facts["records"] for p in phase.parts(KEYS, names)),
            "duplicates": sum(p.facts["duplicates"] for p in decided_parts),
        }
        if probed:
            facts |= {k: sum(p.facts[k] for p in decided_parts) for k in INDEX_FACTS}
    return phase.comm.bcast(facts, root=0)


def send_keys(part: Part, index: PersistentIndex | None, n_groups: int) -> Iterator[tuple[int, bytes, bytes]]:
    """A keys part's records, each to the groups part of its (url, raw digest): the index's partition
    of its recrawl key when a base is probed, else a hash of the pair."""
    with open(part.path(KEYS_FILE), "rb") as f:
        for line in f:
            url, raw_digest, date, sha, position = json.loads(line)
            key = canonical_json([url, raw_digest])
            if index is not None:
                g = int(index.partition_of([recrawl_key(url, raw_digest)])[0])
            else:
                g = stable_key_hash(key) % n_groups
            yield g, key, canonical_json([date, sha, position])


def decide_group(fetches: list[RecordKey], base_date: str | None) -> GroupVerdict:
    """The verdict on one group's fetches (pure): keep-first against the base's date, else the earliest."""
    if base_date is not None:
        return GroupVerdict(tuple(base_fetches(fetches, base_date)), True, None)
    return GroupVerdict(tuple(later_fetches(fetches)), False, kept_fetch(fetches))


def decide_part(
    g: int,
    records: Iterator[tuple[bytes, bytes]],
    writer: PartWriter,
    *,
    index: PersistentIndex | None,
    names_of_sha: dict[str, list[str]],
    records_path: Path | None,
) -> dict[str, Any]:
    """One groups part: its groups decided, their verdicts written; inside a build, the records of the
    fetches it keeps (closed before the part's marker: a completed part always has its records)."""
    own = RecordsFile(records_path) if records_path is not None else None
    fetch_groups = (
        [RecordKey(*json.loads(group_key), *json.loads(p)) for _, p in group]
        for group_key, group in groupby(records, key=itemgetter(0))
    )
    decided = (
        with_base_dates(index, g, fetch_groups) if index is not None else ((f, None) for f in fetch_groups)
    )
    tally: Counter = Counter()
    write_verdicts(writer, verdict_lines(decided, names_of_sha, own, tally))
    if own is not None:
        own.close()
    return PartFacts(**tally).to_facts(index is not None)


def verdict_lines(
    decided: Iterable[tuple[list[RecordKey], str | None]],
    names_of_sha: dict[str, list[str]],
    own: RecordsFile | None,
    tally: Counter,
) -> Iterator[tuple[str, str, str]]:
    """(input name, position, kept fetch's date) of every repeat of the decided groups; counts into
    ``tally`` (the fields of :class:`PartFacts`) and writes the kept fetches' records to ``own``."""
    for fetches, base_date in decided:
        verdict = decide_group(fetches, base_date)
        if verdict.on_base:
            tally["base_keys"] += 1
            tally["base_duplicates"] += len(verdict.repeats)
        elif own is not None:
            kept = verdict.kept
            own.write(_recrawl_row(recrawl_key(kept.url, kept.raw_digest), kept.date, own.path))
            tally["index_records"] += 1
        tally["duplicates"] += len(verdict.repeats)
        for k, kept_date in verdict.repeats:
            for name in names_of_sha[k.input_sha256]:
                yield name, str(k.index), kept_date


def with_base_dates(
    index: PersistentIndex, p: int, groups: Iterable[list[RecordKey]]
) -> Iterator[tuple[list[RecordKey], str | None]]:
    """Each group of part ``p`` (the fetches of one url and raw digest) with the date of the fetch the base
    kept, or None. Groups are read ahead until :data:`PROBE_BATCH` fetches are held, then their keys are
    probed at once (one Bloom filter and one mapped file of partition ``p`` at a time, every filter hit
    confirmed by a lookup): memory is a batch plus one partition, whatever the size of the base."""
    held: list[list[RecordKey]] = []
    n = 0

    def flush() -> Iterator[tuple[list[RecordKey], str | None]]:
        found = index.probe_partition(p, [recrawl_key(f[0].url, f[0].raw_digest) for f in held])
        base_dates = dates(found.values)
        for i, fetches in enumerate(held):
            yield fetches, base_dates[i] if found.found[i] else None

    for fetches in groups:
        held.append(fetches)
        n += len(fetches)
        if n >= PROBE_BATCH:
            yield from flush()
            held, n = [], 0
    if held:
        yield from flush()


def _recrawl_row(key: bytes, date: str, path: Path) -> bytes:
    """One record of the recrawl index: the key and the kept fetch's date (a date too long for the
    record stops the stage, naming it)."""
    try:
        return key + bytes(date_values([date])[0])
    except ValueError as e:
        raise StageError(f"{path.name}: {e}") from None
