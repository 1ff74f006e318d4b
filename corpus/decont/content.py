"""What of an eval item is matched: its content, built from the record's own fields, templates stripped.

An item is matched through its **passages**: texts each of which, found in a document by the rule
(:mod:`corpus.decont.rule`), makes the item contaminated there. The shape of the record's ``doc``, not
the file name, chooses the builder (multiple choice, GSM8K, LAMBADA, HumanEval, plain text), so a
renamed file reads the same. The item's verbatim ``text`` is always one more passage; passages are
compared after :func:`corpus.decont.ngrams.normalize_words`, and two with the same words are one. A
multiple-choice item is matched by its question alone (choices in any order, or none) and by the
question followed by the correct answer. The builders' table: docs/snapshot.md ("decontaminate").
"""

from __future__ import annotations

import re
from typing import Any

from corpus.decont.ngrams import normalize_words

#: a template label at the start of a line ("Question:", "Answer:", "Q.", "A)", "Choices:" ...): the
#: scaffolding a benchmark's prompt format wraps around its content
_LABEL = re.compile(
    r"(?im)^[ \t]*(?:question|answer|q|a|choices|options|context|passage|solution)[ \t]*[:.)][ \t]*"
)
#: GSM8K's calculator annotations, ``<<16-3-4=9>>``: part of the released answer, rarely of a copy
_CALC = re.compile(r"<<[^<>]*>>")


def strip_template(text: str) -> str:
    """The text without its template labels (at the start of a line)."""
    return _LABEL.sub("", text).strip()


def _multiple_choice(doc: dict[str, Any]) -> list[str] | None:
    query, choices, gold = doc.get("query"), doc.get("choices"), doc.get("gold")
    if not (isinstance(query, str) and isinstance(choices, list) and isinstance(gold, int)):
        return None
    if not 0 <= gold < len(choices) or not isinstance(choices[gold], str):
        return None
    question = strip_template(query)
    return [question, f"{question}\n{choices[gold]}"]


def _question_answer(doc: dict[str, Any]) -> list[str] | None:
    question, answer = doc.get("question"), doc.get("answer")
    if not (isinstance(question, str) and isinstance(answer, str)):
        return None
    return [strip_template(question), strip_template(_CALC.sub("", answer))]


def _cloze(doc: dict[str, Any]) -> list[str] | None:
    query, answers = doc.get("query"), doc.get("answers_text")
    if not (isinstance(query, str) and isinstance(answers, list) and answers and isinstance(answers[0], str)):
        return None
    return [f"{query} {answers[0]}"]


def _code(doc: dict[str, Any]) -> list[str] | None:
    prompt, solution = doc.get("prompt"), doc.get("canonical_solution")
    if not (isinstance(prompt, str) and isinstance(solution, str)):
        return None
    return [prompt + solution]


#: tried in order; the first that recognizes ``doc`` gives the content passages
_BUILDERS = (_multiple_choice, _question_answer, _cloze, _code)


def content_kind(doc: Any) -> str:
    """Which builder reads a record (for the registry's description): the builder's name, or ``text``."""
    if isinstance(doc, dict):
        for build in _BUILDERS:
            if build(doc) is not None:
                return build.__name__.lstrip("_")
    return "text"


def item_passages(text: str, doc: Any = None) -> tuple[str, ...]:
    """The passages an item is matched by: its content (from ``doc`` when it has a known shape, else the
    text with template labels stripped), then the verbatim text; one per distinct word sequence."""
    content = None
    if isinstance(doc, dict):
        for build in _BUILDERS:
            content = build(doc)
            if content is not None:
                break
    if content is None:
        content = [strip_template(text)]
    out, seen = [], set()
    for passage in [*content, text]:
        words = tuple(normalize_words(passage))
        if words and words not in seen:
            seen.add(words)
            out.append(passage)
    return tuple(out)
