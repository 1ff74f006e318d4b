"""Which files of a repository are not the repository's own code: the rejection table.

A file is judged in this order and the first verdict stands: what it is (a link, a special file, an
unsafe or duplicate path); the rule table, the team's ``[ingest] code_rules`` before
:data:`BUILTIN_RULES` (a rule whose reason is ``keep`` ends the table); its bytes, read the first time
a rule needs them and at the end (``too_large`` is never read; ``binary``, ``undecodable``,
``empty``). A rule is a table whose conditions must all hold: path globs matched case-insensitively
against ``"/" + path`` (``*`` crosses ``/``), ``min_bytes``, header expressions, line statistics.
The built-in table, the keys and where the thresholds come from: docs/code.md ("Files").
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from identify import identify

#: file-level reasons decided before or besides the rule table
INTRINSIC_REASONS = (
    "link",
    "special_file",
    "unsafe_path",
    "duplicate_path",
    "too_large",
    "binary",
    "undecodable",
    "empty",
)
KEEP = "keep"
RULE_KEYS = {
    "reason",
    "path",
    "min_bytes",
    "header",
    "header_keywords",
    "head_chars",
    "min_mean_line_length",
    "min_long_line_share",
    "long_line",
    "note",
}

_MINIFIABLE = ["*.js", "*.mjs", "*.cjs", "*.css", "*.scss", "*.less", "*.json", "*.html", "*.htm"]
_COMMENT = r"^[ \t]*(?:#|//|/\*+|\*|<!--|--|;+|\.\.|%|\"\"\"|''')?[ \t]*"

#: The built-in table (first match wins; cheap path rules first). Extend it with ``[ingest] code_rules``.
BUILTIN_RULES: list[dict[str, Any]] = [
    {
        "reason": "vcs_metadata",
        "path": ["*/.git/*", "*/.hg/*", "*/.svn/*", "*/.bzr/*", "*/cvs/*"],
        "note": "version-control internals of a directory declared as a repository",
    },
    {
        "reason": "vendored",
        "path": [
            "*/node_modules/*",
            "*/bower_components/*",
            "*/jspm_packages/*",
            "*/vendor/*",
            "*/vendors/*",
            "*/_vendor/*",
            "*/vendored/*",
            "*/third_party/*",
            "*/third-party/*",
            "*/thirdparty/*",
            "*/3rdparty/*",
            "*/site-packages/*",
            "*/.venv/*",
            "*/venv/*",
            "*/pods/*",
            "*/carthage/*",
        ],
        "note": "other projects' code carried along (pip's src/pip/_vendor/, node_modules/)",
    },
    {
        "reason": "lockfile",
        "path": [
            "*/package-lock.json",
            "*/npm-shrinkwrap.json",
            "*/yarn.lock",
            "*/pnpm-lock.yaml",
            "*/bun.lock",
            "*/bun.lockb",
            "*/pipfile.lock",
            "*/poetry.lock",
            "*/pdm.lock",
            "*/uv.lock",
            "*/cargo.lock",
            "*/gemfile.lock",
            "*/composer.lock",
            "*/go.sum",
            "*/gopkg.lock",
            "*/flake.lock",
            "*/mix.lock",
            "*/pubspec.lock",
            "*/podfile.lock",
            "*/packages.lock.json",
            "*/paket.lock",
            "*/conda-lock.yml",
            "*/requirements*.lock",
        ],
        "note": "resolved dependency pins, written by tools",
    },
    {
        "reason": "generated",
        "path": [
            "*_pb2.py",
            "*_pb2.pyi",
            "*_pb2_grpc.py",
            "*_pb2_grpc.pyi",
            "*.pb.go",
            "*.pb.gw.go",
            "*.pb.cc",
            "*.pb.h",
            "*.pb.swift",
            "*_pb.js",
            "*_pb.d.ts",
            "*_grpc_pb.js",
            "*_grpc_pb.d.ts",
            "*.pb.dart",
            "*.pbjson.dart",
            "*.designer.cs",
            "*.g.cs",
            "*.g.dart",
            "*.freezed.dart",
            "*.generated.*",
            "*.map",
            "*/pkg-info",
            "*.egg-info/*",
            "*.dist-info/*",
        ],
        "note": "protobuf / gRPC stubs, source maps, packaging metadata written by the build",
    },
    {
        "reason": "minified",
        "path": ["*.min.js", "*.min.mjs", "*.min.css", "*-min.js", "*-min.css", "*.min.map"],
        "note": "minified by name",
    },
    {
        "reason": "data_blob",
        "path": [
            "*.csv",
            "*.tsv",
            "*.psv",
            "*.jsonl",
            "*.ndjson",
            "*.arff",
            "*.parquet",
            "*.avro",
            "*.orc",
            "*.feather",
            "*.npy",
            "*.npz",
            "*.pkl",
            "*.pickle",
            "*.h5",
            "*.hdf5",
            "*.mat",
            "*.sqlite",
            "*.sqlite3",
            "*.db",
            "*.dat",
            "*.bin",
            "*.svg",
            "*.pem",
            "*.crt",
            "*.cer",
            "*.der",
            "*.key",
            "*.csr",
            "*.srl",
            "*.p12",
            "*.pfx",
            "*.jks",
            "*.keystore",
        ],
        "note": "data, images drawn as text, certificates and keys",
    },
    {
        "reason": "data_blob",
        "path": ["*.json", "*.xml", "*.yaml", "*.yml", "*.txt", "*.geojson"],
        "min_bytes": 256_000,
        "note": "a large data file in a text format",
    },
    {
        "reason": "generated",
        "header": [
            r"(?i)generated by the (?:protocol buffer|grpc\b.{0,40}) compiler",
            r"(?i)^\"\"\"generated protocol buffer code",
            r"(?i)" + _COMMENT + r"code generated .{0,120}\bdo not edit\b",
            r"\bDO NOT EDIT[.!]?[ \t]*(?:\*/|-->)?[ \t]*$",
            r"@generated\b",
            r"(?i)" + _COMMENT + r"(?:this (?:file|module|code) (?:is|was|has been) )?"
            r"(?:auto[- ]?generated|automatically generated|generated automatically|machine[- ]generated)"
            r"(?: by| from| with| using|[.,;:]| -)",
            r"(?i)" + _COMMENT + r"(?:this )?file (?:is |was |has been )?generated (?:by|from|with)\b",
            r"^[ \t]*(?:#|//|/\*+|\*|<!--|--|;+|%)[ \t]*Generated by \S+(?: v?[\d.]+)?(?: on .+)?[ \t]*$",
        ],
        "header_keywords": ["generat", "do not edit"],
        "note": "a generated-file header near the top (protoc, gRPC, 'Code generated ... DO NOT EDIT', "
        "@generated, 'This file is automatically generated by ...')",
    },
    {
        "reason": "minified",
        "path": _MINIFIABLE,
        "min_mean_line_length": 200,
        "note": "minified by line length: long lines on average",
    },
    {
        "reason": "minified",
        "path": _MINIFIABLE,
        "min_long_line_share": 0.6,
        "long_line": 1000,
        "note": "minified by line length: most of the text in lines over 1000 characters",
    },
]


@dataclass(frozen=True)
class Rule:
    reason: str
    path: re.Pattern | None = None
    min_bytes: int = 0
    header: tuple[re.Pattern, ...] = ()
    header_keywords: tuple[str, ...] = ()
    head_chars: int = 4096
    min_mean_line_length: float = 0.0
    min_long_line_share: float = 0.0
    long_line: int = 1000

    @property
    def needs_text(self) -> bool:
        return bool(self.header or self.min_mean_line_length or self.min_long_line_share)


def _strings(value: Any, where: str, key: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) and v for v in items):
        raise ValueError(f"{where}: '{key}' must be a string or a list of strings")
    return items


def parse_rule(table: dict[str, Any], where: str) -> Rule:
    """One rule table into a :class:`Rule`; raises ValueError naming the problem."""
    if not isinstance(table, dict):
        raise ValueError(f"{where}: a rule is a table")
    unknown = sorted(set(table) - RULE_KEYS)
    if unknown:
        raise ValueError(
            f"{where}: unknown keys {', '.join(unknown)} (known: {', '.join(sorted(RULE_KEYS))})"
        )
    reason = table.get("reason")
    if not isinstance(reason, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", reason):
        raise ValueError(f"{where}: 'reason' must be a lower_snake_case name ('keep' keeps the file)")
    if reason in INTRINSIC_REASONS:
        raise ValueError(f"{where}: reason {reason!r} is decided by the reader, not by a rule")
    conditions = set(table) & {"path", "min_bytes", "header", "min_mean_line_length", "min_long_line_share"}
    if not conditions:
        raise ValueError(f"{where}: a rule needs a condition (path, min_bytes, header, line statistics)")
    path, header = None, ()
    if "path" in table:
        globs = _strings(table["path"], where, "path")
        path = re.compile("|".join(f"(?:{fnmatch.translate(g.lower())})" for g in globs), re.S)
    if "header" in table:
        patterns = _strings(table["header"], where, "header")
        try:
            header = tuple(re.compile(p, re.M) for p in patterns)
        except re.error as e:
            raise ValueError(f"{where}: bad 'header' regular expression: {e}") from None
    keywords = ()
    if "header_keywords" in table:
        keywords = tuple(k.lower() for k in _strings(table["header_keywords"], where, "header_keywords"))
    nums = {}
    for key, kind in (
        ("min_bytes", int),
        ("head_chars", int),
        ("min_mean_line_length", float),
        ("min_long_line_share", float),
        ("long_line", int),
    ):
        if key in table:
            v = table[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ValueError(f"{where}: '{key}' must be a positive number")
            nums[key] = kind(v)
    return Rule(reason=reason, path=path, header=header, header_keywords=keywords, **nums)


def build_rules(team: list[dict[str, Any]], builtin: bool = True) -> list[Rule]:
    """The team's rules, then (unless switched off) the built-in ones."""
    if not isinstance(team, list):
        raise ValueError("code_rules must be a list of tables")
    rules = [parse_rule(t, f"code_rules[{i}]") for i, t in enumerate(team)]
    if builtin:
        rules += [parse_rule(t, f"builtin rule {i}") for i, t in enumerate(BUILTIN_RULES)]
    return rules


# --- judging one file ------------------------------------------------------------------------------


@dataclass
class FileText:
    """A file's bytes, decoded and measured only when a rule asks."""

    raw: bytes
    _text: str | None = None
    _stats: dict[int, tuple[float, float]] | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = self.raw.decode("utf-8")
        return self._text

    def line_stats(self, long_line: int) -> tuple[float, float]:
        """(mean characters per line, share of characters in lines longer than ``long_line``)."""
        if self._stats is None:
            self._stats = {}
        if long_line not in self._stats:
            text = self.text
            lengths = [len(ln) for ln in text.split("\n")]
            long_chars = sum(n for n in lengths if n > long_line)
            self._stats[long_line] = (len(text) / len(lengths), long_chars / max(1, len(text)))
        return self._stats[long_line]


def binary_by_name(path: str) -> bool:
    return "binary" in identify.tags_from_filename(path.rsplit("/", 1)[-1])


def judge(
    path: str,
    size: int,
    read: Callable[[], bytes],
    rules: list[Rule],
    max_file_bytes: int,
) -> tuple[str, str | None]:
    """(reason, text): the first reason that rejects the file, or ("", its text) when it is kept.
    ``read`` is called at most once, and never for a file over ``max_file_bytes``."""
    key = "/" + path.lower()
    loaded: FileText | None = None

    def load() -> str:
        nonlocal loaded
        if size > max_file_bytes:
            return "too_large"
        if binary_by_name(path):
            return "binary"
        raw = read()
        if len(raw) > max_file_bytes:
            return "too_large"
        if b"\0" in raw:
            return "binary"
        if raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        f = FileText(raw)
        try:
            text = f.text
        except UnicodeDecodeError:
            return "undecodable"
        if not text.strip():
            return "empty"
        loaded = f
        return ""

    for rule in rules:
        if rule.path is not None and not rule.path.match(key):
            continue
        if rule.min_bytes and size < rule.min_bytes:
            continue
        if rule.needs_text:
            if loaded is None:
                why = load()
                if why:
                    return why, None
            assert loaded is not None
            if rule.header:
                head = loaded.text[: rule.head_chars]
                if rule.header_keywords:
                    low = head.lower()
                    if not any(k in low for k in rule.header_keywords):
                        continue
                if not any(p.search(head) for p in rule.header):
                    continue
            if rule.min_mean_line_length or rule.min_long_line_share:
                mean, share = loaded.line_stats(rule.long_line)
                if rule.min_mean_line_length and mean < rule.min_mean_line_length:
                    continue
                if rule.min_long_line_share and share < rule.min_long_line_share:
                    continue
        if rule.reason == KEEP:
            break
        return rule.reason, None
    if loaded is None:
        why = load()
        if why:
            return why, None
    assert loaded is not None
    return "", loaded.text
