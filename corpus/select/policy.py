"""The quality policy: thresholds applied to the values the annotate stage stored.

A selection rule, decided when a version is made (``policy`` in a selection, the build's ``[policy]``
for its default version), never inside the build: it reads a document's language, tier and scores
only, so a changed threshold is a new version in seconds. Checks run in a fixed order
(:data:`HOLDOUT_CHECKS` first, in every tier) and the first that fails names the reason; every failed
check is returned as an Annotation with its value, and the decision as one more. A missing quality
score is judged by ``unscored_quality``; any other missing score counts as 0.0 (``Check.missing``).
The checks, their defaults and the tiers and languages each applies to: docs/ingest-and-filters.md
("policy").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np

from corpus.model import Annotation
from corpus.model.annotations import (
    HOLDOUT_EXACT,
    HOLDOUT_NEAR,
    POLICY,
    POLICY_DECISION,
    SIGNALS_SKIPPED,
    AnnotationName,
)
from corpus.signals.words import STOP_WORD_LANGUAGES


@dataclass(frozen=True, kw_only=True)
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
    language_exempt_tiers: list[str] = field(default_factory=lambda: ["code"])
    no_space_languages: list[str] = field(
        default_factory=lambda: ["zh", "ja", "th", "lo", "km", "my", "wuu", "yue"]
    )
    # Gopher quality rules
    min_words: int = 50
    max_words: int = 100_000
    min_mean_word_length: float = 3.0
    max_mean_word_length: float = 10.0
    max_symbol_word_ratio: float = 0.1  # for "#" and for ellipses, each per word (Gopher)
    max_bullet_line_fraction: float = 0.9
    max_ellipsis_line_fraction: float = 0.3
    min_alpha_word_fraction: float = 0.8
    # at least this many distinct stop words of the document's language's list (Gopher: 2 of its 8
    # English words); the same number for every list: on the shared crawls it drops 2.8 % of English
    # pages (generated indexes) and 0-2 % of the pages of each other language
    min_stop_words: int = 2
    # the languages the stop-word check applies to: every language with a list but Korean, whose
    # words (eojeol: a stem and its particles) rarely equal an entry of spaCy's list of stems (6 of 93
    # real prose pages have fewer than 2); every other language: off
    stop_word_languages: list[str] = field(
        default_factory=lambda: [lang for lang in STOP_WORD_LANGUAGES if lang != "ko"]
    )
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
    unscored_quality: str = "keep"  # "keep" or "drop": a document of a language the model does not score

    def __post_init__(self) -> None:
        unlisted = sorted(set(self.stop_word_languages) - set(STOP_WORD_LANGUAGES))
        if unlisted:  # no list, no value: every document of the language would fail
            raise ValueError(
                f"stop_word_languages {unlisted} have no stop-word list; languages with one: "
                f"{', '.join(STOP_WORD_LANGUAGES)}"
            )
        if self.unscored_quality not in UNSCORED_QUALITY:
            raise ValueError(
                f"unscored_quality must be one of {', '.join(UNSCORED_QUALITY)}, got {self.unscored_quality!r}"
            )

    @cached_property
    def checks(self) -> tuple[Check, ...]:
        """Every check on a score, in the order judged: :data:`HOLDOUT_CHECKS` and :data:`SKIPPED_CHECK`
        (before the language list and confidence), then the rest (after them)."""
        return (*HOLDOUT_CHECKS, SKIPPED_CHECK, *_score_checks(self))


#: what ``unscored_quality`` may say, and the value a missing quality score then counts as
UNSCORED_QUALITY = {"keep": float("inf"), "drop": float("-inf")}


class PolicySubject(Protocol):
    """What the policy reads of a document: a :class:`corpus.model.Document`, or a metadata row."""

    lang: str | None
    lang_confidence: float
    source_tier: str
    scores: Mapping[str, float]


@dataclass(frozen=True)
class Check:
    """One threshold on a stored value: a document it applies to passes when
    ``low <= value <= high`` (a missing value counts as ``missing``; NaN fails)."""

    name: str  # the reason it names when it is the first to fail
    score: str
    low: float
    high: float
    #: which documents it applies to: "all" (every document, judged first), "script" (a language of
    #: ``script_check_languages``), "web" (a tier not in ``exempt_tiers``), "web_spaced" (and a language
    #: written with spaces), "web_stop" (and a language of ``stop_word_languages``)
    scope: str
    #: the value a document without the score counts as (annotate stores every signal on every document
    #: of a check's scope, so 0.0 is reached only by documents made before a signal existed)
    missing: float = 0.0


INF = float("inf")
#: the scope of the checks judged first, on every document whatever its tier or language
EVERY = "all"
#: a copy of an eval-holdout page, exact or near (the scores named as the annotations HOLDOUT_EXACT
#: and HOLDOUT_NEAR; a document without them passes): never trained on, whatever the rest of the policy
HOLDOUT_CHECKS: tuple[Check, ...] = (
    Check("holdout_exact_duplicate", HOLDOUT_EXACT.name, -INF, 0.0, EVERY),
    Check("holdout_near_duplicate", HOLDOUT_NEAR.name, -INF, 0.0, EVERY),
)
#: a document the ``[annotate] gate`` did not pass has no Gopher/C4 signals and no quality score: the
#: policy cannot judge it, so it never keeps it, in any tier (a version that reads none of those may)
SKIPPED_CHECK = Check("signals_skipped", SIGNALS_SKIPPED.name, -INF, 0.0, EVERY)


def _at_most(name: str, score: str, limit: float, scope: str = "web") -> Check:
    return Check(name, score, -INF, limit, scope)


def _at_least(name: str, score: str, limit: float, scope: str = "web") -> Check:
    return Check(name, score, limit, INF, scope)


def _score_checks(cfg: PolicyConfig) -> tuple[Check, ...]:
    """Every check on a score, in the order they are judged (after the language list and confidence):
    the script check, then the Gopher quality rules, the Gopher repetition and C4 rules, and the
    quality classifier last."""
    checks = [
        _at_least("script_fraction", "script_fraction", cfg.min_script_fraction, "script"),
        Check("gopher_word_count", "word_count", cfg.min_words, cfg.max_words, "web"),
        Check(
            "gopher_mean_word_length",
            "mean_word_length",
            cfg.min_mean_word_length,
            cfg.max_mean_word_length,
            "web_spaced",
        ),
        _at_most("gopher_hash_word_ratio", "hash_word_ratio", cfg.max_symbol_word_ratio),
        _at_most("gopher_ellipsis_word_ratio", "ellipsis_word_ratio", cfg.max_symbol_word_ratio),
        _at_most("gopher_bullet_lines", "bullet_line_fraction", cfg.max_bullet_line_fraction),
        _at_most("gopher_ellipsis_lines", "ellipsis_line_fraction", cfg.max_ellipsis_line_fraction),
        _at_least("gopher_alpha_words", "alpha_word_fraction", cfg.min_alpha_word_fraction),
        _at_least("gopher_stop_words", "stop_word_count", cfg.min_stop_words, "web_stop"),
        _at_most("gopher_dup_lines", "dup_line_fraction", cfg.max_dup_line_fraction),
        _at_most("gopher_dup_line_chars", "dup_line_char_fraction", cfg.max_dup_line_char_fraction),
        _at_most("gopher_dup_paragraphs", "dup_paragraph_fraction", cfg.max_dup_paragraph_fraction),
        _at_most("gopher_top_2gram", "top_2gram_char_fraction", cfg.max_top_2gram_char_fraction),
        _at_most("gopher_top_3gram", "top_3gram_char_fraction", cfg.max_top_3gram_char_fraction),
        _at_most("gopher_top_4gram", "top_4gram_char_fraction", cfg.max_top_4gram_char_fraction),
        _at_most("c4_javascript_lines", "javascript_line_fraction", cfg.max_javascript_line_fraction),
        _at_most("c4_policy_lines", "policy_line_fraction", cfg.max_policy_line_fraction),
    ]
    if cfg.drop_lorem_ipsum:
        checks.append(_at_most("c4_lorem_ipsum", "lorem_ipsum", 0.0))
    if cfg.drop_curly_brace:
        checks.append(_at_most("c4_curly_brace", "curly_brace", 0.0))
    checks.append(
        Check("quality", "quality", cfg.min_quality, INF, "web", UNSCORED_QUALITY[cfg.unscored_quality])
    )
    return tuple(checks)


def missing_values(cfg: PolicyConfig) -> dict[str, float]:
    """The value each score the policy reads counts as where a document has none (what a null in the
    metadata table becomes before :func:`decide_rows`)."""
    out: dict[str, float] = {}
    for c in cfg.checks:
        if out.setdefault(c.score, c.missing) != c.missing:
            raise ValueError(f"checks on {c.score!r} disagree on its missing value")
    return out


def _applies(scope: str, lang: str, tier: str, cfg: PolicyConfig) -> bool:
    if scope == EVERY:
        return True
    if scope == "script":
        return lang in cfg.script_check_languages
    if tier in cfg.exempt_tiers:
        return False
    if scope == "web_spaced":
        return lang not in cfg.no_space_languages
    return scope == "web" or lang in cfg.stop_word_languages


def decide(doc: PolicySubject, cfg: PolicyConfig) -> tuple[str | None, list[Annotation]]:
    """The reason ``doc`` is dropped (None to keep it), the failed checks and the decision as Annotations.
    A missing score counts as its check's ``missing`` (its value reported as None). :func:`decide_rows`
    is the same rule over columns of rows."""
    s = doc.scores
    lang = doc.lang or "und"
    results: list[tuple[str, object, bool]] = []  # (check, value, passed), in order

    def judge(checks: list[Check]) -> None:
        for c in checks:
            if _applies(c.scope, lang, doc.source_tier, cfg):
                v = s.get(c.score)
                results.append((c.name, v, c.low <= (c.missing if v is None else v) <= c.high))

    judge([c for c in cfg.checks if c.scope == EVERY])
    if doc.source_tier not in cfg.language_exempt_tiers:
        if cfg.languages:
            results.append(("language", lang, lang in cfg.languages))
        need = cfg.lang_confidence.get(lang, cfg.min_lang_confidence)
        results.append(("lang_confidence", doc.lang_confidence, doc.lang_confidence >= need))
    judge([c for c in cfg.checks if c.scope != EVERY])
    failed = [AnnotationName(POLICY, name).note(value, "fail") for name, value, ok in results if not ok]
    reason = failed[0].name if failed else None
    decision = POLICY_DECISION.note(reason or "keep", "fail" if reason else "pass")
    return reason, [*failed, decision]


def decide_rows(
    lang: np.ndarray,
    lang_confidence: np.ndarray,
    tier: np.ndarray,
    scores: Mapping[str, np.ndarray],
    cfg: PolicyConfig,
) -> tuple[list[str], np.ndarray]:
    """:func:`decide` over n rows at once, for the version step (a few microseconds a row in Python
    would be hours at 10⁹ rows): ``lang`` and ``tier`` are object arrays of str ("und" and "" where
    unknown), ``lang_confidence`` and every score float arrays with a missing value as the check's
    ``missing`` (:func:`missing_values`; an absent array: every row missing). Returns the
    names of the checks in order and, per row, the position of the first it fails there (-1: kept)."""
    n = len(lang)
    names: list[str] = []
    fails: list[np.ndarray] = []

    def judge(checks: list[Check]) -> None:
        for c in checks:
            v = scores[c.score] if c.score in scores else np.full(n, c.missing, dtype=np.float64)
            names.append(c.name)
            fails.append(scope[c.scope] & ~((c.low <= v) & (v <= c.high)))

    web = ~np.isin(tier, cfg.exempt_tiers)
    scope = {
        EVERY: np.ones(n, dtype=bool),
        "script": np.isin(lang, cfg.script_check_languages),
        "web": web,
        "web_spaced": web & ~np.isin(lang, cfg.no_space_languages),
        "web_stop": web & np.isin(lang, cfg.stop_word_languages),
    }
    judge([c for c in cfg.checks if c.scope == EVERY])
    judged_lang = ~np.isin(tier, cfg.language_exempt_tiers)
    if cfg.languages:
        names.append("language")
        fails.append(judged_lang & ~np.isin(lang, cfg.languages))
    need = np.full(n, cfg.min_lang_confidence, dtype=np.float64)
    for code, minimum in cfg.lang_confidence.items():
        need[lang == code] = minimum
    names.append("lang_confidence")
    fails.append(judged_lang & ~(lang_confidence >= need))
    judge([c for c in cfg.checks if c.scope != EVERY])
    failed = np.stack(fails) if n else np.zeros((len(fails), 0), dtype=bool)
    first = np.where(failed.any(axis=0), failed.argmax(axis=0), -1)
    return names, first
