"""A config table's values checked against the types its dataclass declares, before anything runs.

A stage's config is a frozen dataclass whose field annotations say what each key holds. Python does
not check them, so ``num_perm = "lots"`` failed deep inside the stage as ``'>' not supported`` and
``[policy] min_words = "fifty"`` as a numpy traceback when a version was made. Here every value is
checked against its annotation (int, float, bool, str, lists, dicts, ``X | None``; other types are left
to the dataclass) and a mistake is one line naming the table, the key, the value and the type it must
have; an unknown key names the nearest known one. docs/config.md.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any


def type_problem(table_name: str, config_cls: type, table: dict[str, Any]) -> str | None:
    """The first key of ``table`` whose value does not have its field's type, as one line; None if all do."""
    hints = typing.get_type_hints(config_cls)
    for key in sorted(table):
        if key in hints and (expected := _mismatch(hints[key], table[key])) is not None:
            return f"[{table_name}] {key} = {table[key]!r}: expected {expected}"
    return None


def unknown_key_hint(key: str, known: set[str]) -> str:
    """`` (did you mean X?)`` for a key close to a known one, else ""."""
    near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
    return f" (did you mean {near[0]}?)" if near else ""


def _mismatch(tp: Any, value: Any) -> str | None:
    """What ``value`` should have been, or None when it has type ``tp`` (or ``tp`` is not checked)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        wrong = [_mismatch(arm, value) for arm in args]
        return None if None in wrong else " or ".join(w for w in wrong if w)
    if tp is type(None):
        return None if value is None else "nothing (null)"
    if tp in _SCALARS:
        return None if _SCALARS[tp][0](value) else _SCALARS[tp][1]
    if origin in (list, tuple) and args:
        if not isinstance(value, list | tuple):
            return f"a list of {_name(args[0])}"
        wrong = next((w for v in value if (w := _mismatch(args[0], v)) is not None), None)
        return None if wrong is None else f"a list of {_name(args[0])}"
    if origin is dict and len(args) == 2:
        if not isinstance(value, dict):
            return f"a table of {_name(args[1])}"
        ok = all(_mismatch(args[0], k) is None and _mismatch(args[1], v) is None for k, v in value.items())
        return None if ok else f"a table of {_name(args[1])}"
    return None


_SCALARS: dict[Any, tuple[Any, str]] = {
    bool: (lambda v: isinstance(v, bool), "true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    str: (lambda v: isinstance(v, str), "a string"),
}


def _name(tp: Any) -> str:
    if tp in _SCALARS:
        return _SCALARS[tp][1].removeprefix("an ").removeprefix("a ") + "s"
    return "values" if tp is Any else getattr(tp, "__name__", str(tp)).lower() + "s"
