"""The version step on N ranks: each rank judges its own shards, the global steps go through exchanges.

1. Each rank owns whole shards (:func:`corpus.version.partition.assign_shards`) and runs the row rules
   on them alone. 2. A top_fraction's cut in a language is the k-th score of that language across ranks
   (:func:`mpi_kernels.kth_select.kth_smallest`; ties by (doc_id, shard, index) the same way). 3. A
   near-duplicate group's (and a repository cluster's) passing members go, as a few bytes each, to the
   rank owning the group (:func:`mpi_kernels.shuffle_bytes.shuffle_by_key`), which sends the winners
   back. 4. A bucket's ``qNN`` is a k-th value like 2. 5. Each rank writes its shards' bitmaps; rank 0
   writes the manifest from the ranks' entries. No rank holds another's rows, and the bytes are those
   of :func:`corpus.version.plan.make_version` on any rank count. docs/versions.md ("The version step on N ranks").
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from corpus.select.blocklists import FileFacts, blocklisted_counts, union_blocklists
from corpus.select.buckets import BucketDef, Clause, quantile_values_sql
from corpus.select.selection import Selection, TopFraction
from corpus.version.buckets import Resolver, VersionBuckets, assign_buckets, bucket_error, resolve_buckets
from corpus.version.open import StoredShard, Version, open_version
from corpus.version.partition import (
    RankRows,
    assign_shards,
    group_key,
    group_of,
    judge_rows,
    no_rows,
    quantile_disc_index,
    rank_bits,
    repo_order,
    representative_order,
    tie_keys,
    top_cut,
)
from corpus.version.plan import (
    kept_table,
    merge_kept,
    refuse_empty_buckets,
    refuse_other_version,
    version_id_in,
)
from corpus.version.query import columns, connect, resolve_blocklists
from corpus.version.write import (
    assemble_manifest,
    begin_version_dir,
    finish_version_dir,
    refuse_version_out,
    shard_entries,
    write_bitmaps,
)
from mpi_kernels.kth_select import kth_smallest
from mpi_kernels.shuffle_bytes import shuffle_by_key, stable_key_hash
from runtime.job_failure import agreed, from_rank0


@dataclass(frozen=True)
class Share:
    """What one rank made of its shards."""

    shards: tuple[int, ...]  #: positions in the version's shards (tombstoned ones included)
    bits: dict[str, np.ndarray]  #: its live shards' selections
    buckets: VersionBuckets | None  #: resolved across ranks; documents of its own shards
    entries: list[tuple[dict[str, Any], tuple[int, int]]]  #: its shards' manifest entries
    kept: dict[str, dict[str, dict[str, int]]]
    reasons: Counter
    rows: int
    #: the selection, its blocklists resolved against the whole build (the same on every rank)
    selection: Selection
    #: per blocklist category, this rank's stored documents it lists; the list files read
    blocklisted: Counter = field(default_factory=Counter)
    read: list[FileFacts] = field(default_factory=list)


def _connect(comm: Any, version: Version, mine: tuple[StoredShard, ...]) -> tuple[Any, list[str]]:
    """A connection over this rank's live shards (None: it has none), with the score columns only
    other ranks' shards have added as nulls, and the build's columns."""
    removed = version.removed
    con = connect(Version(version.base_dir, version.base, mine), removed=removed) if mine else None
    local = columns(con) if con is not None else []
    every = list(dict.fromkeys(c for cols in comm.allgather(local) for c in cols))
    missing = tuple(c for c in every if c not in local)
    if con is not None and missing:
        con = connect(Version(version.base_dir, version.base, mine), missing, removed)
    return con, every


def _lang_counts(comm: Any, langs: np.ndarray) -> list[tuple[str | None, int]]:
    """Every rank's (language, rows) summed, in one order on every rank (None, a NULL language, last)."""
    total: Counter = Counter()
    for counts in comm.allgather(Counter(langs.tolist())):
        total.update(counts)
    return sorted(total.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))


def _best_of(
    comm: Any, rows: RankRows, mask: np.ndarray, values: np.ndarray, keep: int, n: int
) -> np.ndarray:
    """The ``keep`` best of the ``n`` rows ``mask`` marks on every rank: score descending, then
    (doc_id, shard, index) ascending, as the one-process query's ``row_number()``."""
    if keep <= 0:
        return np.zeros(len(rows), dtype=bool)
    if keep >= n:
        return mask.copy()
    cut = kth_smallest(comm, np.sort(values[mask]), n - keep).value
    out = mask & (values > cut)
    ties = mask & (values == cut)
    keys = tie_keys(rows, ties)
    last = kth_smallest(comm, np.sort(keys), keep - sum(comm.allgather(int(out.sum()))) - 1).value
    out[np.flatnonzero(ties)[keys <= last]] = True
    return out


def top_fraction(comm: Any, rows: RankRows, passes: np.ndarray, t: TopFraction) -> np.ndarray:
    """``passes`` after one ``[[top_fraction]]``: per language, the top ``round(share * n)`` of the
    passing rows with a score (the others no longer pass)."""
    values, valid = rows.scores[t.score]
    eligible = passes & valid
    kept = np.zeros(len(rows), dtype=bool)
    for lang, n in _lang_counts(comm, rows.lang[eligible]):
        share = t.keep if lang is None else t.by_lang.get(lang, t.keep)
        mask = eligible & np.array([x == lang for x in rows.lang], dtype=bool)
        kept |= _best_of(comm, rows, mask, values, top_cut(share, n), n)
    return kept


def _origin(rank: int, row: int) -> bytes:
    return rank.to_bytes(4, "big") + row.to_bytes(8, "big")


def group_firsts(comm: Any, records: list[tuple[bytes, bytes]], ties: bool) -> np.ndarray:
    """Collective: of each group's records (:func:`group_key`, payload :func:`_origin`), the rows of
    this rank whose order is the group's first (``ties``: every row sharing it). Records go to the
    group's owner by its key alone; the owner sends the first ones back to their rows' ranks."""
    received = shuffle_by_key(comm, records, partition_of=lambda k: stable_key_hash(group_of(k)))
    back, current, first = [], None, None
    for key, origin in received:
        group = group_of(key)
        order = key[4 + len(group) :]
        if group != current:
            current, first = group, order
            back.append((origin, b""))
        elif ties and order == first:
            back.append((origin, b""))
    returned = shuffle_by_key(comm, back, partition_of=lambda k: int.from_bytes(k[:4], "big"))
    return np.array([int.from_bytes(k[4:], "big") for k, _ in returned], dtype=np.int64)


def representatives(comm: Any, rows: RankRows, passes: np.ndarray) -> np.ndarray:
    """Which passing rows are their near-duplicate group's first (build age, ``representative_key``,
    place) and in their repository cluster's best-ranked repository (or in none)."""
    rank = comm.Get_rank()
    live = np.flatnonzero(passes).tolist()
    firsts = group_firsts(
        comm,
        [(group_key(rows.group[i], representative_order(rows, i)), _origin(rank, i)) for i in live],
        False,
    )
    clustered = [i for i in live if rows.repo_cluster[i] is not None]
    best = group_firsts(
        comm,
        [(group_key(rows.repo_cluster[i], repo_order(rows, i)), _origin(rank, i)) for i in clustered],
        True,
    )
    first = np.zeros(len(rows), dtype=bool)
    first[firsts] = True
    in_best = np.array([c is None for c in rows.repo_cluster], dtype=bool)
    in_best[best] = True
    return passes & first & in_best


def quantile_resolver(comm: Any, con: duckdb.DuckDBPyConnection | None) -> Resolver:
    """A bucket's ``qNN`` across ranks: each rank's pool values of the column (sorted), DuckDB's
    ``quantile_disc`` position among all of them (:func:`quantile_disc_index`), the value there."""

    def resolve(b: BucketDef, c: Clause) -> Any:
        values = None
        if con is not None:
            sql, p = quantile_values_sql(b, c, "bucket_pool")
            try:
                values = con.execute(sql, p).to_arrow_table().column(0)
            except duckdb.Error as e:
                raise bucket_error(b, e) from None
        local = values.to_numpy() if values is not None else np.empty(0)
        n = sum(comm.allgather(len(local)))
        if n == 0:
            return None
        kth = kth_smallest(comm, local, quantile_disc_index(n, c.value.percent / 100))
        mine = values[kth.position].as_py() if comm.Get_rank() == kth.rank else None
        return comm.bcast(mine, root=kth.rank)

    return resolve


def plan_share(comm: Any, version: Version, selection: Selection) -> Share:
    """Collective: this rank's share of the version of ``version``'s build under ``selection``."""
    owned = assign_shards([k.docs for k in version.base.shard_keys()], comm.Get_size())[comm.Get_rank()]
    gone = set(version.tombstones)
    mine = tuple(version.shards[i] for i in owned if version.shards[i].name not in gone)
    con, cols = _connect(comm, version, mine)
    # each rank matches the list files against its own shards; the union is the build's answer
    local, read = agreed(comm, lambda: resolve_blocklists(con, selection))
    selection = replace(local, blocklists=tuple(union_blocklists(comm.allgather(list(local.blocklists)))))
    reasons: Counter = Counter()
    rows = agreed(
        comm, lambda: judge_rows(con, selection, cols, reasons) if con is not None else no_rows(selection)
    )
    passes = rows.passes
    for t in selection.top_fraction:
        passes = top_fraction(comm, rows, passes, t)
    if selection.near_duplicates == "representative":
        passes = representatives(comm, rows, passes)
    bits = rank_bits(rows, passes, mine)
    buckets, match = None, None
    if selection.buckets:
        resolve = quantile_resolver(comm, con)
        if con is not None:
            buckets, match = assign_buckets(con, selection.buckets, mine, bits, resolve)
        else:  # no shard here: a part in each resolution all the same
            buckets = VersionBuckets(
                selection.buckets, resolve_buckets(None, selection.buckets, resolve)[0], {}
            )
    kept = (
        kept_table(con, Version(version.base_dir, version.base, mine), bits, selection.buckets, match)
        if con
        else {}
    )
    entries = shard_entries(tuple(version.shards[i] for i in owned), bits, gone, buckets)
    listed = Counter(
        blocklisted_counts(con, selection.blocklists) if con is not None and selection.blocklists else {}
    )
    return Share(owned, bits, buckets, entries, kept, reasons, len(rows), selection, listed, read)


@dataclass(frozen=True)
class Made:
    """What rank 0 reports of a version made on ranks (other ranks: None)."""

    manifest: dict[str, Any]
    kept: dict[str, dict[str, dict[str, int]]]


def _manifest_of(
    version: Version, selection: Selection, share: Share, reports: list[tuple[Any, ...]]
) -> Made:
    """Rank 0: the manifest from every rank's report (its shards, their entries, its kept table, its
    policy reasons), the entries in the version's shard order."""
    reports = sorted(reports, key=lambda r: r[0][:1] or (len(version.shards),))
    reasons = sum((r[3] for r in reports), Counter())
    listed = sum((r[4] for r in reports), Counter())
    manifest = assemble_manifest(
        version,
        selection,
        [e for r in reports for e in r[1]],
        list(version.tombstones.values()),
        dict(reasons) if selection.policy is not None else None,
        share.buckets,
        blocklisted={b.category: listed[b.category] for b in selection.blocklists}
        if selection.blocklists
        else None,
    )
    return Made(manifest, merge_kept([r[2] for r in reports]))


def make_on_ranks(comm: Any, build: Path, selection: Selection, out: Path) -> tuple[Made | None, Share]:
    """Collective :func:`corpus.version.plan.make_version`: the same refusals, the same bytes. Rank 0
    gets what was made; every rank its share."""
    out = Path(out)

    def check_out() -> str | None:
        same = version_id_in(out)
        refuse_version_out(out, holding_a_version=same is not None)
        return same

    same = from_rank0(comm, check_out)
    version = open_version(build)
    share = plan_share(comm, version, selection)
    # what rank 0 needs of each rank: never its bits (O(documents)), only its entries (O(shards))
    reports = comm.gather((share.shards, share.entries, share.kept, share.reasons, share.blocklisted), root=0)
    selection = share.selection
    made: Made | None = None

    def begin() -> Path | None:
        nonlocal made
        made = _manifest_of(version, selection, share, reports)
        refuse_empty_buckets(made.kept, selection)
        if same is not None:
            refuse_other_version(out, same, made.manifest["snapshot_id"])
            return None
        return begin_version_dir(out)

    new = from_rank0(comm, begin)
    if new is not None:
        gone = set(version.tombstones)
        try:
            agreed(
                comm,
                lambda: write_bitmaps(new, [e for e, _ in share.entries], share.bits, gone, share.buckets),
            )
            if comm.Get_rank() == 0:
                read = {"blocklist_files": [asdict(f) for f in share.read]} if share.read else None
                finish_version_dir(new, out, made.manifest, version.base_dir, read)
        finally:
            if comm.Get_rank() == 0:
                shutil.rmtree(new, ignore_errors=True)
    return made, share
