"""ingest: every record of real (and really damaged) WARC files ends up somewhere, with its reason."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from corpus.decont.holdout import HOLDOUT_SALT, normalize_url
from corpus.dedup.recrawl import RecordKey, later_fetches
from corpus.model.digest import stable_hash64
from tests.conftest import SAMPLE, run_corpus
from tests.stages.chain import docs, manifest, reconciles, run_stage
from tests.stages.warc_fixtures import (
    lying_content_length,
    real_pages,
    truncated_gzip,
    warc_bytes,
    write_jsonl_gz,
)


def damaged_inputs(d: Path, shared_data: Path) -> list[Path]:
    d.mkdir(parents=True)
    pages = real_pages(shared_data, 24, part=1)
    (d / "good.warc.gz").write_bytes(warc_bytes(pages[0:6]))
    (d / "truncated.warc.gz").write_bytes(truncated_gzip(pages[6:10]))
    (d / "too-long.warc").write_bytes(lying_content_length(pages[10:14], which=1, delta=300))
    (d / "too-short.warc").write_bytes(lying_content_length(pages[14:18], which=1, delta=-300))
    (d / "empty-page.warc.gz").write_bytes(warc_bytes([pages[18], (pages[19][0], b"")]))
    (d / "not-a-warc.warc").write_bytes(b"this is not a WARC file at all\n" * 20)
    shutil.copyfile(shared_data / "warc-edge" / "example-bad.warc.gz.bad", d / "example-bad.warc.gz")
    jsonl = d / "notes.jsonl"
    jsonl.write_text(
        json.dumps({"id": 1, "text": "A curated note about Debian."})
        + "\n"
        + '{"id": 2, "text": "unterminated\n'
        + json.dumps({"id": 3, "text": ""})
        + "\n"
        + json.dumps({"id": 4, "text": "Another note."})
        + "\n"
    )
    return sorted(d.iterdir())


def test_damaged_warcs_never_crash_and_every_record_is_accounted(tmp_path, shared_data):
    inputs = damaged_inputs(tmp_path / "in", shared_data)
    out = tmp_path / "ingest"
    run_stage("ingest", 2, [tmp_path / "in"], out)
    m = manifest(out)
    t = m["totals"]
    assert reconciles(t)
    assert t["quarantined"] == {
        "truncated_record": 2,
        "malformed_warc": 3,
        "empty_payload": 1,
        "bad_json": 1,
        "empty_text": 1,
    }
    # good 6 + truncated 3 + too-long 3 + too-short 3 + empty-page 1 + curated 2
    assert t["out"] == 18
    assert len(m["outputs"]) == len(inputs)
    for q in docs(out, "quarantine"):
        assert q["stage"] == "ingest" and q["reason"] and q["detail"]
        assert len(q["raw_digest"]) == 64
    assert m["extra"]["skipped_records"] == {"warcinfo": 1}


def test_web_documents_carry_provenance_and_their_html(tmp_path, shared_data):
    pages = real_pages(shared_data, 3, part=2)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "c.warc.gz").write_bytes(warc_bytes(pages, date="2026-03-01T12:00:00Z"))
    run_stage("ingest", 1, [tmp_path / "in" / "c.warc.gz"], tmp_path / "out")
    got = {d.url: d for d in docs(tmp_path / "out")}
    assert sorted(got) == sorted(u for u, _ in pages)
    for url, payload in pages:
        d = got[url]
        assert (d.source, d.source_tier, d.crawl_date, d.content_type) == (
            "web",
            "web",
            "2026-03-01",
            "text/html",
        )
        assert d.raw_digest == hashlib.sha256(payload).hexdigest()
        assert d.text == payload.decode("utf-8")


def test_the_robots_txt_a_crawl_carries_is_kept_and_is_a_snapshot_a_selection_reads(tmp_path, shared_data):
    """A crawl's robots.txt responses are not documents: counted as skipped ``robots_txt`` and kept in
    ``robots/``, which ``exclude_robots`` reads as a robots.txt snapshot (docs/versions.md)."""
    from corpus.select.selection import load_selection

    pages = real_pages(shared_data, 2, part=2)
    robots = [
        ("https://shut.example.org/robots.txt", b"User-agent: GPTBot\nDisallow: /\n"),
        ("https://open.example.org/robots.txt", b"User-agent: *\nDisallow: /private\n"),
    ]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "c.warc.gz").write_bytes(warc_bytes(pages))
    (tmp_path / "in" / "r.warc.gz").write_bytes(warc_bytes(robots, content_type="text/plain"))
    run_stage("ingest", 1, [tmp_path / "in"], tmp_path / "out")
    m = manifest(tmp_path / "out")
    assert m["extra"]["skipped_records"] == {"robots_txt": 2} and m["totals"]["out"] == 2
    (tmp_path / "sel.toml").write_text('exclude_robots = { dir = "out/robots", agents = ["GPTBot"] }\n')
    sel = load_selection(tmp_path / "sel.toml")
    assert sel.exclude_hosts == ("shut.example.org",)
    assert sel.robots_optouts[0].rule == "User-agent: GPTBot / Disallow: /"
    assert sel.robots_optouts[0].fetched == "2026-03-01"  # the fetch date, as ingest reads it


def test_recrawls_collapse_across_files_and_the_holdout_is_carved_out(tmp_path):
    web = sorted((SAMPLE / "web").glob("*.warc.gz"))
    cfg = tmp_path / "c.toml"
    cfg.write_text("[ingest]\nholdout_modulus = 25\n")
    out = tmp_path / "ingest"
    run_stage("ingest", 2, web, out, cfg)

    fetches = []  # independently: every (url, payload digest, date) of the sample crawl
    for p in web:
        with open(p, "rb") as f:
            for rec in ArchiveIterator(f):
                if rec.rec_type == "response":
                    fetches.append(
                        (
                            rec.rec_headers.get_header("WARC-Target-URI"),
                            hashlib.sha256(rec.content_stream().read()).hexdigest(),
                            rec.rec_headers.get_header("WARC-Date")[:10],
                        )
                    )
    pairs = Counter((u, h) for u, h, _ in fetches)
    repeats = sum(n - 1 for n in pairs.values())
    assert repeats > 20, "the sample must hold identical recrawls"
    t = manifest(out)["totals"]
    assert t["filtered"]["recrawl_duplicate"] == repeats
    assert reconciles(t)

    filtered = list(docs(out, "filtered"))
    dup_docs = [r["doc"] for r in filtered if r["reason"] == "recrawl_duplicate"]
    assert {d["crawl_date"] for d in dup_docs} == {"2026-06-01"}, "the earliest fetch is the one kept"
    kept = {d.url: d for d in docs(out)}
    expected_holdout = {u for u, _ in pairs if stable_hash64(HOLDOUT_SALT, normalize_url(u)) % 25 == 0}
    assert expected_holdout, "modulus 25 must hold out some of the sample"
    holdout = {d.url for d in docs(out, "holdout")}
    assert holdout == expected_holdout == {r["doc"]["url"] for r in filtered if r["reason"] == "eval_holdout"}
    assert not holdout & set(kept)
    assert len(kept) == len(pairs) - len(expected_holdout)


def test_sources_and_tiers_come_from_the_config(tmp_path, shared_data):
    (tmp_path / "in").mkdir()
    write_jsonl_gz(
        tmp_path / "in" / "manual.jsonl.gz",
        [
            {"id": "a", "text": "Chapter one.", "url": "https://m.example/a"},
            {"id": "b", "text": "Chapter two.", "license": "CC0-1.0"},
        ],
    )
    (tmp_path / "in" / "w.warc.gz").write_bytes(warc_bytes(real_pages(shared_data, 2, part=3)))
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[[ingest.sources]]\nmatch = "*.jsonl.gz"\nname = "manuals"\ntier = "books"\n'
        'license = "GFDL-1.3"\ndate = "2025-12-01"\n'
    )
    run_stage("ingest", 1, [tmp_path / "in"], tmp_path / "out", cfg)
    by_url = {d.url: d for d in docs(tmp_path / "out")}
    a, b = by_url["https://m.example/a"], by_url["curated://manuals/manual.jsonl.gz#b"]
    assert (a.source, a.source_tier, a.license_hint, a.crawl_date) == (
        "manuals",
        "books",
        "GFDL-1.3",
        "2025-12-01",
    )
    assert b.license_hint == "CC0-1.0", "a record's own license wins over the source's"
    assert {d.source for d in by_url.values() if d.content_type == "text/html"} == {"web"}


def test_an_unknown_tier_is_a_one_line_config_error(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[ingest.sources]]\nmatch = "*"\nname = "x"\ntier = "premium"\n')
    proc = run_corpus(
        "stage",
        "ingest",
        "--in",
        str(SAMPLE / "curated"),
        "--out",
        str(tmp_path / "o"),
        "--config",
        str(cfg),
        check=False,
    )
    assert proc.returncode != 0
    assert "unknown source tier 'premium'" in proc.stderr


def test_real_odd_files_from_warc_tools_are_read_or_quarantined(tmp_path, shared_data):
    (tmp_path / "in").mkdir()
    for p in sorted((shared_data / "warc-edge").iterdir()):
        shutil.copyfile(
            p, tmp_path / "in" / p.name.removesuffix(".bad")
        )  # example-bad.warc.gz.bad: a corrupt gzip
    run_stage("ingest", 2, [tmp_path / "in"], tmp_path / "out")
    m = manifest(tmp_path / "out")
    t = m["totals"]
    assert reconciles(t) and len(m["outputs"]) == 12
    # the corrupt gzip WARC and the ARC whose length field is not a number
    assert t["quarantined"] == {"malformed_warc": 2}
    assert t["out"] == 22  # HTML 200 responses: Common Crawl 3, iana 16, dupes 1, fb 1, example.arc 1
    skipped = m["extra"]["skipped_records"]
    assert skipped["revisit"] == 133 and skipped["request"] == 190 and skipped["response_status_302"] == 7


def test_of_one_url_and_payload_the_earliest_fetch_is_kept_whoever_read_it():
    def fetch(date, sha, index):
        return RecordKey("https://example.org/a", "d" * 64, date, sha, index)

    first = fetch("2026-03-01", "b" * 64, 7)
    tie_later_file = fetch("2026-03-01", "c" * 64, 0)
    tie_later_position = fetch("2026-03-01", "b" * 64, 9)
    later = fetch("2026-06-01", "a" * 64, 0)
    for order in (
        [later, tie_later_file, first, tie_later_position],
        [first, later, tie_later_position, tie_later_file],
    ):
        assert sorted(later_fetches(order)) == sorted(
            [(tie_later_position, "2026-03-01"), (tie_later_file, "2026-03-01"), (later, "2026-03-01")]
        )
    # the same record listed twice (two identical input files) is the kept fetch, not a repeat of itself
    assert list(later_fetches([first, first])) == []
