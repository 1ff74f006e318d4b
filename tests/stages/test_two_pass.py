"""Two-pass extraction: resiliparse's cheap first pass on every page, trafilatura only where the gate
passes, the gate's rejections filtered with their reason and counted per source and language."""

from __future__ import annotations

from collections import Counter

import pytest

from corpus.model.config import config_hash
from corpus.model.errors import UserError
from corpus.select.gate import parse_gate
from corpus.text.extract import PageExtractor, extract_text, normalize_text, strip_invisible
from corpus.text.first_pass import first_pass, resiliparse_text
from hpc_jobs.extract.stage import DEFAULT_GATE, ExtractConfig, ExtractStage
from runtime.runner import StageError
from tests.stages.chain import docs, manifest, reconciles, run_stage
from tests.stages.warc_fixtures import real_pages, warc_bytes

SHORT_URL = "https://short.example/a"
SHORT_PAGE = b"<html><body><nav>Home</nav><p>Only a few words on this page.</p></body></html>"
#: the first crawl's first pages are German and French FAQs, then English guides
GATE = "words >= 20 AND lang IN ('de', 'fr')"


# --- the gate ------------------------------------------------------------------------------------------


def test_a_page_fails_at_the_first_clause_it_does_not_satisfy():
    gate = parse_gate("words >= 20 AND lang IN ('de', 'fr') AND lang_confidence > 0.5")
    assert gate.failure({"words": 100.0, "lang": "de", "lang_confidence": 0.9}) is None
    assert gate.failure({"words": 19.0, "lang": "en", "lang_confidence": 0.9}).column == "words"
    assert gate.failure({"words": 20.0, "lang": "en", "lang_confidence": 0.9}).column == "lang"
    assert gate.failure({"words": 20.0, "lang": "fr", "lang_confidence": 0.5}).column == "lang_confidence"


def test_a_missing_signal_never_satisfies_a_clause_and_an_empty_gate_passes_everything():
    assert parse_gate("lang != 'en'").failure({"words": 3.0}).column == "lang"
    assert parse_gate("  ").failure({}) is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("quality > 0.5", "unknown signal quality"),
        ("words > q50", "percentile"),
        ("lang = 3", "lang is a string"),
        ("words IN ('many')", "words is a number"),
        ("words >=", "expected a number"),
    ],
)
def test_a_wrong_gate_is_one_line_naming_the_gate(text, message):
    with pytest.raises(UserError, match=message) as e:
        parse_gate(text)
    assert "[extract] gate" in str(e.value) and "\n" not in str(e.value)


def test_the_gate_is_recorded_in_its_canonical_spelling_and_changes_the_config_hash():
    default = ExtractStage(ExtractConfig())
    assert default.config.extractor == "two_pass" and default.config.gate == DEFAULT_GATE
    respelled = ExtractStage(ExtractConfig(gate="  words>=20 "))
    assert config_hash(respelled.config) == config_hash(default.config)
    other = ExtractStage(ExtractConfig(gate="words >= 30"))
    assert config_hash(other.config) != config_hash(default.config)
    assert ExtractStage(ExtractConfig(extractor="trafilatura")).config.gate == ""
    with pytest.raises(ValueError, match="a gate needs a first pass"):
        ExtractConfig(extractor="trafilatura", gate="words >= 1")
    with pytest.raises(StageError, match="unknown signal"):
        ExtractStage(ExtractConfig(gate="word_count >= 50"))


# --- one page ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pages(shared_data):
    return real_pages(shared_data, 24) + [(SHORT_URL, SHORT_PAGE)]


def test_a_page_the_gate_passes_gets_exactly_trafilatura_s_text(pages):
    html = pages[0][1].decode("utf-8")
    page = PageExtractor("two_pass", parse_gate(GATE))((html, True))
    assert page.gate_failure is None and page.text == extract_text(html)
    assert page.signals["lang"] in ("de", "fr") and page.signals["words"] >= 20


def test_an_ungated_page_gets_the_second_pass_whatever_its_signals():
    html = SHORT_PAGE.decode()
    gated = PageExtractor("two_pass", parse_gate(GATE))((html, True))
    assert gated.gate_failure.column == "words" and gated.text == ""
    ungated = PageExtractor("two_pass", parse_gate(GATE))((html, False))
    assert ungated.gate_failure is None and ungated.text == extract_text(html)


def test_the_language_is_identified_only_where_the_gate_reads_it_or_the_page_fails(pages):
    html = pages[0][1].decode("utf-8")
    passed = PageExtractor("two_pass", parse_gate("words >= 20"))((html, True))
    assert passed.gate_failure is None and "lang" not in passed.signals
    failed = PageExtractor("two_pass", parse_gate("words >= 20"))((SHORT_PAGE.decode(), True))
    assert failed.signals["lang"] == "en" and failed.signals["lang_confidence"] > 0
    assert first_pass(html, language=True).signals["lang"] in ("de", "fr")


def test_the_resiliparse_path_keeps_the_first_pass_text(pages):
    html = pages[0][1].decode("utf-8")
    page = PageExtractor("resiliparse", parse_gate(""))((html, True))
    assert page.text == resiliparse_text(html) == first_pass(html).text
    assert page.text != extract_text(html)  # another extractor: other line breaks and boilerplate


# --- the stage -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ingested(tmp_path_factory, pages):
    d = tmp_path_factory.mktemp("two_pass")
    (d / "in").mkdir()
    (d / "in" / "pages.warc.gz").write_bytes(warc_bytes(pages))
    run_stage("ingest", 1, [d / "in"], d / "ingest")
    cfg = d / "trafilatura.toml"
    cfg.write_text('[extract]\nextractor = "trafilatura"\n')
    run_stage("extract", 1, [d / "ingest"], d / "trafilatura", cfg)
    return d


def _gated(d, ranks: int, name: str):
    cfg = d / "gated.toml"
    cfg.write_text(f'[extract]\nextractor = "two_pass"\ngate = "{GATE}"\n')
    run_stage("extract", ranks, [d / "ingest"], d / name, cfg)
    return d / name


def test_the_gate_s_pages_keep_trafilatura_s_text_and_the_rest_are_filtered_with_its_reason(ingested):
    out = _gated(ingested, 2, "gated2")
    m = manifest(out)
    assert reconciles(m["totals"]) and m["totals"]["in"] == 25
    assert m["config"]["gate"] == GATE
    trafilatura = {x.url: x for x in docs(ingested / "trafilatura")}
    kept = {x.url: x for x in docs(out)}
    assert kept and all(x.doc_id == trafilatura[url].doc_id for url, x in kept.items())
    filtered = {r["doc"]["url"]: r for r in docs(out, "filtered")}
    assert set(kept) | set(filtered) == set(trafilatura) | {SHORT_URL}
    assert filtered[SHORT_URL]["reason"] == "gate_words"
    rejected_lang = [r for url, r in filtered.items() if url != SHORT_URL]
    assert rejected_lang and all(r["reason"] == "gate_lang" for r in rejected_lang)
    for r in rejected_lang:
        note = next(a for a in r["doc"]["annotations"] if a["name"] == "gate_failed")
        assert note["value"] == f"lang IN ('de', 'fr'): {r['doc']['lang']}" and note["verdict"] == "fail"
    # counted in each page's first-pass language, so the card can show them per source and language
    by_lang = Counter()
    for cells in m["shard_counts"].values():
        by_lang.update({cell: c["filtered"].get("gate_lang", 0) for cell, c in cells.items()})
    assert +by_lang == Counter(f"web|{r['doc']['lang']}" for r in rejected_lang)


def test_the_same_bytes_on_one_and_on_two_ranks(ingested):
    two = ingested / "gated2" if (ingested / "gated2").exists() else _gated(ingested, 2, "gated2")
    one = _gated(ingested, 1, "gated1")
    assert [x.to_dict() for x in docs(one)] == [x.to_dict() for x in docs(two)]
    assert list(docs(one, "filtered")) == list(docs(two, "filtered"))


def test_the_resiliparse_path_stores_the_first_pass_text(ingested, pages):
    cfg = ingested / "resiliparse.toml"
    cfg.write_text('[extract]\nextractor = "resiliparse"\n')
    run_stage("extract", 1, [ingested / "ingest"], ingested / "resiliparse", cfg)
    kept = {x.url: x for x in docs(ingested / "resiliparse")}
    url, html = pages[0]
    assert kept[url].text == normalize_text(strip_invisible(resiliparse_text(html.decode("utf-8")))[0])
    assert SHORT_URL not in kept  # the default gate: words >= 20
