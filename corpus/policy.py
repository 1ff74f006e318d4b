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


def _max(name: str, limit: float):
    return lambda s: (s.get(name, 0.0), s.get(name, 0.0) <= limit)


def _min(name: str, limit: float):
    return lambda s: (s.get(name, 0.0), s.get(name, 0.0) >= limit)


class PolicySubject(Protocol):
    """What the policy reads of a document: a :class:`corpus.model.Document`, or a metadata row."""

    lang: str | None
    lang_confidence: float
    source_tier: str
    scores: Mapping[str, float]


def decide(doc: PolicySubject, cfg: PolicyConfig) -> tuple[str | None, list[Annotation]]:
    """The reason ``doc`` is dropped (None to keep it), the failed checks and the decision as Annotations."""
    checks: list[tuple[str, object]] = []
    lang = doc.lang or "und"
    if cfg.languages:
        checks.append(("language", lambda s: (lang, lang in cfg.languages)))
    need = cfg.lang_confidence.get(lang, cfg.min_lang_confidence)
    checks.append(("lang_confidence", lambda s: (doc.lang_confidence, doc.lang_confidence >= need)))
    if lang in cfg.script_check_languages:
        checks.append(("script_fraction", _min("script_fraction", cfg.min_script_fraction)))
    if doc.source_tier not in cfg.exempt_tiers:
        spaced = lang not in cfg.no_space_languages
        checks += [
            (
                "gopher_word_count",
                lambda s: (
                    s.get("word_count", 0.0),
                    cfg.min_words <= s.get("word_count", 0.0) <= cfg.max_words,
                ),
            ),
        ]
        if spaced:
            checks.append(
                (
                    "gopher_mean_word_length",
                    lambda s: (
                        s.get("mean_word_length", 0.0),
                        cfg.min_mean_word_length
                        <= s.get("mean_word_length", 0.0)
                        <= cfg.max_mean_word_length,
                    ),
                )
            )
        checks += [
            ("gopher_symbol_word_ratio", _max("symbol_word_ratio", cfg.max_symbol_word_ratio)),
            ("gopher_bullet_lines", _max("bullet_line_fraction", cfg.max_bullet_line_fraction)),
            ("gopher_ellipsis_lines", _max("ellipsis_line_fraction", cfg.max_ellipsis_line_fraction)),
        ]
        if spaced:
            checks.append(("gopher_alpha_words", _min("alpha_word_fraction", cfg.min_alpha_word_fraction)))
        if lang == "en":
            checks.append(("gopher_stop_words", _min("stop_word_count", cfg.min_stop_words)))
        checks += [
            ("gopher_dup_lines", _max("dup_line_fraction", cfg.max_dup_line_fraction)),
            ("gopher_dup_line_chars", _max("dup_line_char_fraction", cfg.max_dup_line_char_fraction)),
            ("gopher_dup_paragraphs", _max("dup_paragraph_fraction", cfg.max_dup_paragraph_fraction)),
            ("gopher_top_2gram", _max("top_2gram_char_fraction", cfg.max_top_2gram_char_fraction)),
            ("gopher_top_3gram", _max("top_3gram_char_fraction", cfg.max_top_3gram_char_fraction)),
            ("gopher_top_4gram", _max("top_4gram_char_fraction", cfg.max_top_4gram_char_fraction)),
            ("c4_javascript_lines", _max("javascript_line_fraction", cfg.max_javascript_line_fraction)),
            ("c4_policy_lines", _max("policy_line_fraction", cfg.max_policy_line_fraction)),
        ]
        if cfg.drop_lorem_ipsum:
            checks.append(("c4_lorem_ipsum", _max("lorem_ipsum", 0.0)))
        if cfg.drop_curly_brace:
            checks.append(("c4_curly_brace", _max("curly_brace", 0.0)))
        checks.append(("quality", _min("quality", cfg.min_quality)))

    reason = None
    failed = []
    for name, check in checks:
        value, ok = check(doc.scores)
        if not ok:
            failed.append(Annotation(STAGE, name, value, "fail"))
            reason = reason or name
    decision = Annotation(STAGE, "decision", reason or "keep", "fail" if reason else "pass")
    return reason, [*failed, decision]
