"""Planning a version: the selection run, its buckets assigned, its manifest and the kept table; then written.

A plan is refused before anything is written when it empties a bucket the loader would stream. See
docs/versions.md ("Versions", the ``--dry-run`` table).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from corpus.model.errors import UserError
from corpus.model.layout import manifest_path
from corpus.select.blocklists import blocklisted_counts
from corpus.select.buckets import BucketDef
from corpus.select.selection import Selection
from corpus.version.buckets import UNBUCKETED, VersionBuckets, assign_buckets
from corpus.version.open import Version, open_version
from corpus.version.query import bits_table, connect, resolve_blocklists, select_rows
from corpus.version.write import refuse_version_out, version_manifest, write_version

GROUPS = ("bucket", "source", "lang")
#: the kept table's group of a selection's buckets by predicate
PREDICATE_GROUP = "predicate_bucket"


def kept_table(
    con: duckdb.DuckDBPyConnection,
    version: Version,
    bits: dict[str, np.ndarray],
    buckets: tuple[BucketDef, ...] = (),
    match: dict[str, np.ndarray] | None = None,
) -> dict[str, dict[str, dict[str, int]]]:
    """Per group (bucket, source, lang), per value: documents and tokens stored and kept by ``bits``,
    over the live shards of ``con``'s table ``stored`` (one pass a group): a --dry-run's table. With
    ``buckets`` by predicate, also the group ``predicate_bucket``: per bucket (in order, then
    ``(unbucketed)``) the stored documents whose first matching bucket it is (``match``) and the kept."""
    shards = version.live_shards
    con.register("planned_bits", bits_table(shards, bits, **({"match": match} if buckets else {})))
    con.register(
        "shard_buckets", pa.table({"shard": [s.name for s in shards], "bucket": [s.bucket for s in shards]})
    )
    out: dict[str, dict[str, dict[str, int]]] = {}
    for group in GROUPS:
        col = "b.bucket" if group == "bucket" else f"s.{group}"
        rows = con.execute(
            f"SELECT {col} AS g, count(*), coalesce(sum(s.tokens), 0), count(*) FILTER (WHERE p.kept), "
            "coalesce(sum(s.tokens) FILTER (WHERE p.kept), 0) FROM stored s "
            'JOIN planned_bits p USING (shard, "index") JOIN shard_buckets b USING (shard) GROUP BY 1'
        ).fetchall()
        out[group] = {
            str(g): {"stored_docs": int(n), "stored_tokens": int(t), "docs": int(k), "tokens": int(kt)}
            for g, n, t, k, kt in sorted(rows, key=lambda r: str(r[0]))
        }
    if buckets:
        rows = con.execute(
            "SELECT p.match, count(*), coalesce(sum(s.tokens), 0), count(*) FILTER (WHERE p.kept), "
            "coalesce(sum(s.tokens) FILTER (WHERE p.kept), 0) FROM stored s "
            'JOIN planned_bits p USING (shard, "index") GROUP BY 1'
        ).fetchall()
        counts = {int(g): (int(n), int(t), int(k), int(kt)) for g, n, t, k, kt in rows}
        names = [*(b.name for b in buckets), UNBUCKETED]
        out[PREDICATE_GROUP] = {
            name: dict(
                zip(
                    ("stored_docs", "stored_tokens", "docs", "tokens"),
                    counts.get(k, (0, 0, 0, 0)),
                    strict=True,
                )
            )
            for k, name in zip([*range(len(buckets)), -1], names, strict=True)
        }
    return out


def merge_kept(tables: list[dict[str, dict[str, dict[str, int]]]]) -> dict[str, dict[str, dict[str, int]]]:
    """The kept table of a version made on several ranks, from each rank's :func:`kept_table` of its own
    shards: counts summed, groups and values in the order one process gives them."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for table in tables:
        for group, rows in table.items():
            into = out.setdefault(group, {})
            for value, counts in rows.items():
                have = into.setdefault(value, dict.fromkeys(counts, 0))
                for k, n in counts.items():
                    have[k] += n
    ordered = {g: dict(sorted(out[g].items())) for g in GROUPS if g in out}
    if PREDICATE_GROUP in out:  # every rank lists the buckets in their order, then the unbucketed
        ordered[PREDICATE_GROUP] = out[PREDICATE_GROUP]
    return ordered


@dataclass(frozen=True)
class Planned:
    """A version worked out but not written: its bits, its manifest and what it keeps."""

    version: Version
    bits: dict[str, np.ndarray]
    manifest: dict[str, Any]
    #: per group (bucket, source, lang; predicate_bucket), per value: docs and tokens kept, and stored
    kept: dict[str, dict[str, dict[str, int]]]
    #: the selection's buckets by predicate, or None
    buckets: VersionBuckets | None = None
    #: facts of the making outside the id (the blocklist files read)
    run_info: dict[str, Any] | None = None

    @property
    def empty_buckets(self) -> list[str]:
        """:func:`empty_buckets` of this plan."""
        return empty_buckets(self.kept, self.buckets.defs if self.buckets is not None else ())


def empty_buckets(kept: dict[str, dict[str, dict[str, int]]], defs: tuple[BucketDef, ...]) -> list[str]:
    """The buckets the loader would stream of which the selection keeps nothing: the selection's own
    buckets by predicate (``defs``) when it defines them (then the build's buckets are not the
    loader's), else the build's buckets that have documents."""
    if defs:
        return [b.name for b in defs if kept[PREDICATE_GROUP][b.name]["docs"] == 0]
    return sorted(b for b, c in kept["bucket"].items() if c["docs"] == 0 and c["stored_docs"] > 0)


def refuse_empty_buckets(kept: dict[str, dict[str, dict[str, int]]], selection: Selection) -> None:
    """A version that empties a bucket the loader would stream is refused before anything is written."""
    empty = empty_buckets(kept, selection.buckets)
    if empty:
        whose = "the selection defines" if selection.buckets else "the build has"
        raise UserError(
            f"the selection keeps no document of bucket(s) {', '.join(empty)}, which {whose}; "
            f"nothing written (check it with --dry-run)"
        )


def refuse_other_version(out: Path, same: str, snapshot_id: str) -> None:
    """``out`` already holds a version: this very one (a retried job, left as it is) or refused."""
    if same != snapshot_id:
        raise UserError(f"--out {out} is not empty (it holds version {same}): use a new directory")


def plan_version(build: Path, selection: Selection) -> Planned:
    """What ``corpus version BUILD`` with ``selection`` would write (a version of a version keeps its
    tombstones)."""
    version = open_version(build)
    base = Version(version.base_dir, version.base, version.live_shards)
    con = connect(base, removed=version.removed)  # one connection: the table's files are opened once
    selection, read = resolve_blocklists(con, selection)
    reasons: Counter = Counter()
    bits = select_rows(con, selection, {s.name: s.docs for s in base.shards}, reasons)
    blocklisted = blocklisted_counts(con, selection.blocklists) if selection.blocklists else None
    buckets, match = (
        assign_buckets(con, selection.buckets, base.shards, bits) if selection.buckets else (None, None)
    )
    kept = kept_table(con, base, bits, selection.buckets, match)
    manifest = version_manifest(
        version,
        selection,
        bits,
        list(version.tombstones.values()),
        dict(reasons) if selection.policy is not None else None,
        buckets,
        blocklisted=blocklisted,
    )
    run_info = {"blocklist_files": [asdict(f) for f in read]} if read else None
    return Planned(version, bits, manifest, kept, buckets, run_info)


def make_version(build: Path, selection: Selection, out: Path) -> Planned:
    """Write the version into ``out``, a new or empty directory outside any build but under its
    ``versions/`` (refused, before anything is written, otherwise or when it empties a bucket). An
    ``out`` that already holds this very version (a retried job) is left as it is."""
    out = Path(out)
    same = version_id_in(out)
    refuse_version_out(out, holding_a_version=same is not None)
    planned = plan_version(build, selection)
    refuse_empty_buckets(planned.kept, selection)
    if same is not None:
        refuse_other_version(out, same, planned.manifest["snapshot_id"])
        return planned
    write_version(
        planned.version,
        planned.manifest,
        planned.bits,
        out,
        planned.version.base_dir,
        planned.run_info,
        buckets=planned.buckets,
    )
    return planned


def version_id_in(out: Path) -> str | None:
    """The id of the version ``out`` holds (a directory of its own, its manifest a version's), or None."""
    try:
        m = json.loads(manifest_path(out).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(m, dict) or "selection_sha256" not in m or not isinstance(m.get("snapshot_id"), str):
        return None
    return m["snapshot_id"]


def buckets_text(manifest: dict[str, Any]) -> str:
    """A version's buckets by predicate, each with its quantiles as resolved, and what no bucket took."""
    lines = []
    for b in manifest.get("buckets", []):
        values = ", ".join(f"{q} of {col} = {v}" for col, qs in b["resolved"].items() for q, v in qs.items())
        lines.append(
            f"bucket {b['name']}: {b['where'] or '(every selected document no earlier bucket took)'}"
            + (f" ({values})" if values else "")
        )
    if "buckets" in manifest:
        lines.append(
            f"unbucketed: {manifest['unbucketed_docs']:,} selected docs / {manifest['unbucketed_tokens']:,} tokens "
            "in no bucket (the loader does not read them)"
        )
    return "\n".join(lines)


def kept_text(kept: dict[str, dict[str, dict[str, int]]]) -> str:
    """The kept table as aligned text (a --dry-run, and after a version is written)."""
    lines = []
    for g, rows in kept.items():
        lines.append(f"{g:<24} {'docs kept':>12} {'of':>10} {'tokens kept':>14} {'of':>14}")
        for k, c in rows.items():
            lines.append(
                f"  {k:<22} {c['docs']:>12,} {c['stored_docs']:>10,} {c['tokens']:>14,} {c['stored_tokens']:>14,}"
            )
    return "\n".join(lines)
