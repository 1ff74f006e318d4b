"""The quality policy: thresholds applied to the values the annotate stage stored.

It is a selection rule, decided when a version is made (``policy`` in a selection, and the build's
``[policy]`` table for its default version, :mod:`corpus.selection`), never inside the build: it reads
a document's language, tier and scores only, which the metadata table holds, so a changed threshold is a
new version in seconds. Checks run in a fixed order and the first that fails names the reason; every
check that failed is returned as an Annotation with its value, and the decision as one more.

Trusted tiers (``exempt_tiers``: curated, books, code by default) skip the heuristic and quality
checks, which were designed for web pages (a Perl manual is full of "symbols"); language checks apply
to every tier. Word-based checks skip languages written without spaces (``no_space_languages``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from corpus.model import Annotation

STAGE = "policy"


@dataclass(frozen=True)
class PolicyConfig:
    languages: list[str] = field(default_factory=list)  # keep only these languages ([] = any)
    min_lang_confidence: float = 0.5
    lang_confidence: dict[str, float] = field(
        default_factory=dict
    )  # per-language minimum (overrides the above)
    # low-resource / non-Latin languages whose text must be mostly in the language's script
    script_check_languages: list[str] = field(
        default_factory=lambda: [
            "be",
            "bg",
            "el",
            "hy",
            "ka",
            "kk",
            "ky",
            "mk",
            "mn",
            "sr",
            "tg",
            "uk",
            "he",
            "yi",
            "am",
            "bo",
            "dv",
            "km",
            "lo",
            "my",
            "si",
            "ne",
            "mr",
        ]
    )
    min_script_fraction: float = 0.6
    exempt_tiers: list[str] = field(default_factory=lambda: ["curated", "books", "code"])
    no_space_languages: list[str] = field(
        default_factory=lambda: ["zh", "ja", "th", "lo", "km", "my", "wuu", "yue"]
    )
    # Gopher quality rules
    min_words: int = 50
    max_words: int = 100_000
    min_mean_word_length: float = 3.0
    max_mean_word_length: float = 10.0
    max_symbol_word_ratio: float = 0.1
    max_bullet_line_fraction: float = 0.9
    max_ellipsis_line_fraction: float = 0.3
    min_alpha_word_fraction: float = 0.8
    min_stop_words: int = 2  # English only (the Gopher stop-word list is English)
    # Gopher repetition rules
    max_dup_line_fraction: float = 0.3
    max_dup_line_char_fraction: float = 0.2
    max_dup_paragraph_fraction: float = 0.3
    max_top_2gram_char_fraction: float = 0.2
    max_top_3gram_char_fraction: float = 0.18
    max_top_4gram_char_fraction: float = 0.16
    # C4 rules
    drop_lorem_ipsum: bool = True
    drop_curly_brace: bool = False  # C4 drops any "{"; off by default, it would drop all programming prose
    max_javascript_line_fraction: float = 0.5
    max_policy_line_fraction: float = 0.5
    # the quality classifier
    min_quality: float = 0.01

    @cached_property
    def web_checks(self) -> tuple[tuple[str, str, str, float], ...]:
        return _web_checks(self)

    @cached_property
    def repetition_checks(self) -> tuple[tuple[str, str, str, float], ...]:
        return _repetition_checks(self)


class PolicySubject(Protocol):
    """What the policy reads of a document: a :class:`corpus.model.Document`, or a metadata row."""

    lang: str | None
    lang_confidence: float
    source_tier: str
    scores: Mapping[str, float]


def _web_checks(cfg: PolicyConfig) -> tuple[tuple[str, str, str, float], ...]:
    """The Gopher threshold checks every web-tier document gets first, in order: (check, score,
    "max" | "min", limit)."""
    checks = [
        ("gopher_symbol_word_ratio", "symbol_word_ratio", "max", cfg.max_symbol_word_ratio),
        ("gopher_bullet_lines", "bullet_line_fraction", "max", cfg.max_bullet_line_fraction),
        ("gopher_ellipsis_lines", "ellipsis_line_fraction", "max", cfg.max_ellipsis_line_fraction),
    ]
    return tuple(checks)


def _repetition_checks(cfg: PolicyConfig) -> tuple[tuple[str, str, str, float], ...]:
    """The Gopher repetition, C4 and quality checks every web-tier document gets last, in order."""
    checks = [
        ("gopher_dup_lines", "dup_line_fraction", "max", cfg.max_dup_line_fraction),
        ("gopher_dup_line_chars", "dup_line_char_fraction", "max", cfg.max_dup_line_char_fraction),
        ("gopher_dup_paragraphs", "dup_paragraph_fraction", "max", cfg.max_dup_paragraph_fraction),
        ("gopher_top_2gram", "top_2gram_char_fraction", "max", cfg.max_top_2gram_char_fraction),
        ("gopher_top_3gram", "top_3gram_char_fraction", "max", cfg.max_top_3gram_char_fraction),
        ("gopher_top_4gram", "top_4gram_char_fraction", "max", cfg.max_top_4gram_char_fraction),
        ("c4_javascript_lines", "javascript_line_fraction", "max", cfg.max_javascript_line_fraction),
        ("c4_policy_lines", "policy_line_fraction", "max", cfg.max_policy_line_fraction),
    ]
    if cfg.drop_lorem_ipsum:
        checks.append(("c4_lorem_ipsum", "lorem_ipsum", "max", 0.0))
    if cfg.drop_curly_brace:
        checks.append(("c4_curly_brace", "curly_brace", "max", 0.0))
    checks.append(("quality", "quality", "min", cfg.min_quality))
    return tuple(checks)


def _judge(results: list[tuple[str, object, bool]], s: Mapping[str, float], checks) -> None:
    for check, score, kind, limit in checks:
        v = s.get(score, 0.0)
        results.append((check, v, v <= limit if kind == "max" else v >= limit))


def decide(doc: PolicySubject, cfg: PolicyConfig) -> tuple[str | None, list[Annotation]]:
    """The reason ``doc`` is dropped (None to keep it), the failed checks and the decision as Annotations.
    A missing score counts as 0.0. The version step calls it once a stored document, so it is written
    to cost a few microseconds: plain comparisons, no closures."""
    s = doc.scores
    lang = doc.lang or "und"
    results: list[tuple[str, object, bool]] = []  # (check, value, passed), in order
    if cfg.languages:
        results.append(("language", lang, lang in cfg.languages))
    need = cfg.lang_confidence.get(lang, cfg.min_lang_confidence)
    results.append(("lang_confidence", doc.lang_confidence, doc.lang_confidence >= need))
    if lang in cfg.script_check_languages:
        _judge(results, s, (("script_fraction", "script_fraction", "min", cfg.min_script_fraction),))
    if doc.source_tier not in cfg.exempt_tiers:
        spaced = lang not in cfg.no_space_languages
        words = s.get("word_count", 0.0)
        results.append(("gopher_word_count", words, cfg.min_words <= words <= cfg.max_words))
        if spaced:
            mean = s.get("mean_word_length", 0.0)
            ok = cfg.min_mean_word_length <= mean <= cfg.max_mean_word_length
            results.append(("gopher_mean_word_length", mean, ok))
        _judge(results, s, cfg.web_checks)
        if spaced:
            _judge(results, s, (("gopher_alpha_words", "alpha_word_fraction", "min", cfg.min_alpha_word_fraction),))
        if lang == "en":
            _judge(results, s, (("gopher_stop_words", "stop_word_count", "min", cfg.min_stop_words),))
        _judge(results, s, cfg.repetition_checks)

    failed = [Annotation(STAGE, name, value, "fail") for name, value, ok in results if not ok]
    reason = failed[0].name if failed else None
    decision = Annotation(STAGE, "decision", reason or "keep", "fail" if reason else "pass")
    return reason, [*failed, decision]
