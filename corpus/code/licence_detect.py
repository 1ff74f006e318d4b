"""A repository's licence as an SPDX expression, from its own files, with the evidence and conflicts.

The build stores what the repository says about itself; whether it may be trained on is a version's
decision (:mod:`corpus.select.selection`), from the class :func:`corpus.select.licences.licence_class`
gives the expression. Evidence, read while ingest reads the repository once (:class:`LicenceScanner`):
root licence files matched against :data:`TEXTS`, root package metadata (through :data:`ALIASES`), and
``SPDX-License-Identifier`` headers. :func:`reconcile` turns it into one expression; every piece of
evidence that names other licences is a recorded conflict, never resolved silently, and every limit
of the matcher ends in ``NOASSERTION`` (class ``unknown``), never in a class the text does not support.
Detection, reconciliation and limits: docs/code.md ("Licences").
"""

from __future__ import annotations

import configparser
import json
import re
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import HeaderParser
from typing import Any

from license_expression import ExpressionError, get_spdx_licensing

from corpus.select.licences import licence_class

#: no licence anywhere (SPDX's ``NONE``) and a licence found but not recognised (``NOASSERTION``)
NONE = "NONE"
NOASSERTION = "NOASSERTION"
#: root file names (lower case) read as licence texts: the name up to its first dot or dash
LICENCE_STEMS = ("license", "licence", "copying", "notice", "unlicense")
METADATA_FILES = ("pkg-info", "pyproject.toml", "setup.cfg", "package.json", "cargo.toml")
#: a licence or metadata file larger than this is recorded as too large, not read
MAX_LICENCE_FILE_BYTES = 512 << 10
HEADER_CHARS = 2000
_SPDX_HEADER = re.compile(r"SPDX-License-Identifier:\s*([^\n\r]*)")
_LICENSING = get_spdx_licensing()


@dataclass(frozen=True)
class LicenceText:
    """A standard licence text by its distinctive passages (normalized: :func:`normalize`)."""

    spdx: str
    all_of: tuple[str, ...]
    none_of: tuple[str, ...] = ()
    #: the text grants "this version or any later one" (GNU family) when this occurs before the appendix
    or_later: tuple[str, ...] = ()


_GNU_LATER = ("or at your option any later version",)
#: checked in this order; a text found makes later texts it contains irrelevant (:data:`_SUBSUMES`)
TEXTS: tuple[LicenceText, ...] = (
    LicenceText(
        "AGPL-3.0-only", ("gnu affero general public license version 3 19 november 2007",), (), _GNU_LATER
    ),
    LicenceText(
        "LGPL-3.0-only", ("gnu lesser general public license version 3 29 june 2007",), (), _GNU_LATER
    ),
    LicenceText(
        "LGPL-2.1-only", ("gnu lesser general public license version 2 1 february 1999",), (), _GNU_LATER
    ),
    LicenceText("LGPL-2.0-only", ("gnu library general public license version 2 june 1991",), (), _GNU_LATER),
    LicenceText("GPL-3.0-only", ("gnu general public license version 3 29 june 2007",), (), _GNU_LATER),
    LicenceText("GPL-2.0-only", ("gnu general public license version 2 june 1991",), (), _GNU_LATER),
    LicenceText("MPL-2.0", ("mozilla public license version 2 0",)),
    LicenceText(
        "MPL-2.0", ("this source code form is subject to the terms of the mozilla public license v 2 0",)
    ),
    LicenceText("MPL-1.1", ("mozilla public license version 1 1",)),
    LicenceText("EPL-2.0", ("eclipse public license v 2 0",)),
    LicenceText("EPL-1.0", ("eclipse public license v 1 0",)),
    LicenceText("CDDL-1.0", ("common development and distribution license cddl version 1 0",)),
    LicenceText("Apache-2.0", ("apache license version 2 0 january 2004",)),
    LicenceText("Apache-2.0", ("licensed under the apache license version 2 0",)),
    LicenceText("Apache-1.1", ("the apache software license version 1 1",)),
    LicenceText(
        "PSF-2.0",
        ("python software foundation license version 2", "this license agreement is between the python"),
    ),
    LicenceText("BSL-1.0", ("boost software license version 1 0",)),
    LicenceText("Artistic-2.0", ("the artistic license 2 0",)),
    LicenceText("CC0-1.0", ("cc0 1 0 universal", "statement of purpose")),
    LicenceText("Unlicense", ("this is free and unencumbered software released into the public domain",)),
    LicenceText("WTFPL", ("do what the fuck you want to public license",)),
    LicenceText(
        "Zlib",
        (
            "in no event will the authors be held liable for any damages arising from the use of this software",
            "altered source versions must be plainly marked as such",
        ),
    ),
    LicenceText(
        "MIT",
        (
            "permission is hereby granted free of charge to any person obtaining a copy of this software",
            "the above copyright notice and this permission notice shall be included in all copies",
        ),
    ),
    LicenceText(
        "MIT-0",
        ("permission is hereby granted free of charge to any person obtaining a copy of this software",),
        ("the above copyright notice and this permission notice shall be included",),
    ),
    LicenceText(
        "ISC",
        (
            "permission to use copy modify and or distribute this software for any purpose with or without fee "
            "is hereby granted provided that the above copyright notice and this permission notice appear in all copies",
        ),
    ),
    LicenceText(
        "0BSD",
        (
            "permission to use copy modify and or distribute this software for any purpose with or without fee is hereby granted",
        ),
        ("provided that the above copyright notice",),
    ),
    LicenceText(
        "BSD-4-Clause",
        (
            "redistribution and use in source and binary forms with or without modification are permitted",
            "all advertising materials mentioning features or use of this software must display",
        ),
    ),
    LicenceText(
        "BSD-3-Clause",
        (
            "redistribution and use in source and binary forms with or without modification are permitted",
            "redistributions of source code must retain the above copyright notice",
            "may be used to endorse or promote products derived from this software without specific prior written permission",
        ),
        ("all advertising materials mentioning features",),
    ),
    LicenceText(
        "BSD-2-Clause",
        (
            "redistribution and use in source and binary forms with or without modification are permitted",
            "redistributions of source code must retain the above copyright notice",
            "redistributions in binary form must reproduce the above copyright notice",
        ),
        (
            "endorse or promote products derived from this software",
            "all advertising materials mentioning features",
        ),
    ),
)
#: an LGPL is the GPL of the same generation plus permissions, and ships with its text (COPYING beside
#: COPYING.LESSER): found together, the GPL text is the LGPL's supplement, not a second licence
_SUBSUMES = {"LGPL-3.0": "GPL-3.0", "LGPL-2.1": "GPL-2.0", "LGPL-2.0": "GPL-2.0"}
_APPENDIX = re.compile(
    r"how to apply these terms to your new (?:programs|libraries)|end of terms and conditions"
)

#: free-text licence names (normalized) -> SPDX expression, or ``family:NAME`` for a name without a version
ALIASES: dict[str, str] = {
    "mit": "MIT",
    "mit license": "MIT",
    "the mit license": "MIT",
    "expat": "MIT",
    "isc": "ISC",
    "isc license": "ISC",
    "isc license iscl": "ISC",
    "apache": "family:Apache",
    "apache 2": "Apache-2.0",
    "apache 2 0": "Apache-2.0",
    "apache license 2 0": "Apache-2.0",
    "apache license version 2 0": "Apache-2.0",
    "apache software license": "family:Apache",
    "apache software license 2 0": "Apache-2.0",
    "asl 2 0": "Apache-2.0",
    "bsd": "family:BSD",
    "bsd license": "family:BSD",
    "new bsd": "BSD-3-Clause",
    "new bsd license": "BSD-3-Clause",
    "modified bsd": "BSD-3-Clause",
    "bsd 3 clause": "BSD-3-Clause",
    "3 clause bsd": "BSD-3-Clause",
    "simplified bsd": "BSD-2-Clause",
    "bsd 2 clause": "BSD-2-Clause",
    "2 clause bsd": "BSD-2-Clause",
    "mpl 2 0": "MPL-2.0",
    "mpl2": "MPL-2.0",
    "mozilla public license 2 0": "MPL-2.0",
    "mozilla public license 2 0 mpl 2 0": "MPL-2.0",
    "lgpl": "family:LGPL",
    "lgplv2": "LGPL-2.0-only",
    "lgplv2 1": "LGPL-2.1-only",
    "lgplv3": "LGPL-3.0-only",
    "gpl": "family:GPL",
    "gplv2": "GPL-2.0-only",
    "gplv3": "GPL-3.0-only",
    "gnu gpl": "family:GPL",
    "agplv3": "AGPL-3.0-only",
    "psf": "PSF-2.0",
    "psf license": "PSF-2.0",
    "python software foundation license": "PSF-2.0",
    "public domain": "family:public-domain",
    "unlicense": "Unlicense",
    "the unlicense": "Unlicense",
    "zlib": "Zlib",
    "zlib license": "Zlib",
}
#: ``License ::`` trove classifiers (the text after ``OSI Approved ::`` or ``License ::``)
CLASSIFIERS: dict[str, str] = {
    "mit license": "MIT",
    "mit no attribution license mit 0": "MIT-0",
    "bsd license": "family:BSD",
    "apache software license": "family:Apache",
    "isc license iscl": "ISC",
    "mozilla public license 2 0 mpl 2 0": "MPL-2.0",
    "mozilla public license 1 1 mpl 1 1": "MPL-1.1",
    "python software foundation license": "PSF-2.0",
    "zlib libpng license": "Zlib",
    "the unlicense unlicense": "Unlicense",
    "boost software license 1 0 bsl 1 0": "BSL-1.0",
    "eclipse public license 2 0 epl 2 0": "EPL-2.0",
    "gnu general public license gpl": "family:GPL",
    "gnu general public license v2 gplv2": "GPL-2.0-only",
    "gnu general public license v2 or later gplv2": "GPL-2.0-or-later",
    "gnu general public license v3 gplv3": "GPL-3.0-only",
    "gnu general public license v3 or later gplv3": "GPL-3.0-or-later",
    "gnu lesser general public license v2 lgplv2": "LGPL-2.0-only",
    "gnu lesser general public license v2 or later lgplv2": "LGPL-2.0-or-later",
    "gnu lesser general public license v3 lgplv3": "LGPL-3.0-only",
    "gnu lesser general public license v3 or later lgplv3": "LGPL-3.0-or-later",
    "gnu library or lesser general public license lgpl": "family:LGPL",
    "gnu affero general public license v3": "AGPL-3.0-only",
    "gnu affero general public license v3 or later agplv3": "AGPL-3.0-or-later",
    "public domain": "family:public-domain",
}
#: which metadata expression decides when no licence file does (most explicit first)
METADATA_ORDER = (
    "PKG-INFO:License-Expression",
    "pyproject.toml:project.license",
    "package.json:license",
    "Cargo.toml:package.license",
    "pyproject.toml:tool.poetry.license",
    "setup.cfg:metadata.license",
    "PKG-INFO:License",
    "pyproject.toml:classifier",
    "setup.cfg:classifier",
    "PKG-INFO:Classifier",
)


def normalize(text: str) -> str:
    """Lower case, every run of non-alphanumerics (punctuation, line breaks, comment marks) one space."""
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def _key(spdx_id: str) -> str:
    """A licence without its version scope: ``GPL-2.0-or-later`` and ``GPL-2.0-only`` are one licence."""
    return re.sub(r"(-only|-or-later|\+)$", "", spdx_id)


def match_text(text: str) -> list[str]:
    """The SPDX ids of the standard licences a licence file's text contains (sorted, deduplicated)."""
    norm = normalize(text)
    found: set[str] = set()
    for t in TEXTS:
        if all(p in norm for p in t.all_of) and not any(p in norm for p in t.none_of):
            spdx = t.spdx
            if t.or_later:
                head = norm[: m.start()] if (m := _APPENDIX.search(norm)) else norm
                if any(p in head for p in t.or_later):
                    spdx = spdx.replace("-only", "-or-later")
            found.add(spdx)
    keys = {_key(f) for f in found}
    return sorted(f for f in found if not any(_SUBSUMES.get(k) == _key(f) for k in keys))


def parse_expression(text: str) -> str | None:
    """An SPDX expression normalized by ``license-expression`` (``GPL-2.0+`` -> ``GPL-2.0-or-later``,
    Cargo's ``/`` as ``OR``), or None when it names an id SPDX does not know."""
    text = re.sub(r"\s*/\s*", " OR ", text.strip())
    if not text:
        return None
    try:
        return _LICENSING.parse(text, validate=True).render()
    except ExpressionError:
        return None


def name_to_spdx(text: str) -> str | None:
    """A free-text licence name as an expression (or ``family:NAME``); None when not recognised."""
    expr = parse_expression(text) if "\n" not in text.strip() else None
    if expr is not None:
        return expr
    return ALIASES.get(normalize(text))


def expression_keys(expression: str) -> set[str]:
    """The licences an expression names, each without its version scope (``WITH`` exceptions dropped)."""
    try:
        parsed = _LICENSING.parse(expression)
    except ExpressionError:
        return {expression}
    keys = set()
    for sym in _LICENSING.license_symbols(parsed, decompose=True):
        if not getattr(sym, "is_exception", False):
            keys.add(_key(sym.key))
    return keys


@dataclass(frozen=True)
class Evidence:
    """One thing a repository says about its licence. ``value`` is an SPDX expression, ``family:NAME``
    (a name without a version), or ``NOASSERTION`` (a licence file no text matched)."""

    kind: str  # "licence_file", "metadata", "header"; "detected" beside a declared licence
    where: str  # path, ``path:field``, or for headers the first path carrying it
    value: str
    files: int = 1  # headers: how many kept files carry it

    def to_list(self) -> list[Any]:
        return [self.kind, self.where, self.value, self.files]


def agrees(evidence: Evidence, expression: str) -> bool:
    """Does the evidence name the licences of the expression? Metadata describes the whole package, so
    it must name the same ones; a licence file or a header may be one part (``LICENSE-MIT`` of ``MIT OR
    Apache-2.0``); a family agrees when one of the licences is of that family."""
    keys = expression_keys(expression)
    if evidence.value.startswith("family:"):
        fam = evidence.value.split(":", 1)[1]
        if fam == "public-domain":
            return licence_class(expression) == "public_domain"
        return any(k == fam or k.startswith(fam + "-") for k in keys)
    if evidence.kind in ("licence_file", "header"):
        return expression_keys(evidence.value) <= keys
    return expression_keys(evidence.value) == keys


def _refine_or_later(expression: str, evidence: list[Evidence]) -> str:
    """``X-only`` -> ``X-or-later`` where other evidence grants the same licence "or later"."""
    later = {
        sym
        for e in evidence
        if not e.value.startswith("family:") and e.value != NOASSERTION
        for sym in re.findall(r"[A-Za-z0-9.\-]+-or-later", e.value)
    }
    for sym in sorted(later):
        expression = re.sub(rf"\b{re.escape(_key(sym))}-only\b", sym, expression)
    return expression


@dataclass(frozen=True)
class RepositoryLicence:
    """The reconciled licence of one repository and everything behind it (JSON: :meth:`to_dict`)."""

    expression: str
    decided_by: str  # "licence_file", "metadata", "header", "declared", "unrecognised", "none"
    evidence: tuple[Evidence, ...] = ()
    conflicts: tuple[Evidence, ...] = ()
    declared: str = ""  # what the source table declared ("" when nothing)

    @property
    def licence_class(self) -> str:
        return licence_class(self.expression)

    def to_dict(self) -> dict[str, Any]:
        return {
            "expression": self.expression,
            "class": self.licence_class,
            "decided_by": self.decided_by,
            "declared": self.declared,
            "evidence": [e.to_list() for e in self.evidence],
            "conflicts": [e.to_list() for e in self.conflicts],
        }

    def with_declared(self, declared: str) -> RepositoryLicence:
        """The source's declared licence wins (a team's declaration is a reviewed decision, e.g. a legal
        review of a mirror); what the files say stays evidence, and disagreement a conflict."""
        if not declared:
            return self
        detected = Evidence("detected", self.decided_by, self.expression)
        ev = (*self.evidence, detected)
        conflicts = tuple(e for e in ev if e.value not in (NONE, NOASSERTION) and not agrees(e, declared))
        return RepositoryLicence(declared, "declared", ev, conflicts, declared)


def reconcile(evidence: list[Evidence]) -> RepositoryLicence:
    """One expression from a repository's evidence (the rules are the module docstring's)."""
    ev = sorted(evidence, key=lambda e: (e.kind, e.where, e.value))
    files = [e for e in ev if e.kind == "licence_file"]
    found = sorted({e.value for e in files if e.value != NOASSERTION})
    meta = {e.where: e for e in ev if e.kind == "metadata" and _expression(e)}
    meta_exprs = [meta[w].value for w in _metadata_rank(meta)]
    headers = sorted({e.value for e in ev if e.kind == "header" and _expression(e)})
    if found:
        keys = set().union(*(expression_keys(f) for f in found))
        same = [m for m in meta_exprs if expression_keys(m) == keys]
        expression = same[0] if same else " AND ".join(found) if len(found) > 1 else found[0]
        decided = "licence_file"
    elif meta_exprs:
        expression, decided = meta_exprs[0], "metadata"
    elif headers:
        expression, decided = " AND ".join(f"({h})" if " " in h else h for h in headers), "header"
    elif ev:  # something said something, but nothing recognisable: not the same as no licence at all
        return RepositoryLicence(NOASSERTION, "unrecognised", tuple(ev))
    else:
        return RepositoryLicence(NONE, "none")
    expression = parse_expression(_refine_or_later(expression, ev)) or expression
    conflicts = tuple(e for e in ev if e.value != NOASSERTION and not agrees(e, expression))
    return RepositoryLicence(expression, decided, tuple(ev), conflicts)


def _expression(e: Evidence) -> bool:
    """Evidence that names licences exactly (not a family, not unrecognised)."""
    return e.value != NOASSERTION and not e.value.startswith("family:")


def _metadata_rank(meta: dict[str, Evidence]) -> list[str]:
    def rank(where: str) -> tuple[int, str]:
        path, fld = where.split(":", 1)
        name = f"{path.rsplit('/', 1)[-1]}:{fld.split('[')[0]}"
        return (METADATA_ORDER.index(name) if name in METADATA_ORDER else len(METADATA_ORDER), where)

    return sorted(meta, key=rank)


# -- metadata readers: each returns [(field, raw value)] -----------------------------------------------
def _classifier(text: str) -> str | None:
    if not text.strip().startswith("License ::"):
        return None
    return CLASSIFIERS.get(normalize(text.split("::")[-1]))


def _pkg_info(text: str) -> list[tuple[str, str]]:
    head = HeaderParser().parsestr(text.split("\n\n", 1)[0])
    out = [("License-Expression", v) for v in head.get_all("License-Expression") or []]
    out += [("License", v) for v in head.get_all("License") or [] if v.strip() and v.strip() != "UNKNOWN"]
    out += [("Classifier", v) for v in head.get_all("Classifier") or [] if v.startswith("License ::")]
    return out


def _pyproject(text: str) -> list[tuple[str, str]]:
    data = tomllib.loads(text)
    project = data.get("project") or {}
    out: list[tuple[str, str]] = []
    lic = project.get("license")
    if isinstance(lic, str):
        out.append(("project.license", lic))
    elif isinstance(lic, dict) and isinstance(lic.get("text"), str):
        out.append(("project.license", lic["text"]))
    out += [("classifier", c) for c in project.get("classifiers") or [] if str(c).startswith("License ::")]
    poetry = ((data.get("tool") or {}).get("poetry") or {}).get("license")
    if isinstance(poetry, str):
        out.append(("tool.poetry.license", poetry))
    return out


def _setup_cfg(text: str) -> list[tuple[str, str]]:
    cp = configparser.RawConfigParser()
    cp.read_string(text)
    if not cp.has_section("metadata"):
        return []
    out: list[tuple[str, str]] = []
    lic = cp.get("metadata", "license", fallback="").strip()
    if lic:
        out.append(("metadata.license", lic))
    for c in cp.get("metadata", "classifiers", fallback="").splitlines():
        if c.strip().startswith("License ::"):
            out.append(("classifier", c.strip()))
    return out


def _package_json(text: str) -> list[tuple[str, str]]:
    data = json.loads(text)
    if not isinstance(data, dict):
        return []
    out: list[tuple[str, str]] = []
    lic = data.get("license")
    if isinstance(lic, dict):
        lic = lic.get("type")
    if isinstance(lic, str):
        out.append(("license", lic))
    for item in data.get("licenses") or []:
        t = item.get("type") if isinstance(item, dict) else item
        if isinstance(t, str):
            out.append(("licenses", t))
    return out


def _cargo(text: str) -> list[tuple[str, str]]:
    lic = (tomllib.loads(text).get("package") or {}).get("license")
    return [("package.license", lic)] if isinstance(lic, str) else []


_READERS: dict[str, Callable[[str], list[tuple[str, str]]]] = {
    "pkg-info": _pkg_info,
    "pyproject.toml": _pyproject,
    "setup.cfg": _setup_cfg,
    "package.json": _package_json,
    "cargo.toml": _cargo,
}


def metadata_evidence(path: str, text: str) -> list[Evidence]:
    """What one package metadata file says, as evidence (an unreadable file: one ``NOASSERTION``)."""
    name = path.rsplit("/", 1)[-1].lower()
    try:
        fields = _READERS[name](text)
    except (ValueError, configparser.Error, AttributeError, TypeError):  # TOMLDecodeError is a ValueError
        return [Evidence("metadata", f"{path}:unreadable", NOASSERTION)]
    out = []
    seen: Counter = Counter()
    for fld, raw in fields:
        i = seen[fld]
        seen[fld] += 1
        value = _classifier(raw) if fld.lower() == "classifier" else name_to_spdx(raw)
        if value is None and len(raw) > 200:  # a whole licence text pasted into the field
            matched = match_text(raw)
            value = " AND ".join(matched) if matched else None
        where = f"{path}:{fld}[{i}]" if fld.lower() == "classifier" else f"{path}:{fld}"
        out.append(Evidence("metadata", where, value or NOASSERTION))
    return out


def is_licence_file(path: str) -> bool:
    """A root licence file, or one of a REUSE-style root ``LICENSES/`` folder."""
    if "/" in path:
        folder, _, rest = path.partition("/")
        return folder.lower() == "licenses" and "/" not in rest
    stem = re.split(r"[.\-_]", path.lower(), maxsplit=1)[0]
    return stem in LICENCE_STEMS


def is_metadata_file(path: str) -> bool:
    return "/" not in path and path.lower() in METADATA_FILES


@dataclass
class LicenceScanner:
    """Collects a repository's evidence while its files go by once; holds only the root licence and
    metadata files' evidence and a count of header expressions, never the repository's text."""

    evidence: list[Evidence] = field(default_factory=list)
    headers: Counter = field(default_factory=Counter)
    first_header_path: dict[str, str] = field(default_factory=dict)

    def wants(self, path: str) -> bool:
        """Is this a file the scanner reads even when the rules reject it (a ``PKG-INFO`` is generated)?"""
        return is_licence_file(path) or is_metadata_file(path)

    def see(self, path: str, size: int, text: str | None, read: Callable[[], bytes], kept: bool) -> None:
        """One file: ``text`` when the rules kept it; ``read`` gives its bytes when a root licence or
        metadata file was rejected (read at most once more by the caller's cache)."""
        if self.wants(path):
            if text is None:
                text = self._read(path, size, read)
            if text is not None:
                self._root_file(path, text)
        if kept and text is not None:
            for m in _SPDX_HEADER.finditer(text[:HEADER_CHARS]):
                raw = re.sub(r"\s*(\*/|-->|#\}|\"\"\"|'''|;)\s*$", "", m.group(1)).strip()
                expr = parse_expression(raw) or NOASSERTION
                self.headers[expr] += 1
                self.first_header_path.setdefault(expr, path)

    def _read(self, path: str, size: int, read: Callable[[], bytes]) -> str | None:
        if size > MAX_LICENCE_FILE_BYTES:
            self.evidence.append(
                Evidence("licence_file" if is_licence_file(path) else "metadata", path, NOASSERTION)
            )
            return None
        try:
            return read().decode("utf-8", errors="replace")
        except OSError:
            return None

    def _root_file(self, path: str, text: str) -> None:
        if is_licence_file(path):
            found = match_text(text)
            self.evidence += [Evidence("licence_file", path, f) for f in found]
            if not found and not path.lower().startswith("notice"):  # a NOTICE is attribution, not a licence
                self.evidence.append(Evidence("licence_file", path, NOASSERTION))
        else:
            self.evidence += metadata_evidence(path, text)

    def result(self) -> RepositoryLicence:
        ev = list(self.evidence)
        ev += [Evidence("header", self.first_header_path[h], h, n) for h, n in sorted(self.headers.items())]
        return reconcile(ev)
