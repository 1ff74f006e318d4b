"""Words in the document's language: which segmenter splits a language into words, and its stop words.

Gopher's word signals (:mod:`corpus.signals.heuristics`) are defined on English, where a word lies
between spaces; a language written without spaces is cut by its segmenter (jieba, Sudachi, PyThaiNLP,
khmer-nltk, LaoNLP, sylbreak syllables for Myanmar), as datatrove 0.10.1 assigns them where they
install offline. Each segmenter is loaded on first use, once per process, never at import. Stop words:
Gopher's 8 for English, spaCy's list (read without importing its language package) for the other
languages of the shared crawls, none (never 0) for the rest. The table, versions and measurements:
docs/ingest-and-filters.md ("Every language").
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from functools import cache
from importlib.metadata import version

#: Gopher's stop words (Rae et al. 2021, A.1.1; datatrove's STOP_WORDS): English only
GOPHER_STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})

#: datatrove.utils.text.PUNCTUATION_SET: a token made only of these is a "symbol", not a word
PUNCTUATION = (
    "!/\u2014\u201d:\uff05\uff11\u3008&(\u3001\u2501\\\u3010#%\u300c\u300d\uff0c\u3011\uff1b+^]~\u201c\u300a"
    "\u201e';\u2019{|\u2236\xb4[=-`*\uff0e\uff08\u2013\uff1f\uff01\uff1a$\uff5e\xab\u3009,><\u300b)?\uff09"
    '\u3002\u2026@_."}\u25ba\xbb'
    + "".join(chr(c) for a, b in ((0, 9), (11, 13), (13, 32), (127, 160)) for c in range(a, b))
    # datatrove's TERMINAL_PUNCTUATION (sentence ends of many scripts)
    + "\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702\u07f9\u0837\u0839\u083d\u083e\u0964\u0965\u104a"
    "\u104b\u1362\u1367\u1368\u166e\u1735\u1736\u17d4\u17d5\u17d6\u17d9\u17da\u1803\u1809\u1944\u1945"
    "\u1aa8\u1aa9\u1aaa\u1aab\u1b5a\u1b5b\u1b5e\u1b5f\u1b7d\u1b7e\u1c3b\u1c3c\u1c7e\u1c7f\u203c\u203d"
    "\u2047\u2048\u2049\u2e2e\u2e3c\u2e53\u2e54\ua4ff\ua60e\ua60f\ua6f3\ua6f7\ua876\ua877\ua8ce\ua8cf"
    "\ua92f\ua9c8\ua9c9\uaa5d\uaa5e\uaa5f\uaaf0\uaaf1\uabeb\ufe52\ufe56\ufe57\uff61\U00010a56\U00010a57"
    "\U00010f55\U00010f56\U00010f57\U00010f58\U00010f59\U00010f86\U00010f87\U00010f88\U00010f89"
    "\U00011047\U00011048\U000110be\U000110bf\U000110c0\U000110c1\U00011141\U00011142\U00011143"
    "\U000111c5\U000111c6\U000111cd\U000111de\U000111df\U00011238\U00011239\U0001123b\U0001123c"
    "\U000112a9\U0001144b\U0001144c\U000115c2\U000115c3\U000115c9\U000115ca\U000115cb\U000115cc"
    "\U000115cd\U000115ce\U000115cf\U000115d0\U000115d1\U000115d2\U000115d3\U000115d4\U000115d5"
    "\U000115d6\U000115d7\U00011641\U00011642\U0001173c\U0001173d\U0001173e\U00011944\U00011946"
    "\U00011a42\U00011a43\U00011a9b\U00011a9c\U00011c41\U00011c42\U00011ef7\U00011ef8\U00011f43"
    "\U00011f44\U00016a6e\U00016a6f\U00016af5\U00016b37\U00016b38\U00016b44\U00016e98\U0001bc9f"
    "\U0001da88"
)

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
    return frozenset(
        w for w in module.STOP_WORDS if w.strip(PUNCTUATION) and len(w.split()) == 1 and "_" not in w
    )
