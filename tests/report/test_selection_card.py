"""The card's view of a version, as pure functions: each rejected document under its first rule, the
thresholds a selection puts on each signal, the lines drawn for them, the table of contents."""

from __future__ import annotations

import base64

import numpy as np

from corpus.report.plots import histogram_plot
from corpus.report.signals import placed_thresholds, selection_thresholds
from corpus.report.version_funnel import first_failures
from corpus.report.widgets import with_contents
from corpus.select.policy import PolicyConfig
from corpus.select.selection import Selection, TopFraction


def test_a_document_counts_under_the_first_rule_it_fails_and_only_there():
    passes = [np.array([True, False, True, False]), np.array([False, False, True, True])]
    assert first_failures(passes, 4).tolist() == [1, 0, -1, 0]


def test_thresholds_name_the_policy_check_its_bound_and_the_documents_it_judges():
    policy = PolicyConfig(min_alpha_word_fraction=0.7, exempt_tiers=["curated"])
    got = selection_thresholds(Selection(policy=policy, min_scores={"quality": 0.2}), {})
    assert got["alpha_word_fraction"] == [
        {
            "bound": "min",
            "value": 0.7,
            "rule": "policy/gopher_alpha_words",
            "scope": "tiers other than curated",
            "lang": None,
        }
    ]
    assert [(t["rule"], t["value"]) for t in got["quality"]] == [
        ("policy/quality", policy.min_quality),
        ("min_scores/quality", 0.2),
    ]
    assert {t["bound"] for t in got["word_count"]} == {"min", "max"}


def test_a_top_fraction_threshold_is_the_lowest_value_each_language_keeps():
    s = Selection(top_fraction=(TopFraction("quality", 0.5, {"de": 0.25}),))
    got = selection_thresholds(s, {"quality": {"de": 0.9, "en": 0.4}})["quality"]
    assert [(t["lang"], t["value"], t["scope"]) for t in got] == [
        ("de", 0.9, "the top 25% of language de"),
        ("en", 0.4, "the top 50% of language en"),
    ]


def histogram(lo: float, hi: float) -> dict:
    return {"histogram": {"edges": [lo, (lo + hi) / 2, hi], "counts": [3, 4], "log": False}}


def test_a_threshold_is_drawn_only_inside_the_candidates_values():
    pops = {"candidates": {"scores": {"word_count": histogram(10.0, 900.0)}, "lang_confidence": None}}
    policy = selection_thresholds(Selection(policy=PolicyConfig()), {})
    placed = placed_thresholds(policy, pops)
    assert set(placed) == {"word_count"}  # no histogram, nothing to draw on
    assert [(t["value"], t["drawn"]) for t in placed["word_count"]] == [(50.0, True), (100000.0, False)]
    svg = svg_of(
        histogram_plot(
            {"candidates": pops["candidates"]["scores"]["word_count"]["histogram"]},
            "w",
            "w",
            False,
            placed["word_count"],
        )
    )
    assert 'id="threshold-0"' in svg and 'id="threshold-1"' not in svg


def svg_of(uri: str) -> str:
    return base64.b64decode(uri.removeprefix("data:image/svg+xml;base64,")).decode()


def test_the_contents_link_every_section_in_order_and_tell_equal_titles_apart():
    toc, body = with_contents("<h2>Yield funnel</h2><p>x</p><h2>Code</h2><h2>Code</h2><h3>Per source</h3>")
    assert (
        body
        == '<h2 id="yield-funnel">Yield funnel</h2><p>x</p><h2 id="code">Code</h2><h2 id="code-2">Code</h2><h3>Per source</h3>'
    )
    assert toc.count("<li>") == 3 and toc.index("#yield-funnel") < toc.index("#code") < toc.index("#code-2")
