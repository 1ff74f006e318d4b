"""extract: per-document robustness; one poisoned page never fails or stalls its shard."""

from __future__ import annotations

import functools
import operator
import os
import signal
import subprocess
import sys
import time

import pytest

from corpus.text.extract import (
    ExtractWorker,
    _trafilatura,
    cap_html,
    extract_text,
    guard_regex_tests,
    repair_replacement_chars,
    strip_invisible,
)
from tests.conftest import ROOT, mpiexec
from tests.stages.chain import docs, manifest, reconciles, run_stage
from tests.stages.warc_fixtures import (
    deeply_nested,
    huge_page,
    invalid_utf8,
    real_pages,
    warc_bytes,
    write_jsonl_gz,
)

# --- the pure parts ------------------------------------------------------------------------------


def test_cap_html_cuts_at_a_character_boundary_and_reports_the_original_size():
    html = "<p>" + "é" * 1000 + "</p>"
    capped, original = cap_html(html, 1001)
    assert original == len(html.encode())
    assert len(capped.encode()) <= 1001 and html.startswith(capped)
    assert cap_html(html, 10_000) == (html, 0)


def test_invisible_characters_are_stripped_and_counted():
    text, n = strip_invisible("in\u200bvis\u200eible\ufeff te\u202ext\x07")
    assert (text, n) == ("invisible text", 5)
    assert strip_invisible("line one\n\tline two") == ("line one\n\tline two", 0)


def test_joiners_and_variation_selectors_that_change_spelling_are_kept():
    persian = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"  # mi-khaham: ZWNJ after the prefix
    devanagari = "\u0915\u094d\u200d\u0937"  # a half form, by ZWJ
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one emoji sequence
    heart = "\u2764\ufe0f"  # emoji presentation
    for text in (persian, devanagari, family, heart):
        assert strip_invisible(text) == (text, 0)
        page = f"<html><body><article><p>{(text + ' is a word of this sentence, long enough to keep. ') * 20}</p>"
        assert text in extract_text(page + "</article></body></html>")


#: elements that hold, lack, or hold empty, each attribute trafilatura's regex tests read
ATTRIBUTE_PAGE = b"""<html><body><article>
<div id="hidden">a</div><div style="display:none">b</div><div class="cookie-consent">c</div>
<div id="">d</div><div class="">e</div><p class="share-buttons">f</p><span role="Navigation">g</span>
<section id="nav" class="content">h</section><div class="comments-title">i</div><div>j</div>
<div id="reader-comments"><p class="hide-print">k</p></div><span class=" hidden">l</span>
<div class="article-body" id="story-body"><p>m</p></div><div id="comol">n</div><p>o</p>
</article></body></html>"""


def test_trafilaturas_guarded_regex_tests_select_what_its_own_select(shared_data):
    """Every XPath the guard changed selects the elements trafilatura's own selects, on real pages and
    on one built to hold, lack, or hold empty, each attribute the regex tests read."""
    import importlib.util

    from lxml.etree import XPath
    from trafilatura.utils import load_html

    guarded = _trafilatura().xpaths
    spec = importlib.util.spec_from_file_location("trafilatura.xpaths_as_shipped", guarded.__file__)
    assert spec is not None and spec.loader is not None
    shipped = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shipped)
    pairs = [
        (f"{name}[{i}]", own, getattr(guarded, name)[i])
        for name, xs in vars(shipped).items()
        if isinstance(xs, list) and xs and all(isinstance(x, XPath) for x in xs)
        for i, own in enumerate(xs)
        if getattr(guarded, name)[i].path != own.path
    ]
    assert len(pairs) >= 10, "trafilatura's regex tests are no longer guarded"
    pages = [p for part in (0, 2) for _, p in real_pages(shared_data, 40, part=part)] + [ATTRIBUTE_PAGE]
    for page in pages:
        tree = load_html(page)
        for name, own, ours in pairs:
            assert ours(tree) == own(tree), name


FORM_PAGE = b"""<html><body><FORM action="/q"><LABEL>q <Input name="q"></LABEL>
<select name="s"><option>a</option></select><textarea>t</textarea><!-- c --><p>x</p></FORM></body></html>"""


def test_trafilaturas_parser_gives_each_element_the_class_lxml_html_gives_it(shared_data):
    from lxml import html

    parser = _trafilatura().utils.HTML_PARSER
    reference = html.HTMLParser(collect_ids=False, default_doctype=False, encoding="utf-8")
    pages = [p for _, p in real_pages(shared_data, 40, part=1)] + [FORM_PAGE, ATTRIBUTE_PAGE]
    for page in pages:
        ours = [type(e) for e in html.fromstring(page, parser=parser).iter()]
        theirs = [
            type(e)
            for e in html.fromstring(page, parser=reference).iter()
            if not isinstance(e, html.HtmlComment)
        ]
        assert ours == theirs
    form = html.fromstring(FORM_PAGE, parser=parser)
    assert isinstance(form.find(".//form"), html.FormElement) and form.find(".//form").inputs["q"] is not None


def test_a_regex_test_true_of_no_attribute_is_left_unguarded():
    from types import SimpleNamespace

    from lxml import html
    from lxml.etree import XPath

    ns = "http://exslt.org/regular-expressions"
    xpaths = SimpleNamespace(
        REGEXP_NS=ns,
        LIST=[
            XPath(".//p[re:test(@id, '^x?')]", namespaces={"re": ns}),
            XPath(".//p[re:test(@id, 'x')]", namespaces={"re": ns}),
        ],
    )
    assert guard_regex_tests(xpaths) == 1
    assert xpaths.LIST[0].path == ".//p[re:test(@id, '^x?')]"
    assert xpaths.LIST[1].path == ".//p[((@id) and re:test(@id, 'x'))]"
    tree = html.fromstring("<div><p>plain</p><p id='x'>x</p></div>")
    assert [p.text for p in xpaths.LIST[0](tree)] == ["plain", "x"]
    assert [p.text for p in xpaths.LIST[1](tree)] == ["x"]


def test_source_code_keeps_its_text_exactly_as_read_and_prose_is_cleaned():
    """In code, whitespace is syntax: two blank lines, indentation, trailing spaces and tabs survive
    extract in the code tier, while the same text in the web tier is cleaned."""
    from corpus.model import Document, Kept
    from hpc_jobs.extract.stage import ExtractConfig, ExtractStage

    text = "import os\r\n\n\n\ndef f():\n\treturn 1  \n\n\n"
    stage = ExtractStage(ExtractConfig())
    out = {}
    for tier in ("code", "web"):
        d = Document.create(
            text=text,
            source="s",
            source_tier=tier,
            url="u",
            crawl_date="",
            raw_digest="0" * 64,
            content_type="text/plain",
        )
        outcome = stage.process_doc(d, None)
        assert isinstance(outcome, Kept)
        out[tier] = outcome.doc.text
    assert out["code"] == text
    assert out["web"] == "import os\n\ndef f():\n\treturn 1"


def test_a_few_undecodable_bytes_are_repaired_too_many_are_refused():
    assert repair_replacement_chars("caf\ufffd au lait " * 20, 0.1) == ("caf au lait " * 20, 20)
    assert repair_replacement_chars("\ufffd\ufffd\ufffdabc", 0.1) is None
    assert repair_replacement_chars("clean", 0.0) == ("clean", 0)


def test_a_hung_call_is_killed_and_the_worker_serves_the_next_one():
    with ExtractWorker(time.sleep, time_limit_s=0.5, warmup=0) as w:
        t0 = time.monotonic()
        assert w.run(30).status == "timeout"
        assert time.monotonic() - t0 < 10
        assert w.run(0).status == "ok"
        assert w.restarts == 1


def test_a_crashed_worker_is_replaced():
    with ExtractWorker(os._exit, time_limit_s=5, warmup=None) as w:
        r = w.run(3)
        assert r.status == "crashed" and "exit code 3" in r.detail
    with ExtractWorker(int, time_limit_s=5, warmup="1") as w:
        assert w.run("x").status == "error"
        assert w.run("7").value == 7


def test_a_call_over_the_memory_limit_costs_its_document_and_the_worker_is_replaced():
    grow = functools.partial(operator.mul, b"x")  # b"x" * n: n bytes, every one of them touched
    with ExtractWorker(grow, time_limit_s=30, warmup=1, memory_limit_mb=100) as w:
        assert w.run(10 << 20).status == "ok"
        over = w.run(150 << 20)  # past the limit, under the data cap: judged on peak resident memory
        assert over.status == "memory_limit" and "> memory limit 100 MB" in over.detail
        runaway = w.run(300 << 20)  # past the data cap (twice the limit): the allocation fails
        assert runaway.status == "memory_limit" and "allocation failed" in runaway.detail
        assert w.run(10).value == b"x" * 10 and w.restarts == 2


# --- the stage on real damaged pages -------------------------------------------------------------


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory, shared_data):
    """An ingested WARC of real pages, some of them damaged, and the url of each kind."""
    d = tmp_path_factory.mktemp("poisoned")
    pages = real_pages(shared_data, 7, host_prefix="harden-doc")
    (url0, p0), (url1, p1), (url2, p2), (url3, p3), (url4, p4), (url5, p5), (url6, p6) = pages
    body = p5.find(b"<body")
    kinds = {
        "normal": url0,
        "few_bad_bytes": url1 + "?few",
        "many_bad_bytes": url2 + "?many",
        "huge": url3 + "?huge",
        "nested": url4 + "?nested",
        "no_text": url5 + "?none",
        "zero_width": url6 + "?zw",
    }
    damaged = [
        (kinds["normal"], p0),
        (kinds["few_bad_bytes"], invalid_utf8(p1, 3000)),
        (kinds["many_bad_bytes"], invalid_utf8(p2, 4)),
        (kinds["huge"], huge_page(p3)),
        (kinds["nested"], deeply_nested(p4)),
        (kinds["no_text"], p5[:body] + b"<body><script>var x = 1;</script></body></html>"),
        (kinds["zero_width"], p6.replace(b"e ", "e\u200b \u200d".encode(), 50)),
    ]
    (d / "in").mkdir()
    (d / "in" / "poisoned.warc.gz").write_bytes(warc_bytes(damaged))
    kinds["plain_invisible"] = "https://notes.example/invisible"
    text = "Plain in\u200bvisible text with \u202eright-to-left\u202c marks and a soft\u00adhyphen.\n" * 5
    write_jsonl_gz(d / "in" / "notes.jsonl.gz", [{"url": kinds["plain_invisible"], "text": text}])
    run_stage("ingest", 1, [d / "in"], d / "ingest")
    return d, kinds


def outcome_by_url(out):
    found = {d.url: ("kept", d) for d in docs(out)}
    found |= {r["doc"]["url"]: (r["reason"], r["doc"]) for r in docs(out, "filtered")}
    found |= {r["url"]: (r["reason"], r) for r in docs(out, "quarantine")}
    return found


def test_each_poisoned_page_ends_in_output_or_quarantine_with_its_reason(poisoned):
    d, kinds = poisoned
    run_stage("extract", 2, [d / "ingest"], d / "extract")
    m = manifest(d / "extract")
    assert reconciles(m["totals"]) and m["totals"]["in"] == len(kinds)
    got = outcome_by_url(d / "extract")
    assert set(got) == set(kinds.values())

    status, normal = got[kinds["normal"]]
    assert status == "kept" and normal.content_type == "text/plain" and len(normal.text) > 500
    assert "<" not in normal.text[:200]

    status, few = got[kinds["few_bad_bytes"]]
    assert status == "kept" and "\ufffd" not in few.text
    assert few.annotation("extract", "utf8_repaired_chars").value > 0

    assert got[kinds["many_bad_bytes"]][0] == "invalid_utf8"

    status, huge = got[kinds["huge"]]
    assert status == "kept"
    assert huge.annotation("extract", "truncated_html_bytes").value == 50 * 1024 * 1024

    assert got[kinds["nested"]][0] in (
        "kept",
        "no_text_extracted",
        "gate_words",
        "extract_error",
        "extract_timeout",
    )
    assert got[kinds["no_text"]][0] == "gate_words"  # the default two-pass gate's first pass finds no words

    status, zw = got[kinds["zero_width"]]
    assert status == "kept" and "\u200b" not in zw.text and "\u200d" in zw.text  # ZWJ may change spelling

    status, plain = got[kinds["plain_invisible"]]
    assert status == "kept" and plain.text.startswith(
        "Plain invisible text with right-to-left marks and a softhyphen."
    )
    assert plain.annotation("extract", "invisible_chars_removed").value == 20

    ingested = {x.url: x for x in docs(d / "ingest")}
    assert normal.derived_from == ingested[kinds["normal"]].doc_id


@pytest.mark.parametrize(
    "limit, reason",
    [("time_limit_s = 2.0", "extract_timeout"), ("memory_limit_mb = 150", "memory_limit")],
)
def test_a_parse_over_a_worker_limit_is_quarantined_and_the_shard_goes_on(poisoned, tmp_path, limit, reason):
    """No HTML cap: the 50 MB page reaches the parser whole and runs into the worker's time or memory limit."""
    d, kinds = poisoned
    cfg = tmp_path / "limited.toml"
    cfg.write_text(f"[extract]\nmax_html_bytes = 0\n{limit}\n")
    run_stage("extract", 1, [d / "ingest"], tmp_path / "extract", cfg)
    got = outcome_by_url(tmp_path / "extract")
    status, q = got[kinds["huge"]]
    assert status == reason and q["stage"] == "extract" and len(q["raw_digest"]) == 64
    assert got[kinds["normal"]][0] == "kept" and got[kinds["zero_width"]][0] == "kept"
    assert reconciles(manifest(tmp_path / "extract")["totals"])


@pytest.mark.slow
def test_a_killed_rank_mid_extract_then_rerun_equals_an_uninterrupted_run(tmp_path, shared_data):
    pages = real_pages(shared_data, 72, part=3)
    (tmp_path / "in").mkdir()
    for i in range(6):
        (tmp_path / "in" / f"p{i}.warc.gz").write_bytes(warc_bytes(pages[i::6]))
    run_stage("ingest", 2, [tmp_path / "in"], tmp_path / "ingest")
    run_stage("extract", 2, [tmp_path / "ingest"], tmp_path / "clean")

    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [
        mpiexec(),
        "-n",
        "2",
        sys.executable,
        "-m",
        "hpc_jobs.extract",
        "--in",
        str(tmp_path / "ingest"),
        "--out",
        str(out),
    ]
    job = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def finished() -> int:
        return len(list((out / "stats").glob("*.json"))) if (out / "stats").exists() else 0

    deadline = time.time() + 300
    while time.time() < deadline and finished() < 1:
        time.sleep(0.05)
    ranks = [
        int(p)
        for p in subprocess.run(
            ["pgrep", "-f", "hpc_jobs.extract --in"], capture_output=True, text=True
        ).stdout.split()
        if int(p) != job.pid
    ]
    ranks = [p for p in ranks if str(tmp_path) in open(f"/proc/{p}/cmdline").read()]
    assert ranks, "no rank to kill"
    os.kill(max(ranks), signal.SIGKILL)
    job.communicate(timeout=300)
    assert job.returncode != 0 and not (out / "manifest.json").exists()
    assert 0 < finished() < 6, "the kill must land mid-stage"

    run_stage("extract", 1, [tmp_path / "ingest"], out)
    clean, rerun = manifest(tmp_path / "clean"), manifest(out)
    assert (rerun["outputs"], rerun["side_outputs"]) == (clean["outputs"], clean["side_outputs"])
