"""Keep-first across builds (issue 13, item 3): a near-duplicate group is a cluster or an unclustered
document alone (``coalesce(nullif(dup_cluster_id, ''), doc_id)``), ordered by build age first (the
oldest build's documents first, unless the row's source has ``prefer = "newest"``), then by
``representative_key``. A delta's new document that minhash_dedup tagged with a base cluster's id (or
with a base singleton's doc_id) never displaces the selected base document; in a full build nothing
changes.

The builds here are candidates directories as ``corpus build --base`` lays them out: the delta's
manifest lists its base's shards first, through the relative ``base`` link (``base/shards/...``, a
base's base ``base/base/shards/...``), then its own; each shard has its metadata table."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tomllib
from pathlib import Path

import duckdb
import numpy as np
import pytest

from corpus.formats.metadata import metadata_table, write_metadata
from corpus.model import SnapshotManifest, SnapshotShard
from corpus.model.digest import file_sha256
from corpus.model.errors import UserError
from corpus.report.version_funnel import version_funnel
from corpus.select.selection import parse_inline, parse_selection, selection_sql
from corpus.version.open import build_age, open_version
from corpus.version.plan import make_version
from corpus.version.query import connect, evaluate, select_rows

#: the scores of a page the default quality policy's Gopher rules pass
PROSE = {"word_count": 300, "mean_word_length": 5.0, "alpha_word_fraction": 0.95, "stop_word_count": 12}


def doc(doc_id: str, cluster: str | None = "", quality: float = 0.5, **kw) -> dict:
    """A lineage record: ``doc_id`` (hex), its ``dup_cluster_id`` (``""`` or None: in no cluster),
    scored as prose the default policy passes but for its quality."""
    rec = {
        "doc_id": doc_id,
        "source": "web",
        "source_tier": "web",
        "url": f"https://{kw.pop('host', 'site.example.org')}/{doc_id}",
        "crawl_date": "2026-03-01",
        "lang": "en",
        "lang_confidence": 0.9,
        "license_hint": "",
        "scores": {"quality": quality, **PROSE},
        "annotations": [],
        "dup_cluster_id": cluster,
        "dup_cluster_size": 1 if not cluster else 2,
        "dup_of": cluster if cluster and cluster != doc_id else "",
        "text_bytes": 100,
        "text_digest": "",
        "derived_from": "",
    }
    rec.update(kw)
    return rec


def did(n: int) -> str:
    return f"{n:032x}"


def write_candidates(root: Path, build: str, shards: dict[str, list[dict]], base: str | None = None) -> Path:
    """``root/build/candidates``: a manifest listing the base candidates' shards first (through the
    relative ``base`` link, as :func:`corpus.snapshot.inherit.inherit_base` does), then ``shards``, each with
    its metadata table and ``.meta.json``."""
    cand = root / build / "candidates"
    (cand / "metadata").mkdir(parents=True)
    (cand / "shards").mkdir()
    listed: list[SnapshotShard] = []
    if base is not None:
        os.symlink(os.path.relpath(root / base / "candidates", cand), cand / "base")
        m = SnapshotManifest.from_dict(json.loads((cand / "base" / "manifest.json").read_text()))
        listed = [
            SnapshotShard(
                path=f"base/{s.path}",
                sha256=s.sha256,
                bucket=s.bucket,
                docs=s.docs,
                tokens=s.tokens,
                files={r: f"base/{f}" for r, f in s.files.items()},
            )
            for s in m.shards
        ]
    for name, recs in shards.items():
        meta_path = cand / "metadata" / f"{name}.parquet"
        write_metadata(metadata_table(recs, name, [10] * len(recs)), meta_path)
        (cand / "shards" / f"{name}.meta.json").write_text(
            json.dumps({"metadata_sha256": file_sha256(meta_path)})
        )
        listed.append(
            SnapshotShard(
                path=f"shards/{name}.bin",
                sha256="0" * 64,
                bucket="web",
                docs=len(recs),
                tokens=10 * len(recs),
                files={"metadata": f"metadata/{name}.parquet", "meta": f"shards/{name}.meta.json"},
            )
        )
    manifest = SnapshotManifest(shards=tuple(listed), stage_versions={}, seed=0)
    (cand / "manifest.json").write_text(json.dumps(manifest.to_dict()))
    return cand


def select(cand: Path, toml: str = "") -> dict[str, list[bool]]:
    return {name: bits.tolist() for name, bits in evaluate(open_version(cand), parse_inline(toml)).items()}


def two_builds(tmp_path: Path, base_docs: list[dict], new_docs: list[dict]) -> Path:
    write_candidates(tmp_path, "march", {"web-00000": base_docs})
    return write_candidates(tmp_path, "june", {"web-00001": new_docs}, base="march")


# -- the build age -------------------------------------------------------------------------------


def test_the_build_age_is_the_number_of_base_links_in_the_listed_path():
    assert build_age("shards/web-00003.bin") == 0
    assert build_age("base/shards/web-00000.bin") == 1
    assert build_age("base/base/shards/web-00000.bin") == 2
    # only leading components count; a file named base is not a link
    assert build_age("shards/base/web-00000.bin") == 0
    assert build_age("base") == 0


def test_a_delta_lists_its_bases_shards_with_their_age(tmp_path):
    write_candidates(tmp_path, "march", {"web-00000": [doc(did(1))]})
    write_candidates(tmp_path, "june", {"web-00001": [doc(did(2))]}, base="march")
    cand = write_candidates(tmp_path, "sept", {"web-00002": [doc(did(3))]}, base="june")
    assert [(s.name, s.age) for s in open_version(cand).shards] == [
        ("web-00000", 2),
        ("web-00001", 1),
        ("web-00002", 0),
    ]
    con = connect(open_version(cand))
    assert con.execute("SELECT shard, build_age FROM shard_ages ORDER BY shard").fetchall() == [
        ("web-00000", 2),
        ("web-00001", 1),
        ("web-00002", 0),
    ]


# -- keep-first ----------------------------------------------------------------------------------


def test_a_new_document_tagged_with_a_base_singletons_doc_id_does_not_displace_it(tmp_path):
    c = did(10)
    cand = two_builds(
        tmp_path,
        [doc(c, cluster=None, quality=0.2), doc(did(11), cluster="")],  # singletons: NULL and ''
        [doc(did(5), cluster=c, quality=0.9), doc(did(6))],  # a better copy of the base's c; a new doc
    )
    assert select(cand) == {"web-00000": [True, True], "web-00001": [False, True]}
    # near_duplicates = "all" keeps every copy, as before
    assert select(cand, 'near_duplicates = "all"') == {"web-00000": [True, True], "web-00001": [True, True]}


def test_a_base_clusters_representative_stays_selected_against_a_better_new_copy(tmp_path):
    c = did(20)
    cand = two_builds(
        tmp_path,
        [doc(c, cluster=c, quality=0.3), doc(did(21), cluster=c, quality=0.6)],  # representative: 21
        [doc(did(1), cluster=c, quality=0.99, source_tier="curated", source="books")],  # better key
    )
    assert select(cand) == {"web-00000": [False, True], "web-00001": [False]}


def test_a_base_member_failing_the_rules_hands_the_group_to_the_best_passing_member(tmp_path):
    c = did(30)
    base = [doc(c, cluster=c, quality=0.9, host="optout.org"), doc(did(31), cluster=c, quality=0.4)]
    new = [doc(did(2), cluster=c, quality=0.8)]
    cand = two_builds(tmp_path, base, new)
    assert select(cand) == {"web-00000": [True, False], "web-00001": [False]}
    # the base representative is opted out: the next base member still comes first (keep-first)
    assert select(cand, 'exclude_hosts = ["optout.org"]') == {
        "web-00000": [False, True],
        "web-00001": [False],
    }
    # no base member passes: the new copy is the group's best passing member
    assert select(cand, 'exclude_hosts = ["optout.org"]\nmin_scores = { quality = 0.5 }') == {
        "web-00000": [False, False],
        "web-00001": [True],
    }
    # a base singleton that fails the policy hands its group to the new copy tagged with its doc_id
    s = did(40)
    cand = two_builds(
        tmp_path / "p", [doc(s, cluster=None, quality=0.01)], [doc(did(3), cluster=s, quality=0.7)]
    )
    assert select(cand, "[policy]\nmin_quality = 0.1\n") == {"web-00000": [False], "web-00001": [True]}


def test_the_oldest_build_comes_first_across_a_chain_of_bases(tmp_path):
    c = did(50)
    root = tmp_path / "builds"
    write_candidates(root, "march", {"web-00000": [doc(c, cluster=None, quality=0.1)]})
    write_candidates(root, "june", {"web-00001": [doc(did(4), cluster=c, quality=0.5)]}, base="march")
    cand = write_candidates(root, "sept", {"web-00002": [doc(did(3), cluster=c, quality=0.9)]}, base="june")
    assert select(cand) == {"web-00000": [True], "web-00001": [False], "web-00002": [False]}
    assert select(cand, 'prefer = { web = "newest" }') == {
        "web-00000": [False],
        "web-00001": [False],
        "web-00002": [True],
    }
    # the same bits wherever the builds lie (the age is the manifest's, not the disk's)
    moved = tmp_path / "elsewhere" / "deeper"
    shutil.copytree(root, moved, symlinks=True)
    assert (moved / "sept" / "candidates" / "base").is_symlink()
    assert select(moved / "sept" / "candidates") == select(cand)
    assert select(moved / "sept" / "candidates", 'prefer = { web = "newest" }')["web-00002"] == [True]


def test_prefer_newest_selects_the_new_copy_and_only_for_its_source(tmp_path):
    c = did(60)
    cand = two_builds(tmp_path, [doc(c, cluster=c, quality=0.9)], [doc(did(7), cluster=c, quality=0.1)])
    assert select(cand, 'prefer = { web = "newest" }') == {"web-00000": [False], "web-00001": [True]}
    # "first" is the default; another source's preference leaves web keep-first
    assert select(cand, 'prefer = { web = "first" }') == {"web-00000": [True], "web-00001": [False]}
    assert select(cand, 'prefer = { books = "newest" }') == {"web-00000": [True], "web-00001": [False]}
    # newest first, but a failing new copy hands the group back to the base's
    assert select(cand, 'prefer = { web = "newest" }\nmin_scores = { quality = 0.5 }') == {
        "web-00000": [True],
        "web-00001": [False],
    }


def test_in_a_mixed_source_group_each_row_uses_its_own_sources_preference(tmp_path):
    """Order keys: keep-first rows ``-age``, newest-first rows ``+age``, then representative_key."""
    c = did(70)
    # an old keep-first (books) document precedes a new newest-first (web) copy
    cand = two_builds(
        tmp_path,
        [doc(c, cluster=c, quality=0.1, source="books")],
        [doc(did(8), cluster=c, quality=0.9)],
    )
    assert select(cand, 'prefer = { web = "newest" }') == {"web-00000": [True], "web-00001": [False]}
    # an old newest-first (web) document yields to a newer copy, of any source
    cand = two_builds(
        tmp_path / "b",
        [doc(c, cluster=c, quality=0.9)],
        [doc(did(8), cluster=c, quality=0.1, source="books")],
    )
    assert select(cand, 'prefer = { web = "newest" }') == {"web-00000": [False], "web-00001": [True]}
    assert select(cand) == {"web-00000": [True], "web-00001": [False]}


# -- a full build: the same selection as before ---------------------------------------------------

#: the near-duplicate step of the query before keep-first (grouped by dup_cluster_id, no build age)
OLD_PICKED = (
    "passes AND (dup_cluster_id = '' OR dup_cluster_id IS NULL OR "
    "row_number() OVER (PARTITION BY dup_cluster_id, passes ORDER BY representative_key) = 1) "
    "AND (repo_cluster_id IS NULL OR "
    "dense_rank() OVER (PARTITION BY repo_cluster_id, passes ORDER BY repo_rank) = 1) AS selected"
)


def old_selection(con: duckdb.DuckDBPyConnection, toml: str) -> np.ndarray:
    """The query as it was: the new one with near_duplicates = "all", its last step replaced by the old
    representative step (the row rules and the quantiles are unchanged)."""
    sel = parse_selection({**tomllib.loads(toml), "near_duplicates": "all"})
    sql, params = selection_sql(sel, "stored")
    assert sql.count("passes AS selected") == 1
    return con.execute(sql.replace("passes AS selected", OLD_PICKED), params).fetchnumpy()["selected"]


def full_build_records(n: int = 400, seed: int = 7) -> list[dict]:
    """Documents in clusters (each cluster's id the smallest doc_id of its members, as minhash_dedup
    gives them) and unclustered ones ('' or NULL), with qualities, tiers, hosts and languages."""
    rng = random.Random(seed)
    ids = sorted(rng.sample(range(1, 10**9), n))
    rng.shuffle(ids)
    recs, i = [], 0
    while i < n:
        size = rng.choice([1, 1, 1, 2, 3, 5])
        members = ids[i : i + size]
        cid = did(min(members)) if size > 1 else rng.choice(["", None])
        for m in members:
            recs.append(
                doc(
                    did(m),
                    cluster=cid,
                    quality=round(rng.random(), 2),
                    host=rng.choice(["a.org", "b.org", "optout.org"]),
                    lang=rng.choice(["en", "fr"]),
                    source_tier=rng.choice(["web", "web", "curated"]),
                    source=rng.choice(["web", "books"]),
                )
            )
        i += size
    rng.shuffle(recs)
    return recs


@pytest.mark.parametrize(
    "toml",
    [
        "",
        'exclude_hosts = ["optout.org"]',
        "min_scores = { quality = 0.4 }",
        '[[top_fraction]]\nscore = "quality"\nkeep = 0.5\n',
        'exclude_hosts = ["optout.org"]\nlangs = ["en"]\nmin_scores = { quality = 0.2 }',
    ],
)
def test_a_full_build_selects_exactly_what_the_old_query_did(tmp_path, toml):
    """A cluster id is the doc_id of one of its members and doc_ids are unique, so an unclustered
    document's group is itself alone; every shard of a full build is age 0."""
    recs = full_build_records()
    shards = {"web-00000": recs[:150], "web-00001": recs[150:300], "web-00002": recs[300:]}
    cand = write_candidates(tmp_path, "full", shards)
    version = open_version(cand)
    assert {s.age for s in version.shards} == {0}
    con = connect(version)
    new = evaluate(version, parse_inline(toml))
    assert select_rows(con, parse_inline(toml), {s.name: s.docs for s in version.shards}).keys() == new.keys()
    old = old_selection(con, toml)  # on the connection select_rows prepared (its empty copies view)
    assert np.concatenate([new[name] for name in sorted(shards)]).tolist() == old.astype(bool).tolist()
    assert 0 < int(old.sum()) < len(recs)
    # the query with its build-age join (what a delta runs), every age 0: the same bits
    sql, params = selection_sql(parse_inline(toml), "stored", "shard_ages")
    assert "LEFT JOIN" in sql
    assert con.execute(sql, params).fetchnumpy()["selected"].tolist() == old.tolist()
    # in a full build prefer changes nothing either
    newest = evaluate(version, parse_inline('prefer = { web = "newest", books = "newest" }\n' + toml))
    assert all(np.array_equal(newest[k], new[k]) for k in new)


def test_a_table_without_shard_ages_is_a_full_build():
    """select_rows on a connection connect() did not make (no ``shard_ages``): every shard age 0."""
    recs = full_build_records(120, seed=3)
    con = duckdb.connect()
    con.register("stored", metadata_table(recs, "web-00000", [10] * len(recs)))
    new = select_rows(con, parse_inline(""), {"web-00000": len(recs)})["web-00000"]
    assert con.execute("SELECT count(*) FROM shard_ages").fetchall() == [(0,)]
    assert new.tolist() == old_selection(con, "").astype(bool).tolist()


# -- the option ----------------------------------------------------------------------------------


# (a bad ``prefer`` is a one-line error naming the key: tests/versions/test_selection.py)


#: canonical digests of selections made before ``prefer`` existed (so their versions' ids)
EMPTY_DIGEST = "82681ae18ba03a2c3a72262683da6a98f448160830dd1578f551ec1f5d8ebc80"
OLD_KEYS = {
    "min_scores", "max_scores", "min_scores_by_lang", "max_scores_by_lang", "min_lang_confidence", "langs",
    "top_fraction", "crawl_date_max", "crawl_date_max_by_source", "exclude_hosts", "exclude_sources",
    "allowed_licence_classes", "allowed_licence_classes_by_tier", "include_contaminated", "near_duplicates",
    "policy",
}  # fmt: skip


def test_a_selection_without_prefer_keeps_its_canonical_form_and_id():
    empty = parse_inline("")
    assert set(empty.canonical()) == OLD_KEYS
    assert empty.digest == EMPTY_DIGEST
    # "first" is the default: naming it is the same selection, the same id
    assert parse_inline('prefer = { web = "first", books = "first" }').canonical() == empty.canonical()
    newest = parse_inline('prefer = { web = "newest", books = "first" }')
    assert newest.canonical()["prefer"] == {"web": "newest"}
    assert newest.digest != EMPTY_DIGEST
    assert newest.digest == parse_inline('prefer = { web = "newest" }').digest


# -- the dedup scope -----------------------------------------------------------------------------


def test_per_crawl_keeps_a_representative_of_each_build_of_a_group(tmp_path):
    """``dedup_scope = "per_crawl"``: a group's representative is chosen among each build's members
    (seed 002 §3.2: a page that recurs in every crawl is kept once per crawl, not once in all); within
    one build the members still give one. A full build is one crawl."""
    c = did(90)
    cand = two_builds(
        tmp_path,
        [doc(c, cluster=c, quality=0.9), doc(did(91), cluster=c, quality=0.3)],
        [doc(did(92), cluster=c, quality=0.2), doc(did(93), cluster=c, quality=0.6)],
    )
    assert select(cand) == {"web-00000": [True, False], "web-00001": [False, False]}
    per_crawl = select(cand, 'dedup_scope = "per_crawl"')
    assert per_crawl == {"web-00000": [True, False], "web-00001": [False, True]}
    # among the selected members: each build's best that passes the row rules
    capped = select(cand, 'dedup_scope = "per_crawl"\nmax_scores = { quality = 0.5 }')
    assert capped == {"web-00000": [False, True], "web-00001": [True, False]}
    assert select(cand, 'dedup_scope = "per_crawl"\nmin_scores = { quality = 0.7 }')["web-00001"] == [
        False,
        False,
    ]
    assert select(cand, 'dedup_scope = "global"') == select(cand)
    # the card's funnel names the scope in its near-duplicate step: one member of each build dropped
    make_version(cand, parse_inline('dedup_scope = "per_crawl"'), tmp_path / "version")
    steps = {s["key"]: s["removed"] for s in version_funnel(open_version(tmp_path / "version"))["steps"]}
    assert steps == {"near_duplicates/per_crawl": 2}
    full = write_candidates(
        tmp_path / "full", "all", {"web-00000": [doc(c, cluster=c), doc(did(93), cluster=c)]}
    )
    assert select(full, 'dedup_scope = "per_crawl"') == select(full) and sum(select(full)["web-00000"]) == 1


def test_the_dedup_scope_enters_the_canonical_form_only_when_per_crawl_and_is_refused_with_what_it_contradicts():
    assert parse_inline('dedup_scope = "global"').digest == EMPTY_DIGEST
    per_crawl = parse_inline('dedup_scope = "per_crawl"')
    assert per_crawl.canonical()["dedup_scope"] == "per_crawl" and per_crawl.digest != EMPTY_DIGEST
    for toml, says in (
        ('dedup_scope = "per_snapshot"', "dedup_scope must be one of global, per_crawl"),
        ('near_duplicates = "all"\ndedup_scope = "per_crawl"', 'near_duplicates = "all" keeps every copy'),
        ('dedup_scope = "per_crawl"\nprefer = { web = "newest" }', 'prefer = "newest" orders the builds'),
    ):
        with pytest.raises(UserError, match=re.escape(says)):
            parse_inline(toml)
