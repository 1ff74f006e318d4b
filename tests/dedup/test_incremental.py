"""Incremental builds (issue 13): `corpus build --base BUILD` processes only the new inputs, collapses their
recrawls of the base's fetches (its recrawl index) and dedups them against the base's persistent exact
index; the base is never rewritten; the build commits its own index generations last, so a kill during a
commit leaves the forked index in force and a rerun gives the uninterrupted bytes. Real `corpus build`
runs, real MPI ranks, real pages of the shared crawls."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from itertools import groupby
from operator import itemgetter
from pathlib import Path

import numpy as np
import pytest

from bench.bench_incremental import build_args
from corpus.dedup.recrawl import RecordKey, recrawl_key
from corpus.formats import dedup_index as pi
from corpus.formats import dedup_keys, dedup_probe
from corpus.formats.bloom import BloomFilter
from corpus.model.layout import committed_path
from corpus.model.manifest import read_snapshot_manifest
from corpus.select.selection import parse_inline
from corpus.snapshot.lookup import Snapshot
from corpus.snapshot.validate import validate_snapshot
from corpus.text.normalize import text_key
from corpus.text.warc import RawRecord, iter_warc
from corpus.version.open import open_version
from corpus.version.plan import make_version
from corpus.version.query import connect
from hpc_jobs.exact_dedup import stage as exact_dedup
from hpc_jobs.ingest import recrawl as ingest
from hpc_jobs.line_dedup import stage as line_dedup
from hpc_jobs.minhash_dedup import stage as minhash_dedup
from hpc_jobs.minhash_dedup.base_links import base_edges, base_partition_of
from hpc_jobs.minhash_dedup.signatures import band_rows
from loader import SnapshotLoader
from mpi_kernels.minhash import MinHasher, MinHashParams, is_empty
from runtime import against_base
from tests.conftest import ROOT, run_corpus
from tests.dedup.stage_io import filtered_records, kept_docs, manifest, run_stage

CONFIG = "[dedup_index]\npartitions = 4\n"
#: the indexes a build commits, in commit order
COMMITTED = ("recrawl", "lines", "band", "exact")

#: `corpus build` with the index library's test hook: the process stops at the Nth pass of a point of an
#: index update (the build's own commits, recrawl then exact, are the only updates after the fork) and
#: waits to be killed
KILLABLE_BUILD = """
import sys, time
from corpus.formats import dedup_files
from cli.main import main
point, nth, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
passes = 0

def hook(at):
    global passes
    if at == point:
        passes += 1
        if passes == nth:
            print("AT", point, flush=True)
            time.sleep(300)

dedup_files._HOOK = hook
sys.exit(main(argv))
"""


def pages(src: Path) -> list[RawRecord]:
    """The HTML responses of a crawl file, as ingest reads them."""
    return [r for r in iter_warc(src, 64 << 20, 2_000_000) if isinstance(r, RawRecord)]


def pick_warc(src: Path, out: Path, urls: set[str]) -> Path:
    """The response records of a crawl file whose URL is in ``urls`` (in the file's order), as their own WARC."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.warcwriter import WARCWriter

    with open(src, "rb") as f, open(out, "wb") as o:
        w = WARCWriter(o, gzip=True)
        for rec in ArchiveIterator(f):
            if rec.rec_type == "response" and rec.rec_headers.get_header("WARC-Target-URI") in urls:
                w.write_record(rec)
    return out


def build(out: Path, inputs: list[Path], config: Path, *extra: str, ranks: int = 2, check: bool = True):
    return run_corpus(*build_args(inputs, out, ranks, config=config), *extra, check=check)


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def stage(build_dir: Path, name: str) -> Path:
    return build_dir / "stages" / name


ARM64_TWIN = ("installation-guide-amd64", "installation-guide-arm64")
#: a verify_threshold at which the June near copies' joins to March clusters split (some verified, some not)
STRICT = 0.9


@pytest.fixture(scope="module")
def crawl(shared_data, tmp_path_factory):
    """Base: 16 pages of the March crawl (its part 0): the first 8 the June crawl fetches again with the
    same bytes, and the first 8 installation-guide-amd64 pages whose arm64 twin June fetched. Delta: the
    June crawl's 16 records of those: the 8 recrawls and the 8 arm64 twins (some exact copies of their
    amd64 page, the others near-duplicates or new texts)."""
    d = tmp_path_factory.mktemp("incremental")
    march = shared_data / "warc" / "crawl-2026-03-part0.warc.gz"
    june = shared_data / "warc" / "crawl-2026-06.warc.gz"
    june_pages = {r.url: r.raw_digest for r in pages(june)}
    march_pages = pages(march)
    refetched = [r.url for r in march_pages if june_pages.get(r.url) == r.raw_digest][:8]
    twinned = [
        r.url for r in march_pages if r.url.replace(*ARM64_TWIN) in june_pages and ARM64_TWIN[0] in r.url
    ][:8]
    config = d / "build.toml"
    config.write_text(CONFIG)
    return (
        d,
        pick_warc(march, d / "base.warc.gz", {*refetched, *twinned}),
        pick_warc(june, d / "delta.warc.gz", {*refetched, *(u.replace(*ARM64_TWIN) for u in twinned)}),
        config,
    )


@pytest.fixture(scope="module")
def base(crawl):
    d, base_warc, _, config = crawl
    out = d / "base"
    build(out, [base_warc], config)
    return out, tree(out)


@pytest.fixture(scope="module")
def delta(crawl, base):
    """The delta built against the base on 2 ranks (the base's own input given again, to be skipped)."""
    d, base_warc, delta_warc, config = crawl
    out = d / "delta"
    proc = build(out, [delta_warc, base_warc], config, "--base", str(base[0]))
    return out, proc


def test_an_exact_copy_of_a_base_page_is_a_duplicate_of_the_base_document(base, delta):
    base_dir, delta_dir = base[0], delta[0]
    base_keepers = {text_key(d.text): d.doc_id for d in kept_docs(stage(base_dir, "exact_dedup"))}
    extracted = kept_docs(stage(delta_dir, "extract"))
    copies = {d.doc_id for d in extracted if text_key(d.text) in base_keepers}
    dups = filtered_records(stage(delta_dir, "exact_dedup"))
    assert {r["doc"]["doc_id"] for r in dups} == copies and len(copies) == 2, (
        "2 arm64 pages copy their amd64 twin"
    )
    for r in dups:
        assert r["reason"] == "exact_duplicate" and ARM64_TWIN[1] in r["doc"]["url"], "never a recrawl"
        assert r["doc"]["dup_of"] == base_keepers[text_key(r["doc"]["text"])]
    extra = manifest(stage(delta_dir, "exact_dedup"))["extra"]["index"]
    assert (extra["base_keys"], extra["base_duplicates"], extra["index_records"]) == (
        2,
        2,
        len(extracted) - 2,
    )
    stored = {d.doc_id for d in kept_docs(stage(delta_dir, "write_shards"))}
    assert not stored & {r["doc"]["doc_id"] for r in dups}, "a copy of a base page is never a candidate"
    labels = pi.PersistentIndex.open(delta_dir / "dedup_index" / "exact").labels
    assert (
        labels[0] in pi.PersistentIndex.open(base_dir / "dedup_index" / "exact").labels and len(labels) == 2
    )


def test_a_june_recrawl_of_a_march_page_is_a_recrawl_duplicate_of_the_march_fetch(base, delta):
    """Keep-first across builds: June's fetches of base URLs with the same bytes are filtered at ingest as
    recrawl_duplicate, ``recrawl_of_date`` the March fetch's date (the base's fetch stays the kept one:
    the base is byte-identical, below), so none of them reaches exact_dedup."""
    march = {(d.url, d.raw_digest): d.crawl_date for d in kept_docs(stage(base[0], "ingest"))}
    filtered = filtered_records(stage(delta[0], "ingest"))
    recrawls = [r["doc"] for r in filtered if r["reason"] == "recrawl_duplicate"]
    assert len(recrawls) == 8
    for doc in recrawls:
        assert doc["crawl_date"] == "2026-06-01" and march[(doc["url"], doc["raw_digest"])] == "2026-03-01"
        notes = [a for a in doc["annotations"] if a["name"] == "recrawl_of_date"]
        assert notes == [
            {"stage": "ingest", "name": "recrawl_of_date", "value": "2026-03-01", "verdict": "fail"}
        ]
    assert not {d["url"] for d in recrawls} & {d.url for d in kept_docs(stage(delta[0], "ingest"))}
    extra = manifest(stage(delta[0], "ingest"))["extra"]
    assert extra["recrawl_duplicates"] == 8
    index = extra["index"]
    assert (index["base_keys"], index["base_duplicates"], index["index_records"]) == (8, 8, 8)
    assert (index["base_records"], index["partitions"]) == (16, 4)
    own = pi.PersistentIndex.open(delta[0] / "dedup_index" / "recrawl")
    assert [g.records for g in own.generations] == [16, 8], "the base's fetches, then the arm64 twins'"
    answer = own.probe([recrawl_key(d["url"], d["raw_digest"]) for d in recrawls])
    assert (
        answer.found.all()
        and (answer.generation == 0).all()
        and set(dedup_keys.dates(answer.values)) == {"2026-03-01"}
    )


def test_without_a_base_ingest_in_a_build_is_the_stage_alone_plus_its_index_records(crawl, base, tmp_path):
    _, base_warc, _, _ = crawl
    alone = tmp_path / "ingest"
    run_stage("ingest", 2, base_warc, alone)
    inside = manifest(stage(base[0], "ingest"))
    records = [s for s in inside["side_outputs"] if s["path"].startswith("index_records/")]
    assert [s["path"] for s in records] == ["index_records/g00000.recrawl.rec"]
    assert manifest(alone)["outputs"] == inside["outputs"] and manifest(alone)["extra"] == inside["extra"]
    assert manifest(alone)["side_outputs"] == [s for s in inside["side_outputs"] if s not in records]
    assert records[0]["records"] == len(kept_docs(alone)) == 16, "one record per kept fetch"
    assert not (alone / "index_records").exists()


def test_a_bloom_false_positive_never_changes_a_recrawl_decision(base, monkeypatch):
    """Filters that say "maybe" to every key: each hit is confirmed by a lookup, so the decisions (read
    ahead in batches of 3 fetches) are those of the real filters: the base's fetches found with their
    date, the fetches of URLs it never had not found."""
    index = pi.PersistentIndex.open(base[0] / "dedup_index" / "recrawl")
    docs = kept_docs(stage(base[0], "ingest"))
    fetched = [RecordKey(d.url, d.raw_digest, "2026-06-01", "sha", i) for i, d in enumerate(docs)]
    absent = [RecordKey(d.url + "?again", d.raw_digest, "2026-06-01", "sha", i) for i, d in enumerate(docs)]
    by_part: dict[int, list[list[RecordKey]]] = {}
    for k in fetched + absent:
        by_part.setdefault(int(index.partition_of([recrawl_key(k.url, k.raw_digest)])[0]), []).append([k])
    monkeypatch.setattr(against_base, "PROBE_BATCH", 3)
    lookups = []
    search = dedup_probe._search
    monkeypatch.setattr(dedup_probe, "_search", lambda keys, q: lookups.append(len(q)) or search(keys, q))

    def decisions() -> dict[RecordKey, str | None]:
        return {
            g[0]: date
            for p, gs in sorted(by_part.items())
            for g, date in against_base.with_base_values(
                pi.BaseGenerations(index, "sha256:test"),
                p,
                gs,
                key=ingest.fetches_key,
                size=len,
                decode=dedup_keys.dates,
            )
        }

    real = decisions()
    real_lookups, lookups[:] = sum(lookups), []
    monkeypatch.setattr(BloomFilter, "might_contain", lambda self, hashes: np.ones(len(hashes), dtype=bool))
    assert decisions() == real
    probed = sum(len(gs) for p, gs in by_part.items() if index.generations[0].part(p)["records"])
    assert sum(lookups) == probed > real_lookups, "every key of a partition the base holds was looked up"
    assert all(real[k] == "2026-03-01" for k in fetched) and all(real[k] is None for k in absent)


def test_a_base_without_a_recrawl_index_is_used_with_a_note(crawl, base, tmp_path):
    """A base made before builds kept a recrawl index: the build goes on, says so, and June's recrawls of
    its pages are what they were before, exact duplicates of its documents."""
    _, _, delta_warc, config = crawl
    old = tmp_path / "old-base"
    shutil.copytree(base[0], old, symlinks=True)
    shutil.rmtree(old / "dedup_index" / "recrawl")
    out = tmp_path / "delta"
    proc = build(out, [delta_warc], config, "--base", str(old))
    assert f"base {old} has no recrawl index" in proc.stderr
    assert manifest(stage(out, "ingest"))["extra"]["recrawl_duplicates"] == 0
    assert "index" not in manifest(stage(out, "ingest"))["extra"]
    dups = filtered_records(stage(out, "exact_dedup"))
    assert len(dups) == 8 + 2 and sum(ARM64_TWIN[1] not in r["doc"]["url"] for r in dups) == 8
    assert [g.records for g in pi.PersistentIndex.open(out / "dedup_index" / "recrawl").generations] == [16]


def test_an_input_the_base_already_ingested_is_skipped_and_reported(crawl, base, delta, tmp_path):
    _, base_warc, _, config = crawl
    assert f"skipping {base_warc}: already ingested into base" in delta[1].stderr
    ingested = manifest(stage(delta[0], "ingest"))["inputs"]
    assert len(ingested) == 1 and not ingested[0]["path"].startswith("base")
    proc = build(tmp_path / "again", [base_warc], config, "--base", str(base[0]), check=False)
    assert proc.returncode == 2
    assert "every input is already ingested into base" in proc.stderr


def test_the_same_build_on_one_and_two_ranks(crawl, base, delta, tmp_path):
    _, base_warc, delta_warc, config = crawl
    one = tmp_path / "one"
    proc = build(one, [delta_warc], config, "--base", str(base[0]), ranks=1)
    assert proc.stdout.splitlines()[-1] == delta[1].stdout.splitlines()[-1]
    assert manifest(one / "candidates")["snapshot_id"] == manifest(delta[0] / "candidates")["snapshot_id"]
    assert manifest(one / "candidates")["extra"]["base"] == manifest(delta[0] / "candidates")["extra"]["base"]
    for kind in COMMITTED:
        assert tree(one / "dedup_index" / kind) == tree(delta[0] / "dedup_index" / kind)
    one_ingest, two_ingest = manifest(stage(one, "ingest")), manifest(stage(delta[0], "ingest"))
    for part in ("outputs", "side_outputs", "extra"):
        assert one_ingest[part] == two_ingest[part], f"ingest's {part} differ between 1 and 2 ranks"


def band_keys_of(texts: list[str]) -> list[set[bytes]]:
    """Each text's band keys, made by the MinHash kernel with minhash_dedup's default parameters."""
    c = minhash_dedup.MinhashDedupConfig()
    hasher = MinHasher(MinHashParams.of(c))
    sigs = hasher.signatures(texts)
    keys = hasher.band_keys(sigs)
    return [
        set() if empty else {k.tobytes() for k in doc}
        for doc, empty in zip(keys, is_empty(sigs), strict=True)
    ]


def test_a_june_near_duplicate_of_a_march_page_joins_the_march_cluster(base, delta):
    """Keep-first for near duplicates: an arm64 page of June that shares a band key with a March page
    (what LSH makes a candidate pair) is tagged ``dup_of`` the March page's cluster and takes its id (the
    base document's ``dup_cluster_id``, or its doc_id where it was in no cluster); a June page sharing no
    band key with the base is not. The base's documents keep their fields (the base is byte-identical,
    below) and the delta's default version keeps the March document, not the June one."""
    march = kept_docs(stage(base[0], "minhash_dedup"))
    june = [d for d in kept_docs(stage(delta[0], "minhash_dedup")) if ARM64_TWIN[1] in d.url]
    march_keys, june_keys = band_keys_of([d.text for d in march]), band_keys_of([d.text for d in june])
    tagged = 0
    for doc, keys in zip(june, june_keys, strict=True):
        matched = sorted(
            (m.dup_cluster_id or m.doc_id) for m, mk in zip(march, march_keys, strict=True) if keys & mk
        )
        if matched:
            assert (doc.dup_cluster_id, doc.dup_of) == (matched[0], matched[0]), doc.url
            tagged += 1
        else:
            assert doc.dup_of in (None, ""), f"{doc.url} shares no band key with the base"
    assert tagged >= 3 and len(june) == 6, "6 arm64 pages are not exact copies; most are near copies"
    extra = manifest(stage(delta[0], "minhash_dedup"))["extra"]["index"]
    assert extra["base_linked_docs"] == tagged and extra["base_keys"] >= tagged
    assert extra["index_records"] > 0 and extra["partitions"] == 4
    own = pi.PersistentIndex.open(delta[0] / "dedup_index" / "band")
    assert (
        len(own.generations) == 2
        and own.labels[0] in pi.PersistentIndex.open(base[0] / "dedup_index" / "band").labels
    )
    picked = dict(
        connect(open_version(delta[0] / "snapshot")).execute("SELECT doc_id, selected FROM docs").fetchall()
    )
    for doc in june:
        if doc.dup_of:
            assert not picked[doc.doc_id], f"{doc.url}: the March document is kept, not its June copy"


def test_a_join_to_a_base_cluster_is_verified_against_the_base_signature_store(crawl, base, delta, tmp_path):
    """A June page sharing a band key with a March cluster joins it only when its signature agrees with
    some member of the cluster on at least ``verify_threshold`` of its values, as an in-build pair must
    (the March build's signature store keeps its members' signatures), or ``cross_build_threshold``
    where set: computed here from the texts, at a cross-build threshold that verifies some joins and
    rejects others. The default delta verified every join it made, none trusted unverified."""
    d, _, delta_warc, config = crawl
    default = manifest(stage(delta[0], "minhash_dedup"))["extra"]["index"]
    assert default["base_joins_verified"] > 0 and default["base_joins_unverified"] == 0
    strict = tmp_path / "strict.toml"
    strict.write_text(config.read_text() + f"[minhash_dedup]\ncross_build_threshold = {STRICT}\n")
    out = tmp_path / "delta"
    build(out, [delta_warc], strict, "--base", str(base[0]))
    march = kept_docs(stage(base[0], "minhash_dedup"))
    june = [d for d in kept_docs(stage(out, "minhash_dedup")) if ARM64_TWIN[1] in d.url]
    hasher = MinHasher(MinHashParams.of(minhash_dedup.MinhashDedupConfig()))
    march_sigs, june_sigs = (hasher.signatures([d.text for d in docs]) & 0xFFFFFFFF for docs in (march, june))
    march_keys, june_keys = band_keys_of([d.text for d in march]), band_keys_of([d.text for d in june])
    cluster_of = [m.dup_cluster_id or m.doc_id for m in march]
    verified = rejected = 0
    for doc, sig, keys in zip(june, june_sigs, june_keys, strict=True):
        linked = {cluster_of[i] for i, mk in enumerate(march_keys) if keys & mk}
        agree = {
            c: max(int((sig == march_sigs[i]).sum()) for i in range(len(march)) if cluster_of[i] == c)
            for c in linked
        }
        joined = sorted(c for c, a in agree.items() if a >= STRICT * hasher.params.num_perm)
        rejected += len(linked) - len(joined)
        verified += len(joined)
        assert (doc.dup_cluster_id or None, doc.dup_of or None) == (
            (joined[0], joined[0]) if joined else (None, None)
        )
    assert verified and rejected, (
        f"the threshold {STRICT} splits this data: {verified} joins kept, {rejected} not"
    )
    extra = manifest(stage(out, "minhash_dedup"))["extra"]["index"]
    assert extra["base_joins_rejected"] > 0 and extra["base_joins_unverified"] == 0
    assert extra["join_threshold"] == STRICT and default["join_threshold"] == 0.65


def line_counts(docs: list) -> Counter:
    """In how many documents of ``docs`` each line key is (the tiers line_dedup exempts left out)."""
    exempt = line_dedup.LineDedupConfig().exempt_tiers
    return Counter(k for d in docs if d.source_tier not in exempt for k in line_dedup.doc_line_keys(d.text))


def test_the_deltas_line_dedup_counts_each_line_over_the_base_and_the_delta(crawl, base, delta, tmp_path):
    """line_dedup 6 (the lines index): a line of a June document is removed when the documents of both builds holding it
    are more than the limit of both builds' documents together, as one full build would count it
    (computed here from the stages' inputs with the stage's own line keys); March's documents keep the
    texts their build gave them. Checked on the delta fixture and on a delta at a limit of 1 document a
    line, where some line is removed only because of March's counts."""
    _, _, delta_warc, config = crawl
    low = tmp_path / "low.toml"
    low.write_text(config.read_text() + "[line_dedup]\nmax_docs_per_line = 1\n")
    build(tmp_path / "delta", [delta_warc], low, "--base", str(base[0]))
    march = kept_docs(stage(base[0], "annotate"))
    march_counts = line_counts(march)
    only_with_base = {}
    for delta_dir, cfg in (
        (delta[0], line_dedup.LineDedupConfig()),
        (tmp_path / "delta", line_dedup.LineDedupConfig(max_docs_per_line=1)),
    ):
        june = kept_docs(stage(delta_dir, "annotate"))
        june_counts = line_counts(june)
        extra = manifest(stage(delta_dir, "line_dedup"))["extra"]
        assert extra["base_docs"] == len(march) and extra["docs"] == len(june)
        limit = cfg.limit(len(march) + len(june))
        assert extra["line_limit"] == limit and extra["lines_in_base"] > 0
        frequent = {k for k, n in june_counts.items() if n + march_counts[k] > limit}
        out = {d.url: d.text for d in kept_docs(stage(delta_dir, "line_dedup"))}
        for doc in june:
            expected, _ = line_dedup.remove_lines(doc.text, frequent)
            if expected.strip():
                assert out[doc.url] == expected, doc.url
        only_with_base[cfg.max_docs_per_line] = {
            k for k in frequent if june_counts[k] <= cfg.limit(len(june))
        }
    assert only_with_base[1], "at 1 document a line some June line is frequent only with March's counts"
    march_frequent = {
        k for k, n in march_counts.items() if n > line_dedup.LineDedupConfig().limit(len(march))
    }
    march_out = {d.url: d.text for d in kept_docs(stage(base[0], "line_dedup"))}
    for doc in march:
        expected, _ = line_dedup.remove_lines(doc.text, march_frequent)
        if expected.strip():
            assert march_out[doc.url] == expected, "a base document keeps its own build's text"


def test_a_bloom_false_positive_never_changes_a_near_duplicate_decision(base, delta, monkeypatch):
    """The delta's band keys probed in the base's band index as the stage's bucket parts probe them
    (``_base_edges``, partition by partition), with the real filters and with filters that say "maybe"
    to every key: the same edges to the same base clusters, each hit confirmed by a lookup, and the keys
    found are exactly the ones the base's generation holds (read without any filter)."""
    stage_ = minhash_dedup.MinhashDedupStage(minhash_dedup.MinhashDedupConfig())
    stage_._band_base = pi.BaseGenerations(
        pi.PersistentIndex.open(base[0] / "dedup_index" / "band"), "sha256:t"
    )
    docs = kept_docs(stage(delta[0], "line_dedup"))
    hasher = MinHasher(stage_.params)
    ids = np.frombuffer(b"".join(bytes.fromhex(d.doc_id) for d in docs), np.uint8).reshape(-1, 16)
    part_of = functools.partial(base_partition_of, stage_._band_base)
    rows = band_rows(hasher, ids, hasher.signatures([d.text for d in docs]), "s", 4, part_of)
    parts = [rows[rows["part"] == g] for g in range(4)]

    def edges_and_keys(g: int) -> tuple[bytes, bytes]:
        edges, found = base_edges(stage_._band_base, g, parts[g])
        return edges.tobytes(), found.tobytes()

    real = [edges_and_keys(g) for g in range(4)]
    lookups = []
    search = dedup_probe._search
    monkeypatch.setattr(dedup_probe, "_search", lambda keys, q: lookups.append(len(q)) or search(keys, q))
    monkeypatch.setattr(BloomFilter, "might_contain", lambda self, hashes: np.ones(len(hashes), dtype=bool))
    assert [edges_and_keys(g) for g in range(4)] == real
    index = stage_._band_base.index
    (generation,) = index.generations
    distinct = sum(
        len(np.unique(np.ascontiguousarray(r["key"]).view("V18")))
        for g, r in enumerate(parts)
        if generation.part(g)["records"]
    )
    assert sum(lookups) == distinct > 0, "every distinct key of a partition the base holds was looked up"
    held = {bytes(r["key"]) for g in index.generations for p in range(4) for r in g.map_part(p, index.record)}
    found = {bytes(k) for _, keys in real for k in np.frombuffer(keys, "V18")}
    assert found == held & {bytes(k) for k in np.ascontiguousarray(rows["key"]).view("V18").reshape(-1)}
    assert found, "the delta's near copies share keys with the base"


def test_without_a_base_minhash_dedup_in_a_build_is_the_stage_alone_plus_its_index_records(base, tmp_path):
    """Inside a build minhash_dedup also writes its band index records: one per distinct band key, with
    the cluster id of its documents (a document's own doc_id outside a cluster), and its signature
    store; nothing else differs but the digest of its global phase, which has their steps."""
    base_dir = base[0]
    alone = tmp_path / "minhash_dedup"
    run_stage("minhash_dedup", 2, stage(base_dir, "line_dedup"), alone)
    inside = manifest(stage(base_dir, "minhash_dedup"))
    records = [s for s in inside["side_outputs"] if s["path"].startswith("index_records/")]
    store = [s for s in inside["side_outputs"] if s["path"].startswith("signature_store/")]
    extra = inside["extra"]
    text_docs = extra["docs"] - extra["docs_without_shingles"] - extra["code_docs"]
    assert sum(s["records"] for s in store) == text_docs > 0, "every text document's signature"
    assert manifest(alone)["outputs"] == inside["outputs"]
    assert {**manifest(alone)["extra"], "prepare_digest": ""} == {**inside["extra"], "prepare_digest": ""}
    assert manifest(alone)["side_outputs"] == [s for s in inside["side_outputs"] if s not in records + store]
    assert not (alone / "index_records").exists() and not (alone / "signature_store").exists()
    docs = kept_docs(alone)
    expected: dict[bytes, str] = {}
    for doc, keys in zip(docs, band_keys_of([d.text for d in docs]), strict=True):
        for k in keys:
            expected[k] = min(expected.get(k, "g"), doc.dup_cluster_id or doc.doc_id)
    rows = np.concatenate(
        [
            np.fromfile(stage(base_dir, "minhash_dedup") / s["path"], dtype=dedup_keys.BAND_RECORD)
            for s in records
        ]
    )
    got = {r["key"].tobytes(): r["value"].tobytes().hex() for r in rows}
    assert len(got) == len(rows) == sum(s["records"] for s in records), "a key once"
    assert got == expected


def test_without_a_base_exact_dedup_in_a_build_is_the_stage_alone_plus_its_index_records(base, tmp_path):
    base_dir = base[0]
    alone = tmp_path / "exact_dedup"
    run_stage("exact_dedup", 2, stage(base_dir, "extract"), alone)
    inside = manifest(stage(base_dir, "exact_dedup"))
    records = [s for s in inside["side_outputs"] if s["path"].startswith("index_records/")]
    assert manifest(alone)["outputs"] == inside["outputs"] and manifest(alone)["extra"] == inside["extra"]
    assert manifest(alone)["side_outputs"] == [s for s in inside["side_outputs"] if s not in records]
    assert sum(s["records"] for s in records) == len(kept_docs(alone)) == 16
    assert not (alone / "index_records").exists()


@pytest.mark.parametrize("nth, killed", [(1, "recrawl"), (2, "lines"), (4, "exact")])
def test_a_kill_during_the_index_commit_then_a_rerun_gives_the_uninterrupted_result(
    crawl, base, delta, tmp_path, nth, killed
):
    """The delta build as it stands before its last step (its stages complete, its indexes as forked,
    no commit record), killed at ``generation-renamed`` (the generation complete but not pointed at) of the
    recrawl index's commit, the lines index's or the exact index's (the others done), then run again."""
    _, _, delta_warc, config = crawl
    out = tmp_path / "killed"
    shutil.copytree(delta[0], out)
    for kind in COMMITTED:
        shutil.rmtree(out / "dedup_index" / kind)
        pi.PersistentIndex.open(base[0] / "dedup_index" / kind).fork(out / "dedup_index" / kind)
    committed_path(out).unlink()
    args = ["build", "--input", str(delta_warc), "--out", str(out), "--ranks", "2", "--config", str(config)]
    args += ["--base", str(base[0])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(tmp_path / "killed.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLABLE_BUILD, "generation-renamed", str(nth), *args],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            cwd=ROOT,
        )
        try:
            line = proc.stdout.readline().strip()
            assert line == "AT generation-renamed", f"the build never reached its commit: {line!r}"
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(timeout=60)
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    for kind in COMMITTED:
        left = pi.PersistentIndex.open(out / "dedup_index" / kind).labels
        base_labels = pi.PersistentIndex.open(base[0] / "dedup_index" / kind).labels
        if COMMITTED.index(kind) < COMMITTED.index(killed):
            assert len(left) == len(base_labels) + 1, f"{kind} committed before the {killed} index"
        else:
            assert left == base_labels, f"the {kind} index's fork is in force"
    assert (out / "dedup_index" / killed / "generations" / "g000002").is_dir(), "killed after the rename"
    rerun = build(out, [delta_warc], config, "--base", str(base[0]))
    assert rerun.stdout.splitlines()[-1] == delta[1].stdout.splitlines()[-1]
    for kind in COMMITTED:
        assert tree(out / "dedup_index" / kind) == tree(delta[0] / "dedup_index" / kind)


def test_compaction_keeps_every_answer_and_never_touches_the_base(base, delta, tmp_path):
    copy = tmp_path / "copy"  # hard links, as the fork made them: the base's files are these files
    shutil.copytree(delta[0] / "dedup_index", copy / "dedup_index", copy_function=os.link)
    kinds = COMMITTED
    before = {k: pi.PersistentIndex.open(copy / "dedup_index" / k) for k in kinds}
    keys = {
        k: [
            bytes(r["key"])
            for g in ix.generations
            for p in range(ix.partitions)
            for r in g.map_part(p, ix.record)
        ]
        for k, ix in before.items()
    }
    answers = {k: before[k].probe(keys[k]) for k in kinds}
    proc = run_corpus("compact", str(copy))
    for kind in kinds:
        assert f"{kind}: 2 generation(s) -> 1" in proc.stdout
        after = pi.PersistentIndex.open(copy / "dedup_index" / kind)
        (gen,) = after.generations
        assert gen.id not in {g.id for g in before[kind].generations}
        assert sorted(after.labels) == sorted(before[kind].labels)
        assert sorted(p.name for p in (copy / "dedup_index" / kind / "generations").iterdir()) == [gen.id]
        again = after.probe(keys[kind])
        assert keys[kind] and again.found.all() and (again.values == answers[kind].values).all()
    assert tree(base[0]) == base[1]


def test_a_base_with_other_dedup_parameters_is_refused_naming_it(crawl, base, tmp_path):
    _, _, delta_warc, _ = crawl
    config = tmp_path / "other.toml"
    config.write_text(CONFIG + "[minhash_dedup]\nngram = 4\n")
    proc = build(tmp_path / "other", [delta_warc], config, "--base", str(base[0]), check=False)
    assert proc.returncode == 2
    assert "stage minhash_dedup failed" in proc.stderr.strip().splitlines()[-1]
    (error,) = [
        line for line in proc.stderr.splitlines() if "was built with ngram=5, this build uses ngram=4" in line
    ]
    assert "a changed dedup parameter means a full rebuild" in error


def test_a_base_that_is_not_a_complete_build_is_refused(crawl, base, tmp_path):
    _, _, delta_warc, config = crawl
    unfinished = tmp_path / "unfinished"  # as if killed before its commit: its index holds no generation
    shutil.copytree(base[0], unfinished)
    shutil.rmtree(unfinished / "dedup_index" / "exact")
    pi.PersistentIndex.create(unfinished / "dedup_index" / "exact", "exact", dedup_keys.exact_key_params(), 4)
    for bad, why in [
        (tmp_path / "nothing", "is not a complete build (no candidates/"),
        (unfinished, "its dedup index does not hold its own generation"),
    ]:
        bad.mkdir(exist_ok=True)
        proc = build(tmp_path / "out", [delta_warc], config, "--base", str(bad), check=False)
        assert proc.returncode == 2
        assert why in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "out").exists(), "refused before anything is written"


def test_the_base_is_byte_identical_after_every_build_against_it(base):
    assert tree(base[0]) == base[1]


def test_the_probe_batches_groups_and_streams_a_group_larger_than_a_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(against_base, "PROBE_BATCH", 3)
    keys = sorted(bytes([k]) * 16 for k in (1, 2, 3, 4))
    index = pi.PersistentIndex.create(tmp_path / "i", "exact", dedup_keys.exact_key_params(), 1)
    index = index.add_generation("base", [dedup_keys.records("exact", [keys[1]], ["ab" * 16])])
    groups = {keys[0]: 1, keys[1]: 10, keys[2]: 2, keys[3]: 4}  # key -> copies
    records = [(k, b"%d" % i) for k, n in groups.items() for i in range(n)]
    base = pi.BaseGenerations(index, "sha256:test")
    out = [
        (key, list(payloads), keeper)
        for key, payloads, keeper in exact_dedup.with_base_keepers(
            base, 0, groupby(records, key=itemgetter(0))
        )
    ]
    assert [(k, len(p), keeper) for k, p, keeper in out] == [
        (keys[0], 1, None),
        (keys[1], 10, "ab" * 16),
        (keys[2], 2, None),
        (keys[3], 4, None),
    ]
    assert out[1][1] == [b"%d" % i for i in range(10)]


def listed_shards(candidates: Path) -> list[dict]:
    """The shard entries of a build's candidates (kept beside its manifest), as JSON has them."""
    return [s.to_dict() for s in read_snapshot_manifest(candidates).shards]


def shard_names(shards: list[dict]) -> list[str]:
    return [Path(s["path"]).name.removesuffix(".bin") for s in shards]


def test_the_delta_candidates_reference_the_base_shards_and_number_their_own_after_them(base, delta):
    base_cand, delta_cand = listed_shards(base[0] / "candidates"), listed_shards(delta[0] / "candidates")
    n = len(base_cand)
    assert all(name.endswith("-00000") for name in shard_names(base_cand)), "a build without a base: from 0"
    inherited, own = delta_cand[:n], delta_cand[n:]
    assert own, "the delta stored new documents"
    assert [s["sha256"] for s in inherited] == [s["sha256"] for s in base_cand]
    assert [s["path"] for s in inherited] == [f"base/{s['path']}" for s in base_cand]
    link = os.readlink(delta[0] / "candidates" / "base")
    assert link == "../../base/candidates", "relative: the two builds move together"
    for s in inherited:  # referenced, never copied: the path leads to the base's file itself
        assert (delta[0] / "candidates" / s["path"]).samefile(base[0] / "candidates" / s["path"][5:])
    names = shard_names(delta_cand)
    assert len(set(names)) == len(names), "a shard name is unique across base and delta"
    last_of = {n.rsplit("-", 1)[0]: int(n.rsplit("-", 1)[1]) for n in shard_names(base_cand)}
    for name in names[n:]:
        bucket, number = name.rsplit("-", 1)
        assert int(number) > last_of.get(bucket, -1)
    base_m, delta_m = manifest(base[0] / "candidates"), manifest(delta[0] / "candidates")
    assert delta_m["extra"]["base"]["snapshot_id"] == base_m["snapshot_id"]
    assert delta_m["extra"]["docs"] == base_m["extra"]["docs"] + sum(s["docs"] for s in own)
    assert validate_snapshot(delta[0] / "candidates") == [], "every referenced file re-hashed: the base's"


def test_the_default_version_of_a_delta_selects_base_and_new_documents(base, delta):
    """Keep-first: every base document keeps the base's default selection. The delta's own documents are
    stored, and here every one is a near copy of a base page (the six arm64 pages that are not exact
    copies: each joined its amd64 twin's cluster), so the version selects none of them."""
    base_version, delta_version = open_version(base[0]), open_version(delta[0])
    base_bits = {s.name: base_version.selected(s) for s in base_version.shards}
    new = stored = 0
    for s in delta_version.shards:
        bits = delta_version.selected(s)
        if s.name in base_bits:
            assert (bits == base_bits[s.name]).all(), f"the selection of base shard {s.name} changed"
        else:
            new, stored = new + int(bits.sum()), stored + len(bits)
    assert set(base_bits) < {s.name for s in delta_version.shards}
    assert sum(int(b.sum()) for b in base_bits.values()) > 0
    tagged = [d for d in kept_docs(stage(delta[0], "minhash_dedup")) if d.dup_of]
    assert stored == len(tagged) == 6 and new == 0


def test_a_per_crawl_version_of_the_delta_selects_the_june_near_copies_too(base, delta, tmp_path):
    """``dedup_scope = "per_crawl"`` on the delta (docs/versions.md): each June page that joined a March
    cluster is its build's representative of that group, so the version selects it beside the March
    page the default version keeps."""
    made = make_version(
        delta[0] / "candidates", parse_inline('dedup_scope = "per_crawl"'), tmp_path / "per_crawl"
    )
    default, per_crawl = open_version(delta[0]), open_version(tmp_path / "per_crawl")
    tagged = {d.doc_id for d in kept_docs(stage(delta[0], "minhash_dedup")) if d.dup_of}
    picked = {
        name: dict(connect(v).execute("SELECT doc_id, selected FROM docs").fetchall())
        for name, v in (("default", default), ("per_crawl", per_crawl))
    }
    assert len(tagged) == 6 and not any(picked["default"][d] for d in tagged)
    assert all(picked["per_crawl"][d] for d in tagged), "each June near copy is June's representative"
    base_kept = {d for d, on in picked["default"].items() if on and d not in tagged}
    assert all(picked["per_crawl"][d] for d in base_kept), "and the March pages stay selected"
    assert made.manifest["selection"]["dedup_scope"] == "per_crawl"


def test_a_base_document_is_read_through_the_delta_version_even_after_both_builds_move(base, delta, tmp_path):
    moved = tmp_path / "moved"  # both builds together, elsewhere (hard links: the same files)
    for b in (base[0], delta[0]):
        shutil.copytree(b, moved / b.name, symlinks=True, copy_function=os.link)
    base_snap = Snapshot(base[0])
    doc_id = base_snap.lineage(0, 0)["doc_id"]
    for where in (delta[0], moved / delta[0].name):
        snap = Snapshot(where)  # the delta's default version, opened as the loader opens it
        name, doc = snap.locate(doc_id)
        assert name == base_snap.names[0] and doc == 0
        i = snap.shard_number(name)
        assert snap.lineage(i, doc)["doc_id"] == doc_id
        assert snap.trace(name, 0)["doc"]["doc_id"] == doc_id
        new_id = snap.lineage(len(snap.names) - 1, 0)["doc_id"]
        assert snap.locate(new_id) == (snap.names[-1], 0), (
            "the delta's own doc_id index, shards counted after"
        )
        loader = SnapshotLoader(where, seq_len=64, dp_rank=0, dp_world=1)  # the training reader
        assert snap.manifest.shards[0].sha256 in {s.sha256 for s in loader.stream_shards}
        assert next(iter(loader)) is not None
    assert validate_snapshot(moved / delta[0].name / "candidates") == []


def test_a_build_against_a_base_with_a_takedown_reads_its_new_bytes_and_never_selects_the_document(
    crawl, base, tmp_path
):
    """`corpus takedown` on a version of the base zeroes a document in the base's shard and logs it beside
    the base's candidates; the next build against that base lists the shard with its new digests (every
    file re-hashed: valid), carries the takedown in its manifest, and no version of it selects the
    document, however wide."""
    _, _, delta_warc, config = crawl
    copy = tmp_path / "base"
    shutil.copytree(base[0], copy, symlinks=True)
    run_corpus("version", str(copy), "--select-inline", "", "--out", str(copy / "versions" / "all"))
    v = open_version(copy / "versions" / "all")
    shard = next(s for s in v.shards if v.selected(s).any())
    index = int(np.flatnonzero(v.selected(shard))[0])
    doc_id = (
        connect(v)
        .execute('SELECT doc_id FROM docs WHERE shard = ? AND "index" = ?', [shard.name, index])
        .fetchone()[0]
    )
    (tmp_path / "ids").write_text(doc_id + "\n")
    td = copy / "versions" / "td"
    run_corpus(
        "takedown", str(v.dir), "--doc-ids", str(tmp_path / "ids"), "--reason", "request 9", "--out", str(td)
    )
    (logged,) = [json.loads(x) for x in (copy / "candidates" / "takedowns.jsonl").read_text().splitlines()]

    out = tmp_path / "delta"
    build(out, [delta_warc], config, "--base", str(copy))
    cand = manifest(out / "candidates")
    entry = next(s for s in listed_shards(out / "candidates") if s["path"] == f"base/shards/{shard.name}.bin")
    assert (entry["sha256"], entry["blocks_sha256"]) == (logged["sha256"], logged["blocks_sha256"])
    assert entry["files"]["blocks"] == f"base/{logged['blocks']}"
    assert cand["extra"]["takedowns"] == [
        {"name": shard.name, "doc_ids": [doc_id], "indices": [index], "reason": "request 9"}
    ]
    assert validate_snapshot(out / "candidates") == []
    funnel = json.loads((out / "report" / "card.json").read_text())["version_funnel"]
    assert funnel["steps"][0]["key"] == "takedown" and funnel["steps"][0]["removed"] == 1
    assert funnel["unexplained"] == 0
    run_corpus("version", str(out), "--select-inline", "", "--out", str(out / "versions" / "all"))
    for made in (open_version(out), open_version(out / "versions" / "all")):
        ref = next(s for s in made.shards if s.name == shard.name)
        assert not made.selected(ref)[index] and made.removed == {shard.name: [index]}
