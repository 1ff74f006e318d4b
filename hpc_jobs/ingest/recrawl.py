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
from corpus.formats.dedup_index import PersistentIndex
from corpus.formats.dedup_keys import date_values, dates
from corpus.formats.docshard import RecordsFile
from corpus.model.digest import canonical_json
from hpc_jobs.ingest.bundles import key_prefixes
from hpc_jobs.ingest.items import Item
from mpi_kernels.barrier import sleeping_bcast
from mpi_kernels.shuffle_bytes import stable_key_hash
from runtime.against_base import AgainstBase, IndexFacts, with_base_values
from runtime.global_phase import GlobalPhase, Part, PartWriter, route_verdicts, write_verdicts
from runtime.input_shard import InputShard
from runtime.runner import StageContext, StageError

#: bump when the same file would be read into different keys (invalidates the global phase)
READER_VERSION = "2"  # docs/ingest-and-filters.md, "Stage versions"
# the recrawl collapse's steps (runtime.global_phase)
KEYS = "keys"
KEYS_FILE = ".keys.jsonl"
GROUPS = "groups"
DECISIONS = "decisions"


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
    """A groups part's counts: the repeats it dropped, and with a probed base the index's facts."""

    duplicates: int
    index: IndexFacts | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"duplicates": self.duplicates} | (self.index.to_dict() if self.index is not None else {})


def write_keys(writer: PartWriter, fetches: Iterable[tuple[InputShard, Item]]) -> dict[str, Any]:
    """One unit's keys part: (url, raw digest, date, file content id, position in the file) of each
    document, from its files' records."""
    f = writer.open(KEYS_FILE)
    n = 0
    for file, it in fetches:
        if it.doc is not None:
            f.write(
                canonical_json([it.doc.url, it.doc.raw_digest, it.doc.crawl_date, file.content_id, it.index])
                + b"\n"
            )
            n += 1
    return {"records": n}


def collapse(
    ctx: StageContext, phase: GlobalPhase, inputs: list[InputShard], groups: list[str], against: AgainstBase
) -> dict[str, Any]:
    """Collective: the groups and decisions steps, after the keys step; returns the phase's facts."""
    names = [s.name for s in inputs]
    # 1. identical files share one digest and so one set of verdicts (a unit of a large file is
    #    identified by its span too: the units of one file share its digest, not their records); a
    #    verdict goes to each unit holding the file, keyed by the file's place in it (bundles.key_prefixes)
    names_of_sha: dict[str, list[tuple[str, str]]] = {}
    for s in inputs:
        for prefix, f in key_prefixes(s):
            names_of_sha.setdefault(f.content_id, []).append((s.name, prefix))
    # 2. every key to the part of its (url, raw digest), which decides its groups (inside a build, also
    #    writing the records of the fetches it keeps)
    index = against.base.index if against.probed else None
    senders = sleeping_bcast(phase.comm, phase.parts(KEYS, names) if ctx.rank == 0 else None)
    phase.exchange(
        GROUPS,
        groups,
        senders,
        lambda part: send_keys(part, index, len(groups)),
        lambda g, records, writer: decide_part(
            g, records, writer, against=against, names_of_sha=names_of_sha
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
        if against.probed:
            facts |= IndexFacts.summed(p.facts for p in decided_parts).to_dict()
    return sleeping_bcast(phase.comm, facts)


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
    against: AgainstBase,
    names_of_sha: dict[str, list[tuple[str, str]]],
) -> dict[str, Any]:
    """One groups part: its groups decided, their verdicts written; inside a build, the records of the
    fetches it keeps (``against.records``: in place before the part's marker)."""
    fetch_groups = (
        [RecordKey(*json.loads(group_key), *json.loads(p)) for _, p in group]
        for group_key, group in groupby(records, key=itemgetter(0))
    )
    decided = (
        with_base_values(against.base, g, fetch_groups, key=fetches_key, size=len, decode=dates)
        if against.probed
        else ((f, None) for f in fetch_groups)
    )
    tally: Counter = Counter()
    write_verdicts(writer, verdict_lines(decided, names_of_sha, against.records(writer), tally))
    return PartFacts(tally["duplicates"], IndexFacts.of(tally) if against.probed else None).to_dict()


def fetches_key(fetches: list[RecordKey]) -> bytes:
    """The recrawl index's key of a group's fetches (one url and raw digest)."""
    return recrawl_key(fetches[0].url, fetches[0].raw_digest)


def verdict_lines(
    decided: Iterable[tuple[list[RecordKey], str | None]],
    names_of_sha: dict[str, list[tuple[str, str]]],
    own: RecordsFile | None,
    tally: Counter,
) -> Iterator[tuple[str, str, str]]:
    """(unit name, key in the unit, kept fetch's date) of every repeat of the decided groups; counts into
    ``tally`` (``duplicates`` and the fields of :class:`IndexFacts`) and writes the kept fetches' records to ``own``."""
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
            for name, prefix in names_of_sha[k.input_sha256]:
                yield name, prefix + str(k.index), kept_date


def _recrawl_row(key: bytes, date: str, path: Path) -> bytes:
    """One record of the recrawl index: the key and the kept fetch's date (a date too long for the
    record stops the stage, naming it)."""
    try:
        return key + bytes(date_values([date])[0])
    except ValueError as e:
        raise StageError(f"{path.name}: {e}") from None
