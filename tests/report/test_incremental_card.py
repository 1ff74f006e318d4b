"""The data card and the yield alarms of an incremental build (`corpus build --base`): the card shows the
cross-crawl duplicate rate per source (exact copies and near copies of base documents) and the dedup
indexes' size; the alarms judge the delta's own
documents and compare it with earlier incremental builds only. Real builds: the base and delta of
tests/dedup/test_incremental.py (16 pages of the March crawl, then 16 more, 8 of them the base's again)."""

from __future__ import annotations

import json
from collections import Counter

import duckdb
import pyarrow as pa

from corpus.formats import dedup_index as pi
from corpus.model.manifest import read_snapshot_manifest
from corpus.report.alarms import AlarmConfig, assess, build_metrics, previous_builds, read_history, record
from corpus.report.build_view import open_build
from corpus.report.gather import gather
from corpus.report.html import render_html
from corpus.report.incremental import (
    count_near_copies,
    cross_crawl_duplicates,
    near_copies_of_base,
    near_note,
)
from tests.dedup.stage_io import filtered_records, kept_docs, manifest
from tests.dedup.test_incremental import base, crawl, delta  # noqa: F401  (the builds, as fixtures)


def copy(keeper: str, source: str = "web", tier: str = "web") -> dict:
    return {"doc_id": keeper, "copy_doc_id": f"c-{keeper}", "source": source, "tier": tier}


def test_a_copy_of_a_base_document_counts_per_source_and_a_more_trusted_late_copy_is_named():
    copies = [
        copy("own-1"),  # a duplicate inside the delta: not cross-crawl
        copy("b-web", source="wiki", tier="curated"),  # a curated original after its web copy
        copy("b-curated", source="web", tier="web"),  # a web copy of a curated base document
        copy("b-gone", source="web"),  # its base keeper was dropped by a later base stage
    ]
    tiers = {"b-web": "web", "b-curated": "curated"}
    got = cross_crawl_duplicates(copies, {"own-1"}, tiers, {"web": 8, "wiki": 2})
    assert got == {
        "web": {"docs": 8, "in_base": 2, "rate": 25.0, "more_trusted_than_base": 0, "base_not_stored": 1},
        "wiki": {"docs": 2, "in_base": 1, "rate": 50.0, "more_trusted_than_base": 1, "base_not_stored": 0},
    }


def test_a_stored_document_naming_no_document_of_the_delta_is_a_near_copy_of_the_base():
    table = pa.table(
        {
            "doc_id": ["d1", "d2", "d3", "d4", "d5", "d6", "d7"],
            "source": ["web", "web", "web", "web", "wiki", "wiki", "web"],
            "dup_cluster_id": ["b1", "b1", "d3", "d3", "b2", "", None],  # d3: a cluster of the delta's own
            "derived_from": ["", None, "", "", "", "", ""],
        }
    )
    con = duckdb.connect()
    con.register("stored", table)
    assert count_near_copies(con) == {"web": 2, "wiki": 1}
    # a later stage changed d3's text: its cluster id is the doc_id it had, now its derived_from
    renamed = table.set_column(0, "doc_id", pa.array(["d1", "d2", "d3b", "d4", "d5", "d6", "d7"]))
    renamed = renamed.set_column(3, "derived_from", pa.array(["", "", "d3", "", "", "", ""]))
    con.register("stored", renamed)
    assert count_near_copies(con) == {"web": 2, "wiki": 1}


def test_the_near_copy_rate_is_over_the_documents_entering_minhash_dedup():
    got = near_copies_of_base({"web": 3}, {"web": 6, "wiki": 2})
    assert got == {
        "web": {"docs": 6, "in_base": 3, "rate": 50.0},
        "wiki": {"docs": 2, "in_base": 0, "rate": 0.0},
    }
    assert near_copies_of_base({"web": 1}, {})["web"]["rate"] is None
    assert "the counts agree" in near_note(got, 3)
    assert "do not agree: 3 stored documents name a base cluster, minhash_dedup recorded 4" in near_note(
        got, 4
    )
    assert "no count" in near_note(got, None)


def test_the_card_of_a_delta_shows_its_copies_of_the_base_and_the_indexes(base, delta):  # noqa: F811
    card = gather(open_build(delta[0]))
    inc = card["incremental"]
    assert inc["base"] == str(base[0].resolve()) and inc["base_docs"] == 16
    exact_dedup = manifest(delta[0] / "stages" / "exact_dedup")
    base_keepers = {d.doc_id for d in kept_docs(base[0] / "stages" / "exact_dedup")}
    of_base = Counter(
        r["doc"]["source"]
        for r in filtered_records(delta[0] / "stages" / "exact_dedup")
        if r["doc"]["dup_of"] in base_keepers
    )
    docs_in = Counter()
    for cells in exact_dedup["shard_counts"].values():
        for cell, c in cells.items():
            docs_in[cell.split("|")[0]] += c["in"]
    assert inc["by_source"] == {
        source: {
            "docs": n,
            "in_base": of_base[source],
            "rate": round(100 * of_base[source] / n, 3),
            "more_trusted_than_base": 0,  # one tier (web) in both crawls
            "base_not_stored": 0,
        }
        for source, n in docs_in.items()
    }
    assert (
        sum(of_base.values())
        == inc["base_duplicates_recorded"]
        == exact_dedup["extra"]["index"]["base_duplicates"]
    )
    minhash_dedup = manifest(delta[0] / "stages" / "minhash_dedup")
    base_clusters = {d.dup_cluster_id or d.doc_id for d in kept_docs(base[0] / "stages" / "minhash_dedup")}
    stored = {d.doc_id for d in kept_docs(delta[0] / "stages" / "tokenize")}  # what write_shards stored
    near = Counter(
        d.source
        for d in kept_docs(delta[0] / "stages" / "minhash_dedup")
        if d.doc_id in stored and d.dup_cluster_id in base_clusters
    )
    near_in = Counter()
    for cells in minhash_dedup["shard_counts"].values():
        for cell, c in cells.items():
            near_in[cell.split("|")[0]] += c["in"]
    assert inc["near_by_source"] == {
        source: {"docs": n, "in_base": near[source], "rate": round(100 * near[source] / n, 3)}
        for source, n in near_in.items()
    }
    assert near == {"web": 6}, "the 6 arm64 pages that are not exact copies joined their amd64 twin's cluster"
    assert (
        sum(near.values())
        == inc["base_linked_docs_recorded"]
        == minhash_dedup["extra"]["index"]["base_linked_docs"]
    )
    assert inc["near_copies_agree"] is True
    index = minhash_dedup["extra"]["index"]
    assert inc["base_joins"] == {
        "verified": index["base_joins_verified"],
        "rejected": index["base_joins_rejected"],
        "unverified": 0,
        "threshold": 0.65,  # verify_threshold: no cross_build_threshold set
    }
    ingest = manifest(delta[0] / "stages" / "ingest")["extra"]
    assert inc["recrawls_of_base"] == ingest.get("index", {}).get("base_duplicates")
    exact = inc["index"]["exact"]
    own = exact_dedup["extra"]["index"]["index_records"]
    base_index = pi.PersistentIndex.open(base[0] / "dedup_index" / "exact")
    assert (exact["generations"], exact["base_generations"]) == (2, 1)
    assert (exact["records"], exact["base_records"]) == (base_index.records + own, base_index.records)
    gens = sorted((delta[0] / "dedup_index" / "exact" / "generations").iterdir())
    assert exact["bytes"] == sum(f.stat().st_size for g in gens for f in g.iterdir())
    assert inc["index"]["band"]["partitions"] == 4
    html = render_html(card)
    assert '<h2 id="incremental">Incremental</h2>' in html and "<h3>Cross-crawl duplicates</h3>" in html
    assert (
        "near copies of a base document" in html
        and "6 documents joined to a base cluster: the counts agree" in html
    )
    verified, rejected = index["base_joins_verified"], index["base_joins_rejected"]
    assert "at least 0.65 of its values" in html
    assert f"{verified} matches verified, {rejected} rejected, none unverified" in html
    assert json.loads(json.dumps(card))["incremental"]["near_by_source"] == inc["near_by_source"]
    assert gather(open_build(base[0]))["incremental"] is None, "a full build has no such section"


def test_a_delta_is_judged_on_its_own_documents_not_on_the_base_its_candidates_list(base, delta):  # noqa: F811
    view = open_build(delta[0])
    metrics = build_metrics(view)
    new = manifest(delta[0] / "stages" / "write_shards")
    candidates = read_snapshot_manifest(delta[0] / "candidates")
    stored = sum(s.docs for s in candidates.shards[candidates.extra["base"]["shards"] :])  # its own
    assert metrics["ingest"]["in"] == 16, "the delta's 16 pages, never the base's"
    assert metrics["policy"]["in"] == stored == candidates.extra["docs"] - candidates.extra["base"]["docs"]
    assert sum(c["out"] for cells in new["shard_counts"].values() for c in cells.values()) == stored
    base_reasons = json.loads((base[0] / "snapshot" / "manifest.json").read_text())["policy_reasons"]
    own = {r: round(share * stored / 100) for r, share in metrics["policy"]["drops"].items()}
    total = view.version.manifest["policy_reasons"]
    assert {r: own.get(r, 0) + base_reasons.get(r, 0) for r in total} == total, (
        "the delta's own rejections plus the base's are the version's"
    )


def test_an_incremental_build_is_compared_with_earlier_incremental_builds_only(base, delta, tmp_path):  # noqa: F811
    hist = tmp_path / "yield-history.jsonl"
    record(open_build(base[0]), hist)  # a full build of the same source: exact_dedup kept everything
    view = open_build(delta[0])
    alarms, compared, _ = assess(view, hist)
    assert (alarms, compared) == ([], 0), "a full build is not a delta's peer"
    record(view, hist)
    line = json.loads(hist.read_text().splitlines()[-1])
    assert line["base"] == json.loads((delta[0] / "dedup_index" / "base.json").read_text())["label"]
    earlier = {**line, "build_id": "sha256:an-earlier-delta"}
    now = line["metrics"]["exact_dedup"]["retention"]
    before = now - 20 if now >= 20 else now + 20  # it repeated its base far more, or far less
    earlier["metrics"]["exact_dedup"]["retention"] = before
    hist.write_text(hist.read_text() + json.dumps(earlier) + "\n")
    assert [h["build_id"] for h in previous_builds(read_history(hist), view)] == ["sha256:an-earlier-delta"]
    alarms, compared, _ = assess(view, hist, AlarmConfig())
    assert compared == 1 and [a.metric for a in alarms] == ["exact_dedup"]
    assert (alarms[0].value, alarms[0].median) == (now, before)
