"""Words in the document's language: which segmenter splits a language into words, and its stop words.

Gopher's word signals (``corpus.signals.heuristics``) were defined on English, where a word is what
lies between spaces. Languages written without spaces need a segmenter, or a page of Thai is a few
dozen "words" each a sentence long. The choice per language is datatrove 0.10.1's
(``datatrove/assets/tokenizer_assignment.csv``) where it installs offline:

========  ==================================================================  ======================
language  words are                                                           datatrove 0.10.1
========  ==================================================================  ======================
zh wuu    jieba's precise mode (``jieba.cut``, HMM on): the tokens of spaCy's  spaCy zh + jieba (for
yue       Chinese tokenizer with ``segmenter = "jieba"``                       cmn/zho_Hani, wuu, yue)
ja        SudachiPy, SudachiDict-core, split mode A (spaCy ja's default), in  spaCy ja (Sudachi A),
          pieces of at most 40,000 bytes cut at line ends (Sudachi refuses    pieces of 40,000 bytes
          more than 49,149)
th        PyThaiNLP ``word_tokenize(engine="newmm-safe")``                    the same
km        khmer-nltk ``word_tokenize``                                        the same
lo        LaoNLP ``word_tokenize``                                            the same
my        syllables: Myanmar runs broken by the sylbreak rule (Ye Kyaw Thu,   pyidaungsu (not
          github.com/ye-kyaw-thu/sylbreak), other runs kept whole             installed here)
others    spaCy's English rules, whitespace first (``heuristics.words``)      spaCy blank(lang);
                                                                              ko: Kiwi
========  ==================================================================  ======================

A segmenter's tokens are stripped and the empty ones dropped (datatrove's ``strip_strings``); a token
may hold a space where the segmenter means one word: PyThaiNLP's "ต่าง ๆ", a word and its repetition
mark. Each segmenter is loaded on first use, once per process, never at import: a rank that sees no
Thai never pays for PyThaiNLP.

Stop words: Gopher's list is its 8 English words and stays that for English (``GOPHER_STOP_WORDS``).
Every other language of the shared crawls has spaCy's list (``spacy/lang/<code>/stop_words.py``, read
from the installed spaCy without importing its language package: French's costs 1.8 s and 33 MB of
tokenizer exceptions), less the entries that cannot be one token: multi-word entries (Vietnamese
``a_lô``) and entries of punctuation only (Chinese ``，``). A language without a list has no stop-word
value at all, never 0.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from functools import cache
from importlib.metadata import version

#: Gopher's stop words (Rae et al. 2021, A.1.1; datatrove's STOP_WORDS): English only
GOPHER_STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})

#: languages with a spaCy stop-word list: those lid.176 finds on 5 pages or more of the shared crawls
#: (docs/ingest-and-filters.md, "Every language"), English aside
SPACY_STOP_WORD_LANGUAGES = (
    "ca", "cs", "da", "de", "el", "es", "fr", "id", "it", "ja",
    "ko", "lt", "nl", "pt", "ro", "ru", "sv", "vi", "zh",
)  # fmt: skip
#: every language with a stop-word list
STOP_WORD_LANGUAGES = ("en", *SPACY_STOP_WORD_LANGUAGES)

#: the languages segmented here, and the distributions whose versions decide their words
SEGMENTED = {
    "zh": ("jieba",),
    "wuu": ("jieba",),
    "yue": ("jieba",),
    "ja": ("SudachiPy", "SudachiDict-core"),
    "th": ("pythainlp",),
    "km": ("khmer-nltk",),
    "lo": ("laonlp",),
    "my": (),  # a rule of this module (MYANMAR_RULE)
}
#: the name of the Myanmar rule, in the segmenters' id: a changed rule is a new name
MYANMAR_RULE = "sylbreak-1"

#: Sudachi's input limit is 49,149 bytes; datatrove and spaCy cut at 40,000
_SUDACHI_MAX_BYTES = 40_000

# sylbreak: a syllable starts at a consonant that no virama (U+1039) precedes and no asat (U+103A) or
# virama follows, or at an independent vowel, a Myanmar digit or punctuation mark
_MYANMAR_RUN = re.compile(
    r"[\u1000-\u109f\ua9e0-\ua9ff\uaa60-\uaa7f]+|[^\s\u1000-\u109f\ua9e0-\ua9ff\uaa60-\uaa7f]+"
)
_MYANMAR_BREAK = re.compile(
    r"(?<!\u1039)(?=[\u1000-\u1021](?![\u103a\u1039]))|(?=[\u1023-\u1027\u1029\u102a\u103f\u104c\u104d\u104f"
    r"\u1040-\u1049\u104a\u104b])"
)


def segmenters_id() -> str:
    """Every segmenter and stop-word source with its version, for a stage's config: a new version of
    any of them changes the words of its language, so the id changes. No segmenter is loaded."""
    parts = []
    for lang, dists in SEGMENTED.items():
        names = [f"{d.lower()}-{version(d)}" for d in dists] or [MYANMAR_RULE]
        names += {"ja": ["mode-A"], "th": ["newmm-safe"]}.get(lang, [])
        parts.append(f"{lang}={'+'.join(names)}")
    parts.append(f"stop=gopher-en+spacy-{version('spacy')}")
    return ";".join(parts)


def segment(text: str, lang: str | None) -> list[str] | None:
    """The words of ``text`` by its language's segmenter (see the table above), or None for a
    language written with spaces, whose words are spaCy's English tokens."""
    if lang not in SEGMENTED:
        return None
    return [w for w in map(str.strip, _segmenter(lang)(text)) if w]


@cache
def _segmenter(lang: str) -> Callable[[str], list[str]]:
    """``lang``'s segmenter, loaded once per process."""
    if lang in ("zh", "wuu", "yue"):
        import jieba

        jieba.setLogLevel(60)  # no "Building prefix dict" on stderr of every rank
        jieba.initialize()
        return lambda text: list(jieba.cut(text))
    if lang == "ja":
        from sudachipy import Dictionary, SplitMode

        sudachi = Dictionary(dict="core").tokenizer(mode=SplitMode.A)
        return lambda text: [
            m.surface() for piece in _pieces(text, _SUDACHI_MAX_BYTES) for m in sudachi.tokenize(piece)
        ]
    if lang == "th":
        from pythainlp.tokenize import word_tokenize as thai

        return lambda text: thai(text, engine="newmm-safe", keep_whitespace=False)
    if lang == "km":
        from khmernltk import word_tokenize as khmer

        return lambda text: khmer(text, return_tokens=True)
    if lang == "lo":
        from laonlp.tokenize import word_tokenize as lao

        return lao
    assert lang == "my", lang
    return myanmar_syllables


def myanmar_syllables(text: str) -> list[str]:
    """Myanmar runs of ``text`` cut into syllables by the sylbreak rule; any other run kept whole.
    No segmenter for Burmese installs offline here; a syllable is shorter than a word (most words have
    one to three), so Burmese word counts are high and word lengths short, by this rule."""
    out: list[str] = []
    for m in _MYANMAR_RUN.finditer(text):
        run = m.group()
        if "\u1000" <= run[0] <= "\u109f" or "\ua9e0" <= run[0] <= "\uaa7f":
            out += [s for s in _MYANMAR_BREAK.split(run) if s]
        else:
            out.append(run)
    return out


def _pieces(text: str, max_bytes: int) -> list[str]:
    """``text`` in consecutive pieces of at most ``max_bytes`` of UTF-8, cut after a newline where one
    is in reach (a word is never cut there), else at a character boundary."""
    out = []
    while len(text.encode()) > max_bytes:
        head = text.encode()[:max_bytes].decode("utf-8", errors="ignore")
        cut = head.rfind("\n") + 1 or len(head)
        out.append(text[:cut])
        text = text[cut:]
    return [*out, text] if text else out


@cache
def stop_words(lang: str | None) -> frozenset[str] | None:
    """``lang``'s stop words (None: English, datatrove's default), None for a language without a list."""
    if lang is None or lang == "en":
        return GOPHER_STOP_WORDS
    if lang not in SPACY_STOP_WORD_LANGUAGES:
        return None
    spec = importlib.util.find_spec("spacy")
    assert spec is not None and spec.submodule_search_locations
    path = f"{spec.submodule_search_locations[0]}/lang/{lang}/stop_words.py"
    module_spec = importlib.util.spec_from_file_location(f"_spacy_stop_words_{lang}", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    from corpus.signals.heuristics import PUNCTUATION

    return frozenset(
        w for w in module.STOP_WORDS if w.strip(PUNCTUATION) and len(w.split()) == 1 and "_" not in w
    )
