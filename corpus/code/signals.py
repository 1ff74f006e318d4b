"""Quality signals of a code document, from its files: what annotate stores for tier ``code`` in place
of the web heuristics.

The Gopher and C4 rules are written for prose; on code they measure the language, not the quality, so
code documents get these instead (in ``scores``, prefixed ``code_``; no quality score): the alphanumeric
fraction, mean and max line length, comment fraction (:data:`COMMENT_SYNTAX`), generated-file fraction
(the ``generated`` rules of :mod:`corpus.code.rules`) and data-like line fraction
(:data:`DATA_LINE_SHARE`). Each is a plain count over the document's files (header lines not counted),
so a threshold is a version's choice. Definitions and costs: docs/code.md ("Code signals").
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

from corpus.code.repo_dedup import document_files
from corpus.code.rules import BUILTIN_RULES, build_rules, judge, text_shape
from corpus.model import Document
from corpus.model.annotations import REPO_FILES

#: language (``corpus.code.language``'s names) -> (line comment prefixes, block comment (open, close) pairs)
COMMENT_SYNTAX: dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = {
    **dict.fromkeys(
        "python cython shell ruby perl r julia powershell toml yaml makefile cmake dockerfile gitignore".split(),
        (("#",), ()),
    ),
    **dict.fromkeys(
        "javascript ts jsx tsx c c++ c# objective-c java go rust swift kotlin scala dart groovy scss less".split()
        + ["proto", "zig"],
        (("//",), (("/*", "*/"),)),
    ),
    "php": (("//", "#"), (("/*", "*/"),)),
    "css": ((), (("/*", "*/"),)),
    "sql": (("--",), (("/*", "*/"),)),
    "lua": (("--",), (("--[[", "]]"),)),
    "haskell": (("--",), (("{-", "-}"),)),
    "ini": ((";", "#"), ()),
    "clojure": ((";",), ()),
    "asm": ((";", "#"), ()),
    "tex": (("%",), ()),
    "erlang": (("%",), ()),
    "batch": (("rem ", "REM ", "::"), ()),
    "html": ((), (("<!--", "-->"),)),
    "xml": ((), (("<!--", "-->"),)),
    "vue": (("//",), (("<!--", "-->"), ("/*", "*/"))),
}
#: a line is data-like when at least this share of its non-blank characters are literals and separators
DATA_LINE_SHARE = 0.8
_LITERAL = re.compile(
    r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|\b0[xX][0-9a-fA-F]+\b|[-+]?\b\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\b"
)
_SEPARATORS = frozenset(",;:()[]{}")


@lru_cache(maxsize=1)
def _generated_rules() -> list:
    """The built-in rule table's ``generated`` rules, parsed as ingest parses them."""
    return build_rules([r for r in BUILTIN_RULES if r["reason"] == "generated"], builtin=False)


def is_generated(path: str, text: str) -> bool:
    """Whether a ``generated`` rule of ``corpus.code.rules`` matches the file (by name or header)."""
    data = text.encode("utf-8")
    verdict = judge(path, len(data), lambda: data, _generated_rules(), max_file_bytes=len(data) + 1)
    return verdict.reason == "generated"


def is_data_line(stripped: str) -> bool:
    """Whether a non-blank line is mostly literals (see the module docstring). Triple quotes are not
    literals: a docstring line is prose."""
    line = stripped.replace('"""', "").replace("'''", "")
    body = "".join(line.split())
    if not body:
        return False
    literal = sum(len("".join(m.group(0).split())) for m in _LITERAL.finditer(line))
    if not literal:
        return False
    separators = sum(c in _SEPARATORS for c in _LITERAL.sub("", line))
    return literal + separators >= DATA_LINE_SHARE * len(body)


def comment_lines(lang: str, lines: list[str]) -> int:
    """How many of ``lines`` (non-blank, stripped) are comment lines in ``lang``'s syntax."""
    prefixes, blocks = COMMENT_SYNTAX[lang]
    n, closer = 0, None
    for line in lines:
        if closer is not None:  # inside a block comment
            n += 1
            if closer in line:
                closer = None
            continue
        opened = next(((o, c) for o, c in blocks if line.startswith(o)), None)
        if opened is not None:
            n += 1
            if opened[1] not in line[len(opened[0]) :]:
                closer = opened[1]
        elif prefixes and line.startswith(prefixes):
            n += 1
    return n


def code_signals(files: list[tuple[str, str, str]]) -> dict[str, float]:
    """The ``code_*`` signals of files given as (path, language, text)."""
    chars = alnum = lines = longest = total_len = 0
    nonblank = data = commented = comment_base = generated = 0
    for path, lang, text in files:
        shape = text_shape(text)
        chars += shape.chars
        alnum += shape.alnum
        lines += shape.lines
        total_len += shape.line_chars
        longest = max(longest, shape.longest_line)
        stripped = [s for ln in text.split("\n") if (s := ln.strip())]
        nonblank += len(stripped)
        data += sum(is_data_line(s) for s in stripped)
        if lang in COMMENT_SYNTAX:
            comment_base += len(stripped)
            commented += comment_lines(lang, stripped)
        generated += is_generated(path, text)
    out = {
        "code_alnum_fraction": alnum / chars if chars else 0.0,
        "code_mean_line_length": total_len / lines if lines else 0.0,
        "code_max_line_length": float(longest),
        "code_data_line_fraction": data / nonblank if nonblank else 0.0,
        "code_generated_fraction": generated / len(files) if files else 0.0,
    }
    if comment_base:
        out["code_comment_fraction"] = commented / comment_base
    return dict(sorted(out.items()))


def document_code_signals(doc: Document) -> dict[str, float]:
    """The ``code_*`` signals of a code document (its files as ingest listed them in ``repo_files``; a
    document without them is one file of no known language)."""
    note = REPO_FILES.of(doc)
    langs = {p: lang for p, lang, _ in json.loads(note.value)} if note is not None else {}
    return code_signals([(path, langs.get(path, ""), text) for path, text in document_files(doc)])
