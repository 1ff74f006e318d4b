"""A config file's JSON Schema and its first misfit, both read from the dataclass that describes it.

A table is a dataclass: each field a key, its annotation what the value holds (bool, int, float, str,
arrays, tables, ``X | None``, ``Literal[...]``, a nested dataclass). ``Annotated[T, Schema(...)]``
adds what only the schema states (a range, a pattern, choices: the parser checks those with its own
message) and ``Annotated[T, "text"]`` says what the value must be in words. :func:`table_schema` is
the JSON Schema (``corpus config schema``, the DAG Params); :func:`first_problem` is the first key that
is unknown (with the nearest known one) or of the wrong type, as a :class:`Problem` each kind of file
words in one line. A missing key is left to the parser too. docs/config.md.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from corpus.model.config_types import unknown_key_hint


class Schema:
    """In ``Annotated[T, Schema(minimum=0)]``: JSON Schema keywords for the schema alone (hashable, so
    that it may stand in a union)."""

    def __init__(self, **keywords: Any) -> None:
        self.keywords = keywords


class _SelfChecked:
    """The marker :data:`SELF_CHECKED`."""


#: in ``Annotated[...]`` of a nested table: its own parser checks it (the schema still describes it)
SELF_CHECKED = _SelfChecked()

#: where a value stands in a file: keys and array indexes, outermost first
KeyPath = tuple[str | int, ...]


@dataclasses.dataclass(frozen=True)
class Problem:
    """Where a file does not fit its description: unknown keys of the table at ``path`` (``unknown``,
    ``known``), or ``value`` at ``path`` is not ``expected``."""

    path: KeyPath
    value: Any
    expected: str = ""
    unknown: tuple[str, ...] = ()
    known: tuple[str, ...] = ()

    @property
    def hint(self) -> str:
        """`` (did you mean X?)`` for the first unknown key, else ""."""
        return unknown_key_hint(self.unknown[0], set(self.known)) if self.unknown else ""


def path_text(path: KeyPath) -> str:
    """``top_fraction[0].keep``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def keys_of(cls: type) -> tuple[str, ...]:
    """The keys a table described by ``cls`` may have, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


def first_problem(cls: type, table: Mapping[str, Any], path: KeyPath = ()) -> Problem | None:
    """The table's unknown keys, else its first key (in declaration order) whose value is not of its
    field's type, looking into nested arrays and tables; None when it fits."""
    known = keys_of(cls)
    unknown = tuple(sorted(str(k) for k in set(table) - set(known)))
    if unknown:
        return Problem(path, dict(table), unknown=unknown, known=known)
    hints = typing.get_type_hints(cls, include_extras=True)
    for key in known:
        if key in table and (p := value_problem(hints[key], table[key], (*path, key))) is not None:
            return p
    return None


def value_problem(tp: Any, value: Any, path: KeyPath) -> Problem | None:
    """Whether ``value`` has type ``tp``: None, or the :class:`Problem` deepest inside it."""
    if typing.get_origin(tp) is Annotated and SELF_CHECKED in typing.get_args(tp):
        return None
    tp, text, extra = _unwrap(tp)
    if extra.get("format") == "date" and isinstance(value, dt.date):  # TOML's date: JSON's string
        return None
    if not _fits(tp, value):
        return Problem(path, value, text or expected(tp))
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return first_problem(tp, value, path)
    if origin in _UNIONS:
        return next(value_problem(a, value, path) for a in args if _fits(_unwrap(a)[0], value))
    if origin in _ARRAYS and args:
        return next((p for i, v in enumerate(value) if (p := value_problem(args[0], v, (*path, i)))), None)
    if origin in _TABLES and len(args) == 2:
        return next((p for k, v in value.items() if (p := value_problem(args[1], v, (*path, k)))), None)
    return None


def _fits(tp: Any, value: Any) -> bool:
    """The value is of ``tp``'s kind (its items are looked at by :func:`value_problem`)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in _UNIONS:
        return any(_fits(_unwrap(a)[0], value) for a in args)
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if dataclasses.is_dataclass(tp) or origin in _TABLES:
        return isinstance(value, Mapping)
    if origin in _ARRAYS:
        return isinstance(value, list | tuple)
    if tp in _SCALARS:
        return _SCALARS[tp][0](value)
    return True  # Any, or a type the parser checks


def expected(tp: Any) -> str:
    """What a value of ``tp`` is, in words: ``an array of strings``."""
    tp, text, _ = _unwrap(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if text:
        return text
    if origin in _UNIONS:
        return " or ".join(expected(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if dataclasses.is_dataclass(tp):
        return "a table"
    if origin in _ARRAYS:
        return f"an array of {_plural(args[0])}" if args else "an array"
    if origin in _TABLES:
        return f"a table of {_plural(args[1])}" if len(args) == 2 else "a table"
    return _SCALARS[tp][1] if tp in _SCALARS else "a value"


def _plural(tp: Any) -> str:
    """``strings``, ``arrays of integers``; ``values, each …`` where no plural is at hand."""
    words = expected(tp)
    for one, many in (("an array", "arrays"), ("a table", "tables")):
        if words.startswith(one):
            return many + words[len(one) :]
    return _PLURALS.get(words, f"values, each {words}")


def table_schema(cls: type, notes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The JSON Schema of a table described by ``cls``: a property per key (``notes``: its description),
    no other key; ``required``: the fields without a default."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    properties = {f.name: value_schema(hints[f.name]) for f in fields}
    for key, note in (notes or {}).items():
        if note and key in properties:
            properties[key]["description"] = note
    out: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    required = [f.name for f in fields if f.default is f.default_factory is dataclasses.MISSING]
    return {**out, "required": required} if required else out


def value_schema(tp: Any) -> dict[str, Any]:
    """The JSON Schema of a value of type ``tp`` (with what ``Annotated`` adds)."""
    tp, _, extra = _unwrap(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        out = table_schema(tp)
    elif origin in _UNIONS:
        arms = [value_schema(a) for a in args]
        simple = all(set(a) == {"type"} and isinstance(a["type"], str) for a in arms)
        out = {"type": [a["type"] for a in arms]} if simple else {"anyOf": arms}
    elif origin is Literal:
        out = {"enum": list(args)}
    elif origin in _ARRAYS:
        out = {"type": "array", **({"items": value_schema(args[0])} if args else {})}
    elif origin in _TABLES:
        out = {
            "type": "object",
            **({"additionalProperties": value_schema(args[1])} if len(args) == 2 else {}),
        }
    else:
        out = {"type": _SCALARS[tp][2]} if tp in _SCALARS else {}
    return {**out, **extra}


def _unwrap(tp: Any) -> tuple[Any, str, dict[str, Any]]:
    """``Annotated[T, Schema(...), "text"]`` as (T, "text", keywords); another type as (tp, "", {})."""
    if typing.get_origin(tp) is not Annotated:
        return tp, "", {}
    base, *meta = typing.get_args(tp)
    extra = {k: v for m in meta if isinstance(m, Schema) for k, v in m.keywords.items()}
    return base, " ".join(m for m in meta if isinstance(m, str)), extra


_UNIONS = (typing.Union, types.UnionType)
_ARRAYS = (list, tuple, Sequence)
_TABLES = (dict, Mapping)
#: type: (is a value of it, the value in words, its JSON Schema type)
_SCALARS: dict[Any, tuple[Any, str, str]] = {
    bool: (lambda v: isinstance(v, bool), "true or false", "boolean"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer", "integer"),
    float: (
        lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
        "a finite number",
        "number",
    ),
    str: (lambda v: isinstance(v, str), "a string", "string"),
    type(None): (lambda v: v is None, "nothing (null)", "null"),
}
_PLURALS = {
    "true or false": "true or false values",
    "an integer": "integers",
    "a finite number": "finite numbers",
    "a string": "strings",
}
