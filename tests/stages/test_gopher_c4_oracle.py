"""Every Gopher and C4 signal of annotate against datatrove 0.10.1 (a test oracle) on real documents.

The documents: pages of the shared crawl (every part, so ~13 languages) extracted as the extract stage
extracts them, and sections of the Perl manuals. datatrove's filters only say pass/fail, so its values
are computed here with its own functions (``split_into_words``, ``find_duplicates``,
``find_top_duplicate``, ``find_all_duplicate``, ``get_n_grams``, the filters' own split patterns, its
``PUNCTUATION_SET`` and ``STOP_WORDS``) and, where the filter computes a value inline, its expression
copied from gopher_quality_filter.py. C4's line rules are checked by running datatrove's
``C4QualityFilter`` itself, set to C4 as published (5 words a line; end marks . ? ! " as the reference
code: datatrove adds ' and defaults to 3 words), and reading its counters.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from corpus.signals import heuristics, words
from corpus.signals.heuristics import heuristic_signals
from corpus.text.extract import extract_text, normalize_text, strip_invisible
from corpus.text.warc import decode_page
from tests.conftest import SAMPLE
from tests.stages.warc_fixtures import real_pages

PAGES_PER_PART = 25  # x 4 parts of the first crawl
PERL_SECTIONS = 100
TOLERANCE = 0.0  # the same floats: every value is a ratio of the same two integers


@pytest.fixture(scope="module")
def documents(shared_data) -> list[str]:
    texts = []
    for part in range(4):
        for _, payload in real_pages(shared_data, PAGES_PER_PART, part=part):
            html = decode_page(payload, "text/html").text
            text = normalize_text(strip_invisible(extract_text(html))[0])
            if text:
                texts.append(text)
    import gzip
    import json

    with gzip.open(SAMPLE / "curated" / "perl-doc.jsonl.gz", "rt", encoding="utf-8") as f:
        manuals = [json.loads(line)["text"] for line in f]
    sections = []
    for manual in manuals:  # a few sections of each manual, until there are enough
        parts = [s for s in re.split(r"(?m)^(?==head1 )", manual) if len(s.strip()) > 200]
        sections += parts[:3]
        if len(sections) >= PERL_SECTIONS:
            break
    return texts + sections[:PERL_SECTIONS]


@pytest.fixture(scope="module")
def datatrove():
    heuristics.word_tokenizer()  # spaCy loaded without torch (see word_tokenizer) before datatrove's own
    from datatrove.pipeline.filters import c4_filters, gopher_quality_filter, gopher_repetition_filter
    from datatrove.utils import text

    return c4_filters, gopher_quality_filter, gopher_repetition_filter, text


def datatrove_gopher(text: str, dt) -> tuple[list[str], dict[str, float]]:
    """The words, and every value GopherQualityFilter and GopherRepetitionFilter compare with a
    threshold."""
    _, gq, gr, dt_text = dt
    words = dt_text.split_into_words(text)
    n_words = len(words)
    # gopher_quality_filter.py, GopherQualityFilter.filter
    non_symbol_words = [w for w in words if any(ch not in dt_text.PUNCTUATION_SET for ch in w)]
    lines = text.splitlines()
    values = {
        "word_count": len(non_symbol_words),
        "mean_word_length": float(np.mean([len(w) for w in non_symbol_words])) if non_symbol_words else 0.0,
        "hash_word_ratio": text.count("#") / n_words if n_words else 0.0,
        "ellipsis_word_ratio": (text.count("...") + text.count("…")) / n_words if n_words else 0.0,
        "bullet_line_fraction": sum(s.lstrip().startswith("•") or s.lstrip().startswith("-") for s in lines)
        / len(lines),
        "ellipsis_line_fraction": sum(s.rstrip().endswith("...") or s.rstrip().endswith("…") for s in lines)
        / len(lines),
        "alpha_word_fraction": sum([any(c.isalpha() for c in w) for w in words]) / n_words
        if n_words
        else 0.0,
        "stop_word_count": len(set(gq.STOP_WORDS).intersection(set(words))),
    }
    # gopher_repetition_filter.py, GopherRepetitionFilter.filter
    rep = gr.GopherRepetitionFilter()
    paragraphs = rep.paragraph_exp.split(text.strip())
    dup_paragraphs, dup_paragraph_chars = gr.find_duplicates(paragraphs)
    rep_lines = rep._line_splitter.split(text)
    dup_lines, dup_line_chars = gr.find_duplicates(rep_lines)
    values |= {
        "dup_paragraph_fraction": dup_paragraphs / len(paragraphs),
        "dup_paragraph_char_fraction": dup_paragraph_chars / len(text),
        "dup_line_fraction": dup_lines / len(rep_lines),
        "dup_line_char_fraction": dup_line_chars / len(text),
    }
    for n, _ in rep.top_n_grams:
        grams = gr.get_n_grams(words, n)
        values[f"top_{n}gram_char_fraction"] = gr.find_top_duplicate(grams) / len(text) if grams else 0.0
    for n, _ in rep.dup_n_grams:
        values[f"dup_{n}gram_char_fraction"] = gr.find_all_duplicate(words, n) / len(text)
    return words, values


def test_every_gopher_signal_equals_datatrove_on_real_documents(documents, datatrove):
    assert len(documents) >= 190
    languages_without_spaces = sum(
        bool(re.search("[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]", t)) for t in documents
    )
    assert languages_without_spaces >= 10, "Chinese, Japanese and Korean pages are in"
    differ: dict[str, list] = {}
    for i, text in enumerate(documents):
        ours = heuristic_signals(text)
        words, values = datatrove_gopher(text, datatrove)
        if heuristics.words(text) != words:  # the span cache and the affix rules in Python give spaCy's
            differ.setdefault("words", []).append(i)
        for name, value in values.items():
            if not abs(ours[name] - value) <= TOLERANCE:
                differ.setdefault(name, []).append((i, ours[name], value))
    assert not differ, {name: (len(d), d[:3]) for name, d in differ.items()}


def test_c4_line_rules_equal_datatroves_c4_filter_set_as_published(documents, datatrove, monkeypatch):
    c4 = datatrove[0]
    monkeypatch.setattr(c4, "END_PUNCTUATION", heuristics.C4_END_MARKS)  # datatrove adds "'"
    from datatrove.data import Document

    def run(text: str, **flags):
        f = c4.C4QualityFilter(
            min_words_per_line=heuristics.C4_MIN_WORDS_PER_LINE, min_num_sentences=-1, **flags
        )
        verdict = f.filter(Document(text=text, id="0"))
        counts = {k: v.total for k, v in f.stats.stats.items()}
        return verdict, counts

    differ = []
    removed_any = lorem_or_brace = 0
    for i, text in enumerate(documents):
        ours = heuristic_signals(text)
        _, counts = run(text, filter_lorem_ipsum=False, filter_curly_bracket=False)
        blank = sum(not line.strip() for line in text.splitlines())
        removed = counts["line-total"] - counts.get("line-kept", 0) - blank
        lorem = run(text, filter_curly_bracket=False)[0] == (False, "lorem_ipsum")
        brace = run(text, filter_lorem_ipsum=False)[0] == (False, "curly_bracket")
        if (ours["c4_removed_lines"], ours["lorem_ipsum"], ours["curly_brace"]) != (removed, lorem, brace):
            differ.append((i, ours["c4_removed_lines"], removed, ours["curly_brace"], brace))
        removed_any += removed > 0
        lorem_or_brace += brace
    assert not differ, differ[:5]
    assert removed_any > len(documents) // 2 and lorem_or_brace > 5, "the rules were exercised"


def test_the_symbol_set_is_datatroves(datatrove):
    assert set(words.PUNCTUATION) == datatrove[3].PUNCTUATION_SET
    assert words.GOPHER_STOP_WORDS == set(datatrove[1].STOP_WORDS)


def test_letters_alone_match_no_affix_rule():
    """heuristics._Affixes takes a span of letters (str.isalpha) for one token without asking the rules."""
    tok = heuristics.word_tokenizer()
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    words = ["für", "Привет", "日本語のテキスト", "한국어", "ελληνικά", "עברית", "العربية", "ǅemal", "ʼaʼ"]
    for s in [a + b for a in letters for b in letters] + list(letters) + words:
        assert s.isalpha() and not (
            tok.prefix_search(s) or tok.suffix_search(s) or list(tok.infix_finditer(s))
        )
        assert heuristics.words(s) == [t.text for t in tok(s)], s  # "id" is a special case: i d


def test_the_tail_suffix_search_finds_spacys_suffixes(documents):
    """heuristics._tail_suffix_search (the last few characters, and the final dots) against spaCy's."""
    tok = heuristics.word_tokenizer()
    tail = heuristics._tail_suffix_search(tok.suffix_search)
    assert tail is not None, "spaCy's English suffix rules changed: the tokenizer falls back, slower"
    tricky = [
        "..",
        "...",
        "a..",
        "x....",
        "3km",
        "3km.",
        "5US$",
        "it's",
        "a.b..",
        "....",
        ".",
        "AB.",
        "°C.",
        "x)",
    ]
    spans = {s for text in documents[::4] for s in text.split()} | set(tricky)
    for s in spans:
        ours, spacys = tail(s), tok.suffix_search(s)
        assert (ours.end() - ours.start() if ours else 0) == (
            spacys.end() - spacys.start() if spacys else 0
        ), s


def test_a_top_ngram_hash_shared_by_two_ngrams_is_counted_exactly(datatrove):
    """Word ids too large to pack are hashed; two different 2-grams given one hash still count apart."""
    from corpus.signals.heuristics import _BASE, _top_ngram_chars

    gr = datatrove[2]
    mask = (1 << 64) - 1
    c = 0x632BE59BD9B4E019
    x0, x1, y0 = 1 << 40, (1 << 40) + 1, (1 << 40) + 2
    y1 = (((x0 * _BASE) & mask) ^ ((x1 + c) & mask) ^ ((y0 * _BASE) & mask)) - c & mask  # same key
    ws = ["ab", "c", "d", "ab", "c", "xyz", "w"]
    ids = np.array([x0, x1, 7, x0, x1, y0, y1], dtype=np.uint64)
    # ("ab","c") twice; ("xyz","w") once but sharing its hash: 3 would be wrong
    lens = np.array([len(w) for w in ws])
    assert _top_ngram_chars(ws, ids, lens, 2) == gr.find_top_duplicate(gr.get_n_grams(ws, 2)) == 2 * 4


def reference_line_signals(text: str) -> dict[str, float]:
    """The line signals datatrove has no value for, one line at a time as first written (heuristics
    now counts over the joined lines and lower-cases only where a phrase is)."""
    lines = text.splitlines()
    nonblank = [ln.strip() for ln in lines if ln.strip()]
    lower = [ln.lower() for ln in nonblank]
    n = len(nonblank) or 1
    removed_chars = total = 0
    for line in nonblank:
        total += len(line)
        cut = heuristics.C4_CITATION.sub("", line)
        gone = (
            (len(line) > 1000 and any(len(w) > 1000 for w in line.split()))
            or not cut.endswith(heuristics.C4_END_MARKS)
            or cut.endswith("...")
            or len(cut.split()) < 5
            or "javascript" in cut.lower()
            or any(p in cut.lower() for p in heuristics.C4_POLICY_SUBSTRINGS)
        )
        removed_chars += len(line) if gone else 0
    return {
        "javascript_line_fraction": sum("javascript" in ln for ln in lower) / n,
        "policy_line_fraction": sum(any(p in ln for p in heuristics.C4_POLICY_SUBSTRINGS) for ln in lower)
        / n,
        "terminal_punct_line_fraction": sum(ln.endswith(heuristics.TERMINAL_PUNCT) for ln in nonblank) / n,
        "c4_removed_char_fraction": removed_chars / total if total else 0.0,
    }


def test_line_signals_equal_a_line_by_line_reference_on_real_documents(documents):
    """The same floats on real documents and on lines made to hit each rule (a citation hiding a
    phrase, a policy phrase, bullets, ellipses and end marks after stripping, a final sigma)."""
    made = [
        "Java[1]script is run on this page, as said here.\n  - a bullet line …  \n\nWe use cookies. Σ",
        "Read our Terms of Use and the privacy policy here, please!\n• one\n...\n\u2028x.\nlorem ipsum dolor sit amet.",
        "ΟΔΟΣ\nJAVASCRIPT needed for this page to work right.”\n{ a: 1 }. and more words here.",
    ]
    differ = []
    for i, text in enumerate(documents + made):
        ours = heuristic_signals(text)
        for name, value in reference_line_signals(text).items():
            if ours[name] != value:
                differ.append((i, name, ours[name], value))
    assert not differ, differ[:5]
    assert sum(heuristic_signals(t)["policy_line_fraction"] > 0 for t in documents + made) >= 2
