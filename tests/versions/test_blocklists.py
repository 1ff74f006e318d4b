"""Category blocklists (issue 34, item 1): an operator's lists of hosts and URLs by category, read from an
allowed place when a version is made, matched on the build's hosts (a host entry covers its subdomains)
and URLs; the version records per category only the entries that matched (its id covers that answer),
how many stored documents each category lists, and what was read of each file outside the id; the card's
funnel counts each category as a step."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from corpus.model.errors import UserError
from corpus.report.version_funnel import recorded_selection, version_funnel
from corpus.select.blocklists import url_key
from corpus.select.hosts import ROOTS_ENV
from corpus.select.selection import load_selection, parse_inline
from corpus.version.open import open_version
from corpus.version.plan import make_version
from tests.conftest import run_corpus
from tests.loader.snapshot_factory import write_id_snapshot


@pytest.fixture(autouse=True)
def no_roots(monkeypatch):
    monkeypatch.delenv(ROOTS_ENV, raising=False)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    """Three web shards of documents on a.example.org, b.example.org and c.example.net."""
    root = tmp_path_factory.mktemp("blocklists") / "snapshot"
    write_id_snapshot(root, {"web": 3})
    return root


def rows(snapshot: Path) -> list[dict]:
    version = open_version(snapshot)
    return [r for s in version.live_shards for r in pq.read_table(s.metadata).to_pylist()]


def selection_with(d: Path, lists: dict[str, str], extra: str = "") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    files = {}
    for category, text in lists.items():
        (d / f"{category}.txt").write_text(text)
        files[category] = [f"{category}.txt"]
    table = ", ".join(f'{c} = ["{f[0]}"]' for c, f in files.items())
    (d / "sel.toml").write_text(f"exclude_blocklists = {{ {table} }}\n{extra}")
    return d / "sel.toml"


@pytest.mark.parametrize(
    "url,key",
    [
        ("https://A.Example.org:8443/x/y/?q=1#f", "a.example.org/x/y"),
        ("http://user@example.org./", "example.org"),
        ("example.org/porn-page", "example.org/porn-page"),  # UT1's urls file: no scheme
        ("https://example.org", "example.org"),
        ("https:///no-host/x", None),
    ],
)
def test_a_url_entry_and_a_documents_url_compare_by_host_and_path(url, key):
    assert url_key(url) == key


def test_a_blocklist_is_a_category_of_files_under_an_allowed_root(tmp_path, monkeypatch):
    sel = load_selection(selection_with(tmp_path, {"adult": "x.org\n"}))
    (b,) = sel.blocklists
    assert (b.category, b.files) == ("adult", (str(tmp_path / "adult.txt"),))
    with pytest.raises(ValueError, match="not resolved"):
        sel.canonical()  # only a version, resolved against its build, has an answer to record
    for bad, why in [
        ('exclude_blocklists = { "Adult!" = ["a.txt"] }', "is not a category name"),
        ("exclude_blocklists = { adult = [] }", "must be a list of files"),
        (f'exclude_blocklists = {{ adult = ["{tmp_path}/adult.txt"] }}', "outside the allowed roots"),
        ('exclude_blocklists = { adult = ["adult.txt"] }', "must be absolute in an inline selection"),
    ]:
        with pytest.raises(UserError, match=why) as e:
            parse_inline(bad)
        assert "\n" not in str(e.value)
    monkeypatch.setenv(ROOTS_ENV, str(tmp_path))
    assert parse_inline(f'exclude_blocklists = {{ adult = ["{tmp_path}/adult.txt"] }}').blocklists[0].files


def test_a_version_leaves_out_every_listed_host_subdomains_and_url_and_records_only_the_matches(
    snapshot, tmp_path
):
    everything = rows(snapshot)
    url = next(r["url"] for r in everything if r["host"] == "c.example.net")
    adult = "# UT1 style: domains, then urls\nEXAMPLE.org\nnever-crawled.example\n"
    malware = f"{url.split('://')[1]}\nc.example.net/not/a/page\nhttp://elsewhere.example/x\n"
    sel = selection_with(tmp_path / "sel", {"adult": adult, "malware": malware})
    run_corpus("version", str(snapshot), "--select", str(sel), "--out", str(tmp_path / "v"))
    manifest = json.loads((tmp_path / "v" / "manifest.json").read_text())
    assert manifest["selection"]["blocklists"] == {
        "adult": {"hosts": ["example.org"], "urls": []},  # a.example.org and b.example.org by their parent
        "malware": {"hosts": [], "urls": [url_key(url)]},
    }
    on_example = sum(r["host"].endswith(".example.org") for r in everything)
    assert manifest["blocklisted"] == {"adult": on_example, "malware": 1}
    read = {f["category"]: f for f in manifest["run_info"]["blocklist_files"]}
    assert read["adult"]["entries"] == 2 and read["malware"]["entries"] == 3  # comments not counted
    assert len(read["adult"]["sha256"]) == 64

    version = open_version(tmp_path / "v")
    kept = [
        r["url"]
        for s in version.live_shards
        for r, bit in zip(pq.read_table(s.metadata).to_pylist(), version.selected(s), strict=True)
        if bit
    ]
    assert kept and all("example.org" not in u for u in kept) and url not in kept
    assert len(kept) == len(everything) - on_example - 1

    funnel = version_funnel(version)
    steps = {(s["rule"], s["reason"]): s["removed"] for s in funnel["steps"]}
    assert steps[("blocklist", "adult")] == on_example and steps[("blocklist", "malware")] == 1
    assert funnel["unexplained"] == 0


def test_the_id_covers_the_answer_not_the_files(snapshot, tmp_path):
    def made(name: str, adult: str) -> dict:
        sel = load_selection(selection_with(tmp_path / name, {"adult": adult}))
        return make_version(snapshot, sel, tmp_path / name / "v").manifest

    first = made("one", "a.example.org\n")
    more_lines = made(
        "two", "# refreshed list: more entries, none of this build\nzzz.example\na.example.org\n"
    )
    assert more_lines["snapshot_id"] == first["snapshot_id"]
    wider = made("three", "a.example.org\nb.example.org\n")
    assert wider["snapshot_id"] != first["snapshot_id"]
    # what a version records parses back to the same selection (a takedown or a tombstone keeps it)
    again = recorded_selection(json.loads(json.dumps(wider["selection"])))
    assert again.canonical() == wider["selection"]
    remade = make_version(snapshot, again, tmp_path / "three" / "again").manifest
    assert remade["snapshot_id"] == wider["snapshot_id"]


def test_a_list_file_that_is_not_utf8_is_one_line_with_nothing_written(snapshot, tmp_path):
    sel = selection_with(tmp_path, {"adult": "a.example.org\n"})
    (tmp_path / "adult.txt").write_bytes(b"\xff\xfe\x00bad\n")
    proc = run_corpus(
        "version", str(snapshot), "--select", str(sel), "--out", str(tmp_path / "v"), check=False
    )
    assert proc.returncode == 2 and "not UTF-8" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "v").exists()
