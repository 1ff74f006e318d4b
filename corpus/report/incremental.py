"""The data card's Incremental section: what a build made against a base (``corpus build --base``) found
of the base, and the dedup indexes it carries on.

The delta's exact_dedup drops every copy of a base document, so its yield depends on how much the new
crawl repeats the old one: the section gives per source the cross-crawl duplicate rate, the near
copies of a base document (checked against minhash_dedup's own count), the keep-first cases a reader
may revisit (a more trusted delta document left a duplicate of a base one) and each index's size.
Every number is read from what the delta's own run wrote. The sections and their sources:
docs/report.md ("Incremental", "Where each number comes from").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from html import escape
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from corpus.formats import dedup_files, dedup_keys
from corpus.formats import dedup_index as pi
from corpus.formats.docshard import iter_records
from corpus.model.facts import DedupFacts, SnapshotFacts
from corpus.model.layout import base_build_of, dedup_base_path, dedup_index_dir
from corpus.model.tiers import source_rank
from corpus.report.alarms import own_shards
from corpus.report.build_view import BuildView
from corpus.report.widgets import html_table, note, number, percent
from corpus.version.open import Version
from corpus.version.query import connect


def cross_crawl_duplicates(
    copies: Iterable[dict[str, Any]],
    own_keepers: set[str],
    base_tiers: dict[str, str],
    docs_in: dict[str, int],
) -> dict[str, dict[str, Any]]:
    """Per source of the delta: its documents (``docs_in``), how many are copies of a base document, the
    rate in percent, how many of those are of a more trusted tier than the base document they copy
    (``more_trusted_than_base``) and how many copy a base document the base did not store. ``copies``:
    exact_dedup's copy records (``doc_id`` = the keeper, ``source``, ``tier`` of the copy);
    ``own_keepers``: the keepers the delta decided itself; ``base_tiers``: a base keeper's tier."""
    out = {
        source: {"docs": n, "in_base": 0, "rate": None, "more_trusted_than_base": 0, "base_not_stored": 0}
        for source, n in docs_in.items()
    }
    for c in copies:
        if c["doc_id"] in own_keepers:
            continue
        row = out.setdefault(
            c["source"],
            {"docs": 0, "in_base": 0, "rate": None, "more_trusted_than_base": 0, "base_not_stored": 0},
        )
        row["in_base"] += 1
        base_tier = base_tiers.get(c["doc_id"])
        if base_tier is None:
            row["base_not_stored"] += 1
        elif source_rank(c["tier"]) < source_rank(base_tier):
            row["more_trusted_than_base"] += 1
    for row in out.values():
        row["rate"] = round(100 * row["in_base"] / row["docs"], 3) if row["docs"] else None
    return dict(sorted(out.items()))


def near_copies_of_base(linked: dict[str, int], docs_in: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Per source of the delta: its documents entering minhash_dedup (``docs_in``), how many of its
    stored documents are near copies of a base document (``linked``: per source, from
    :func:`stored_near_copies`) and the rate in percent."""
    out = {}
    for source in sorted({*docs_in, *linked}):
        n, k = docs_in.get(source, 0), linked.get(source, 0)
        out[source] = {"docs": n, "in_base": k, "rate": round(100 * k / n, 3) if n else None}
    return out


def count_near_copies(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Per source, the documents of the table ``stored`` (the delta's own shards) that name a base
    cluster: whose ``dup_cluster_id`` is set and is not the doc_id (nor the ``derived_from``) of a
    document of the table. One query."""
    rows = con.execute(
        """
        SELECT source, count(*) FROM stored
        WHERE coalesce(dup_cluster_id, '') <> ''
          AND dup_cluster_id NOT IN (
            SELECT doc_id FROM stored
            UNION SELECT derived_from FROM stored WHERE coalesce(derived_from, '') <> ''
          )
        GROUP BY source
        """
    ).fetchall()
    return dict(sorted(rows))


def stored_near_copies(view: BuildView) -> dict[str, int] | None:
    """:func:`count_near_copies` over the metadata table of the delta's own shards (those after the
    base's, which its candidates list first); None when the table is not there."""
    v = view.version
    if v is None or view.snapshot is None:
        return None
    own = own_shards(view)
    if not all(s.metadata.is_file() for s in own):
        return None
    return count_near_copies(connect(Version(v.base_dir, v.base, own))) if own else {}


def own_keepers(stage_dir: Path, side_outputs: Iterable[str]) -> set[str]:
    """The keepers exact_dedup decided itself: the values of its ``index_records/`` files."""
    found: set[str] = set()
    for path in side_outputs:
        if path.startswith("index_records/"):
            rows = np.fromfile(stage_dir / path, dtype=dedup_keys.EXACT_RECORD)
            found.update(dedup_keys.doc_ids(rows["value"]))
    return found


def base_tiers(view: BuildView, keepers: set[str]) -> dict[str, str]:
    """The tier of each base keeper among the version's stored documents (one DuckDB query)."""
    v = view.version
    if not keepers or v is None or not all(s.metadata.is_file() for s in v.live_shards):
        return {}
    con = connect(v)
    con.register("keepers", pa.table({"id": sorted(keepers)}))
    rows = con.execute(
        " UNION ".join(
            f"SELECT id, tier FROM keepers JOIN stored ON id = {column}"
            for column in ("exact_keeper_id", "doc_id", "derived_from")
        )
    ).fetchall()
    return dict(sorted(rows))


def index_size(root: Path, base_labels: set[str]) -> dict[str, Any] | None:
    """One index: its generations, records and bytes on disk, and how much of it is the base's."""
    if not (root / dedup_files.CURRENT).is_file():
        return None
    index = pi.PersistentIndex.open(root)
    gens = []
    for g in index.generations:
        gens.append(
            {
                "id": g.id,
                "records": g.records,
                "bytes": sum(f.stat().st_size for f in g.path.iterdir() if f.is_file()),
                "base": set(g.labels) <= base_labels,
            }
        )
    return {
        "partitions": index.partitions,
        "generations": len(gens),
        "records": sum(g["records"] for g in gens),
        "bytes": sum(g["bytes"] for g in gens),
        "base_generations": sum(g["base"] for g in gens),
        "base_records": sum(g["records"] for g in gens if g["base"]),
        "base_bytes": sum(g["bytes"] for g in gens if g["base"]),
        "by_generation": gens,
    }


def incremental_section(view: BuildView) -> dict[str, Any] | None:
    """The section's numbers; None for a build without a base."""
    found = base_build_of(view.build_dir) if view.build_dir is not None else None
    if found is None:
        return None
    base_dir, label = found
    section: dict[str, Any] = {
        "base": str(base_dir.resolve()),
        "base_label": label,
        "base_docs": base.docs if view.snapshot and (base := SnapshotFacts.of(view.snapshot).base) else None,
        "by_source": None,
        "base_duplicates_recorded": None,
        "near_by_source": None,
        "base_linked_docs_recorded": None,
        "near_copies_agree": None,
        "recrawls_of_base": None,
        "index": {},
    }
    m = view.stage("exact_dedup")
    if m is not None:
        stage_dir = view.stage_dir(m.stage)
        paths = [s.path for s in m.side_outputs]

        def copies() -> Iterator[dict[str, Any]]:  # streamed twice: never all the copies in memory
            return (r for p in paths if p.startswith("copies/") for r in iter_records(stage_dir / p))

        mine = own_keepers(stage_dir, paths)
        of_base = {c["doc_id"] for c in copies()} - mine
        docs_in = {source: c.docs_in for source, c in m.yield_counts().by(0).items()}
        section["by_source"] = cross_crawl_duplicates(copies(), mine, base_tiers(view, of_base), docs_in)
        section["base_duplicates_recorded"] = DedupFacts.of(m).base_duplicates
    m = view.stage("minhash_dedup")
    if m is not None:
        linked = stored_near_copies(view)
        facts = DedupFacts.of(m)
        recorded = facts.base_linked_docs
        section["base_linked_docs_recorded"] = recorded
        if facts.base_joins is not None:
            verified, rejected, unverified = facts.base_joins
            section["base_joins"] = {
                "verified": verified,
                "rejected": rejected,
                "unverified": unverified,
                "threshold": facts.join_threshold,
            }
        if linked is not None:
            docs_in = {source: c.docs_in for source, c in m.yield_counts().by(0).items()}
            section["near_by_source"] = near_copies_of_base(linked, docs_in)
            if recorded is not None:
                section["near_copies_agree"] = sum(linked.values()) == recorded
    ingest = view.stage("ingest")
    if ingest is not None:
        section["recrawls_of_base"] = DedupFacts.of(ingest).base_duplicates
    labels = set(json.loads(dedup_base_path(view.build_dir).read_text())["labels"])
    for kind in sorted(dedup_keys.KINDS):
        section["index"][kind] = index_size(dedup_index_dir(view.build_dir, kind), labels)
    return section


def near_note(near: dict[str, dict[str, Any]], recorded: int | None) -> str:
    """What the near copies are, and whether their total agrees with minhash_dedup's own count."""
    total = sum(r["in_base"] for r in near.values())
    text = (
        "'near copies of a base document': stored documents of the delta that minhash_dedup joined to a "
        "base cluster (keep-first: they stay candidates, the default version selects the base document). "
    )
    if recorded is None:
        return text + f"{total} counted; minhash_dedup recorded no count of them to check against."
    if total == recorded:
        return (
            text + f"minhash_dedup recorded {recorded} documents joined to a base cluster: the counts agree."
        )
    return text + (
        f"The counts do not agree: {total} stored documents name a base cluster, minhash_dedup recorded "
        f"{recorded} joined to one (a stage after it dropped some, a shard was deleted since, or a "
        "cluster of the delta is named by a document that is not stored)."
    )


def joins_note(joins: dict[str, Any]) -> str:
    """How minhash_dedup verified the delta's matches to base clusters (docs/incremental.md)."""
    text = (
        f"A document sharing a band key with a base cluster joined it only when its signature agreed with a "
        f"member's on at least {joins['threshold']:.2f} of its values (the base's signature store): "
        f"{number(joins['verified'])} matches verified, {number(joins['rejected'])} rejected"
    )
    if joins["unverified"]:
        return text + (
            f", {number(joins['unverified'])} trusted unverified (base clusters whose build kept no "
            "signature store)."
        )
    return text + ", none unverified."


def incremental_html(card: dict[str, Any]) -> str:
    """The card's "Incremental" section (nothing for a build without a base)."""
    s = card.get("incremental")
    if not s:
        return ""
    out = [
        "<h2>Incremental</h2>",
        f"<p>Built against the base <code>{escape(s['base'])}</code> (candidates "
        f"<code>{escape(s['base_label'][:19])}…</code>, {number(s['base_docs'])} documents): every stage ran on "
        "the new inputs only; a document that copies a base document is its duplicate (keep-first).</p>",
    ]
    exact, near = s["by_source"], s.get("near_by_source")
    if exact is None:
        out.append(note("no exact_dedup stage: the copies of the base are not known"))
    if near is None:
        out.append(
            note("no minhash_dedup stage or no metadata table: the near copies of the base are not known")
        )
    if exact is not None or near is not None:
        none = {
            "docs": None,
            "in_base": None,
            "rate": None,
            "more_trusted_than_base": None,
            "base_not_stored": None,
        }
        rows = []
        for source in sorted({*(exact or {}), *(near or {})}):
            r, q = (exact or {}).get(source, none), (near or {}).get(source, none)
            rows.append(
                [
                    escape(source),
                    number(r["docs"]),
                    number(r["in_base"]),
                    percent(r["rate"]),
                    number(r["more_trusted_than_base"]),
                    number(r["base_not_stored"]),
                    number(q["docs"]),
                    number(q["in_base"]),
                    percent(q["rate"]),
                ]
            )
        out.append("<h3>Cross-crawl duplicates</h3>")
        out.append(
            html_table(
                [
                    "source",
                    "documents",
                    "copies of a base document",
                    "rate",
                    "more trusted than the base copy",
                    "base copy not stored",
                    "documents into minhash_dedup",
                    "near copies of a base document",
                    "near rate",
                ],
                rows,
            )
        )
    if exact is not None:
        out.append(
            note(
                "'more trusted than the base copy': a document of a more trusted tier (a curated original) "
                "that stays a duplicate of a less trusted base document that arrived first (keep-first). "
                f"exact_dedup recorded {s['base_duplicates_recorded']} copies of base documents."
            )
        )
    if near is not None:
        out.append(note(near_note(near, s.get("base_linked_docs_recorded"))))
    if s.get("base_joins"):
        out.append(note(joins_note(s["base_joins"])))
    if s["recrawls_of_base"] is not None:
        out.append(
            f"<p>{number(s['recrawls_of_base'])} fetches were recrawls of a base fetch (same URL, same bytes) and "
            "were dropped by ingest as its duplicates, before extraction (not counted above).</p>"
        )
    rows = []
    for kind, x in s["index"].items():
        if x is None:
            rows.append([escape(kind), "–", "–", "–", "–", "–"])
            continue
        rows.append(
            [
                escape(kind),
                number(x["generations"]),
                number(x["base_generations"]),
                number(x["records"]),
                number(x["bytes"]),
                number(x["partitions"]),
            ]
        )
    out.append("<h3>Dedup indexes</h3>")
    out.append(
        html_table(["index", "generations", "of the base", "keys", "bytes on disk", "partitions"], rows)
    )
    return "".join(out)
