"""A file's language, from its name (extension or well-known file name) and else its shebang line.

The table is ``identify``'s (pre-commit's file identification library: about 350 extensions, 100 file
names and the interpreters of ``#!`` lines), kept up to date by its maintainers rather than by this
project. ``identify`` gives a set of tags (``{"c", "c++", "header", "text"}`` for ``.h``); the language
is its most widely used specific tag -- the one most of identify's own entries carry, so ``xsd`` is
``xml``, ``bash`` is ``shell``, ``pyproject.toml`` is ``toml`` -- with one override, ``.h`` is ``c``.
A text file no tag names (``LICENSE``, ``notes.txt``) is ``text``; a file identify does not know and
that has no shebang is ``""``.
"""

from __future__ import annotations

import io
from collections import Counter
from functools import lru_cache

from identify import extensions, identify

_GENERIC = frozenset(
    {"text", "binary", "plain-text", "header", "image", "audio", "zip", "executable", "non-executable"}
)
_WEIGHT = Counter(t for tags in (*extensions.EXTENSIONS.values(), *extensions.NAMES.values()) for t in tags)
_OVERRIDES = {".h": "c"}


def _pick(tags: frozenset[str] | set[str]) -> str:
    specific = [t for t in tags if t not in _GENERIC]
    if specific:
        return max(specific, key=lambda t: (_WEIGHT[t], t))
    return "text" if ("text" in tags or "plain-text" in tags) else ""


@lru_cache(maxsize=65536)
def language_of_name(name: str) -> str:
    """The language a file name says, "" when it says none."""
    for suffix, lang in _OVERRIDES.items():
        if name.lower().endswith(suffix):
            return lang
    return _pick(identify.tags_from_filename(name))


def language_of(path: str, text: str) -> str:
    """The language of the file at ``path`` (from the repository root) whose text is ``text``."""
    lang = language_of_name(path.rsplit("/", 1)[-1])
    if lang and lang != "text":
        return lang
    if text.startswith("#!"):
        first = text[: text.find("\n") + 1 if "\n" in text else len(text)]
        cmd = identify.parse_shebang(io.BytesIO(first.encode("utf-8", "replace")))
        if cmd:
            by_shebang = _pick(identify.tags_from_interpreter(cmd[0]))
            if by_shebang and by_shebang != "text":
                return by_shebang
    return lang
