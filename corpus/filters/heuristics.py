"""Gopher (Rae et al. 2021, appendix A) and C4 (Raffel et al. 2020) quality signals, as numbers.

``heuristic_signals(text)`` is a pure function returning every signal; it decides nothing. The
thresholds live in ``corpus.policy`` so they can change without recomputing a signal.

Words are whitespace tokens, except that runs of CJK ideographs and kana count one word per character
(Chinese and Japanese have no spaces; otherwise a whole paragraph would be one "word").
"""

from __future__ import annotations

import re
from collections import Counter

GOPHER_STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
BULLETS = ("•", "‣", "●", "○", "▪", "◦", "-", "*", "–", "·")
ELLIPSES = ("...", "…")
TERMINAL_PUNCT = (".", "!", "?", '"', "”", "'", "’", "。", "！", "？", ":")
POLICY_PHRASES = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CJK_RUN = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff])")
_PUNCT_STRIP = "\"'“”‘’.,;:!?()[]{}<>«»"


def words(text: str) -> list[str]:
    out: list[str] = []
    for tok in text.split():
        if _CJK.search(tok):
            out.extend(t for t in _CJK_RUN.split(tok) if t)
        else:
            out.append(tok)
    return out


def _ngram_signals(ws: list[str], total_chars: int) -> dict[str, float]:
    """Gopher repetition: the share of characters in the most frequent 2/3/4-gram."""
    out = {}
    for n in (2, 3, 4):
        if len(ws) < n or total_chars == 0:
            out[f"top_{n}gram_char_fraction"] = 0.0
            continue
        grams = Counter(tuple(ws[i : i + n]) for i in range(len(ws) - n + 1))
        gram, count = max(grams.items(), key=lambda kv: (kv[1], kv[0]))
        out[f"top_{n}gram_char_fraction"] = (
            (count * sum(len(w) for w in gram) / total_chars) if count > 1 else 0.0
        )
    return out


def heuristic_signals(text: str) -> dict[str, float]:
    """Every Gopher/C4 signal of ``text`` (fractions in [0, 1], counts as floats, flags as 0/1)."""
    ws = words(text)
    n_words = len(ws)
    lines = [ln.strip() for ln in text.split("\n")]
    lines = [ln for ln in lines if ln]
    n_lines = max(len(lines), 1)
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    stripped = [w.strip(_PUNCT_STRIP) for w in ws]
    content_words = [w for w in stripped if w]
    total_word_chars = sum(len(w) for w in ws)
    lower = text.lower()

    line_counts = Counter(lines)
    dup_lines = sum(c for c in line_counts.values() if c > 1)
    dup_line_chars = sum(len(ln) * c for ln, c in line_counts.items() if c > 1)
    para_counts = Counter(paragraphs)
    dup_paras = sum(c for c in para_counts.values() if c > 1)
    line_chars = sum(len(ln) for ln in lines)

    signals = {
        "word_count": float(n_words),
        "mean_word_length": (sum(len(w) for w in content_words) / len(content_words))
        if content_words
        else 0.0,
        "symbol_word_ratio": ((lower.count("#") + sum(lower.count(e) for e in ELLIPSES)) / n_words)
        if n_words
        else 0.0,
        "bullet_line_fraction": sum(ln.startswith(BULLETS) for ln in lines) / n_lines,
        "ellipsis_line_fraction": sum(ln.endswith(ELLIPSES) for ln in lines) / n_lines,
        "alpha_word_fraction": (sum(any(c.isalpha() for c in w) for w in ws) / n_words) if n_words else 0.0,
        "stop_word_count": float(sum(w.lower() in GOPHER_STOP_WORDS for w in stripped)),
        "dup_line_fraction": dup_lines / n_lines if lines else 0.0,
        "dup_line_char_fraction": dup_line_chars / line_chars if line_chars else 0.0,
        "dup_paragraph_fraction": dup_paras / len(paragraphs) if paragraphs else 0.0,
        "terminal_punct_line_fraction": sum(ln.endswith(TERMINAL_PUNCT) for ln in lines) / n_lines,
        "javascript_line_fraction": sum("javascript" in ln.lower() for ln in lines) / n_lines,
        "policy_line_fraction": sum(any(p in ln.lower() for p in POLICY_PHRASES) for ln in lines) / n_lines,
        "lorem_ipsum": float("lorem ipsum" in lower),
        "curly_brace": float("{" in text),
        "char_count": float(len(text)),
    }
    signals.update(_ngram_signals([w.lower() for w in ws], total_word_chars))
    return {k: round(v, 6) for k, v in signals.items()}
