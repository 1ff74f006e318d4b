"""Opt-outs from robots.txt (issue 33 item 5): a selection names a robots.txt snapshot (Common Crawl's
robots.txt WARCs, or HOST.txt files) and the crawlers that count; a host whose latest robots.txt
disallows one of them the site is excluded, recorded with the rule that did, and the version's id
changes exactly when that answer does."""

from __future__ import annotations

import io
import json
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.parquet as pq
import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from corpus.model.errors import UserError
from corpus.report.version_funnel import recorded_selection
from corpus.select.hosts import ROOTS_ENV
from corpus.select.selection import load_selection, parse_inline
from corpus.version.open import open_version
from tests.conftest import run_corpus
from tests.loader.snapshot_factory import write_id_snapshot

SELECTION = 'exclude_robots = { dir = "robots", agents = ["GPTBot", "CCBot"] }\n'


@pytest.fixture(autouse=True)
def no_roots(monkeypatch):
    monkeypatch.delenv(ROOTS_ENV, raising=False)


def robots_warc(path: Path, fetches: list[tuple[str, str, str, str]]) -> None:
    """A WARC of robots.txt responses: (host, WARC-Date, HTTP status, body) each."""
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        for host, date, status, body in fetches:
            http = StatusAndHeaders(f"{status} X", [("Content-Type", "text/plain")], protocol="HTTP/1.1")
            rec = w.create_warc_record(
                f"https://{host}/robots.txt",
                "response",
                payload=io.BytesIO(body.encode()),
                http_headers=http,
                warc_headers_dict={"WARC-Date": date},
            )
            w.write_record(rec)


def snapshot_dir(d: Path, later_b: str = "User-agent: *\nAllow: /\n") -> Path:
    """a: GPTBot out; b: the latest fetch decides (``later_b``); c: every agent out (a plain file);
    d: only /private out; e: a 404 (nothing to read)."""
    robots = d / "robots"
    robots.mkdir(parents=True, exist_ok=True)
    robots_warc(
        robots / "crawl-robots.warc.gz",
        [
            ("a.example.org", "2026-06-01T00:00:00Z", "200", "User-agent: GPTBot\nDisallow: /\n"),
            ("b.example.org", "2026-03-01T00:00:00Z", "200", "User-agent: *\nDisallow: /\n"),
            ("b.example.org", "2026-06-01T00:00:00Z", "200", later_b),
            ("d.example.org", "2026-06-01T00:00:00Z", "200", "User-agent: *\nDisallow: /private\n"),
            ("e.example.org", "2026-06-01T00:00:00Z", "404", "User-agent: *\nDisallow: /\n"),
        ],
    )
    (robots / "c.example.net.txt").write_text("User-agent: *\nDisallow: /\n")
    (d / "sel.toml").write_text(SELECTION)
    return d / "sel.toml"


def test_the_hosts_a_robots_txt_shuts_to_a_named_crawler_are_excluded_with_the_rule(tmp_path):
    sel = load_selection(snapshot_dir(tmp_path))
    assert sel.exclude_hosts == ("a.example.org", "c.example.net")
    assert [r.canonical() for r in sel.robots_optouts] == [
        {
            "host": "a.example.org",
            "agent": "GPTBot",
            "rule": "User-agent: GPTBot / Disallow: /",
            "fetched": "2026-06-01",
        },
        {"host": "c.example.net", "agent": "GPTBot", "rule": "User-agent: * / Disallow: /", "fetched": ""},
    ]


def test_the_recorded_answer_reads_back_as_the_same_selection(tmp_path):
    sel = load_selection(snapshot_dir(tmp_path))
    again = recorded_selection(json.loads(json.dumps(sel.canonical())))  # what a version's card reads
    assert again.canonical() == sel.canonical() and again.digest == sel.digest


def test_the_id_changes_when_the_answer_does_and_only_then(tmp_path):
    first = load_selection(snapshot_dir(tmp_path / "one")).digest
    same = snapshot_dir(tmp_path / "two", later_b="User-agent: *\nAllow: /\n# refetched, unchanged\n")
    assert load_selection(same).digest == first
    closed = load_selection(snapshot_dir(tmp_path / "three", later_b="User-agent: CCBot\nDisallow: /\n"))
    assert closed.exclude_hosts == ("a.example.org", "b.example.org", "c.example.net")
    assert closed.robots_optouts[1].agent == "CCBot" and closed.digest != first


def test_a_snapshot_outside_the_allowed_roots_is_refused_in_one_line(tmp_path):
    snapshot_dir(tmp_path)
    with pytest.raises(UserError) as e:
        parse_inline(SELECTION.replace('"robots"', f'"{tmp_path / "robots"}"'))
    assert "exclude_robots dir" in str(e.value) and "outside the allowed roots" in str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="exclude_robots must be"):
        parse_inline('exclude_robots = { dir = "robots" }\n')


def test_corpus_version_leaves_out_the_opted_out_hosts_documents(tmp_path):
    snap = tmp_path / "snapshot"
    write_id_snapshot(snap, {"web": 2})
    sel = snapshot_dir(tmp_path / "sel")
    run_corpus("version", str(snap), "--select", str(sel), "--out", str(tmp_path / "v"))
    manifest = json.loads((tmp_path / "v" / "manifest.json").read_text())
    assert manifest["selection"]["exclude_hosts"] == ["a.example.org", "c.example.net"]
    assert [r["host"] for r in manifest["selection"]["robots_optouts"]] == ["a.example.org", "c.example.net"]
    version = open_version(tmp_path / "v")
    stored, kept = set(), set()
    for shard in version.live_shards:
        for row, bit in zip(pq.read_table(shard.metadata).to_pylist(), version.selected(shard), strict=True):
            stored.add(urlsplit(row["url"]).hostname)
            if bit:
                kept.add(urlsplit(row["url"]).hostname)
    assert kept == stored - {"a.example.org", "c.example.net"} and "b.example.org" in kept
