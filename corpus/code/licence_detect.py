"""A repository's licence as an SPDX expression, from its own files, with the evidence and conflicts.

The build stores what the repository says about itself; whether it may be trained on is a version's
decision (:mod:`corpus.select.selection`), from the class :func:`corpus.select.licences.licence_class`
gives the expression. Evidence, read while ingest reads the repository once (:class:`LicenceScanner`):
root licence files and READMEs read by :func:`corpus.code.licence_texts.match_text` (full texts and
notices), root package metadata (through :data:`ALIASES` and :data:`CLASSIFIERS`), and the headers of
kept files (``SPDX-License-Identifier``, else a notice). :func:`reconcile` turns it into one
expression; every piece of evidence that names other licences is a recorded conflict, never resolved
silently, and every limit of the matcher ends in ``NOASSERTION`` (class ``unknown``), never in a class
the text does not support.
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

from corpus.code.licence_texts import GNU_LICENCES, match_text, normalize, without_scope
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
_COMMENT_END = re.compile(r"\s*(\*/|-->|#\}|\"\"\"|'''|;)\s*$")
#: a header without one of these words (lower case) holds no notice the matcher knows (GNU, Apache, MPL:
#: "License"; MIT, ISC, zlib: "Permission"; BSD: "Redistribution"; CC0: "public domain")
NOTICE_WORDS = ("licen", "permission", "redistribution", "public domain")
_LICENSING = get_spdx_licensing()


#: free-text licence names (normalized; also tried without a leading "the" and a trailing "license") ->
#: SPDX expression, or ``family:NAME`` for a name without a version; GNU short names ("GPLv3+", "LGPL 2.1")
#: are read by :data:`_GNU_SHORT`, a classifier's name by :data:`CLASSIFIERS`
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
    "gpl": "family:GPL",
    "gnu gpl": "family:GPL",
    "psf": "PSF-2.0",
    "psf license": "PSF-2.0",
    "python software foundation license": "PSF-2.0",
    "public domain": "family:public-domain",
    "unlicense": "Unlicense",
    "the unlicense": "Unlicense",
    "zlib": "Zlib",
    "zlib license": "Zlib",
}
#: every ``License ::`` trove classifier PyPI publishes (trove-classifiers, 2026-01, the deprecated ones
#: included), by its last segment (normalized): an SPDX id, a family, or None for a category that names
#: no licence (``OSI Approved``, ``DFSG approved``: no evidence). One not listed (``Freeware``,
#: ``Other/Proprietary License``, one SPDX has no id for) is ``NOASSERTION``.
CLASSIFIERS: dict[str, str | None] = {
    "osi approved": None,
    "dfsg approved": None,
    "aladdin free public license afpl": "Aladdin",
    "cc0 1 0 universal cc0 1 0 public domain dedication": "CC0-1.0",
    "cecill b free software license agreement cecill b": "CECILL-B",
    "cecill c free software license agreement cecill c": "CECILL-C",
    "eiffel forum license efl": "family:EFL",
    "eiffel forum license": "family:EFL",
    "netscape public license npl": "family:NPL",
    "nokia open source license nokos": "Nokia",
    "nokia open source license": "Nokia",
    "academic free license afl": "family:AFL",
    "apache software license": "family:Apache",
    "apple public source license": "family:APSL",
    "artistic license": "family:Artistic",
    "attribution assurance license": "AAL",
    "bsd license": "family:BSD",
    "blue oak model license blueoak 1 0 0": "BlueOak-1.0.0",
    "boost software license 1 0 bsl 1 0": "BSL-1.0",
    "cea cnrs inria logiciel libre license version 2 1 cecill 2 1": "CECILL-2.1",
    "cmu license mit cmu": "MIT-CMU",
    "common development and distribution license 1 0 cddl 1 0": "CDDL-1.0",
    "common public license": "CPL-1.0",
    "eclipse public license 1 0 epl 1 0": "EPL-1.0",
    "eclipse public license 2 0 epl 2 0": "EPL-2.0",
    "educational community license version 2 0 ecl 2 0": "ECL-2.0",
    "european union public licence 1 0 eupl 1 0": "EUPL-1.0",
    "european union public licence 1 1 eupl 1 1": "EUPL-1.1",
    "european union public licence 1 2 eupl 1 2": "EUPL-1.2",
    "gnu affero general public license v3": "AGPL-3.0-only",
    "gnu affero general public license v3 or later agplv3": "AGPL-3.0-or-later",
    "gnu free documentation license fdl": "family:GFDL",
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
    "historical permission notice and disclaimer hpnd": "HPND",
    "ibm public license": "IPL-1.0",
    "intel open source license": "Intel",
    "isc license iscl": "ISC",
    "mit license": "MIT",
    "mit no attribution license mit 0": "MIT-0",
    "miros license miros": "MirOS",
    "motosoto license": "Motosoto",
    "mozilla public license 1 0 mpl": "MPL-1.0",
    "mozilla public license 1 1 mpl 1 1": "MPL-1.1",
    "mozilla public license 2 0 mpl 2 0": "MPL-2.0",
    "mulan permissive software license v2 mulanpsl 2 0": "MulanPSL-2.0",
    "nasa open source agreement v1 3 nasa 1 3": "NASA-1.3",
    "nethack general public license": "NGPL",
    "open group test suite license": "OGTSL",
    "open software license 3 0 osl 3 0": "OSL-3.0",
    "postgresql license": "PostgreSQL",
    "python license cnri python license": "CNRI-Python",
    "python software foundation license": "PSF-2.0",
    "qt public license qpl": "QPL-1.0",
    "ricoh source code public license": "RSCPL",
    "sil open font license 1 1 ofl 1 1": "OFL-1.1",
    "sleepycat license": "Sleepycat",
    "sun industry standards source license sissl": "SISSL",
    "sun public license": "SPL-1.0",
    "the unlicense unlicense": "Unlicense",
    "universal permissive license upl": "UPL-1.0",
    "university of illinois ncsa open source license": "NCSA",
    "vovida software license 1 0": "VSL-1.0",
    "w3c license": "W3C",
    "x net license": "Xnet",
    "zero clause bsd 0bsd": "0BSD",
    "zope public license": "family:ZPL",
    "zlib libpng license": "Zlib",
    "public domain": "family:public-domain",
}
#: a GNU licence named without a version may be used under any version ever published (GPL-2.0 s. 9,
#: GPL-3.0 s. 14, LGPL-2.1 s. 13, GFDL s. 10): SPDX's "or later" of the family's first version, so the
#: name decides (and keeps its class) when nothing names a version; other families never decide
GNU_ANY_VERSION = {
    "GPL": "GPL-1.0-or-later",
    "LGPL": "LGPL-2.0-or-later",
    "GFDL": "GFDL-1.1-or-later",
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


#: a GNU licence's short name, lower case and not normalized ("+" is its "or later")
_GNU_SHORT = re.compile(
    r"(?:gnu\s+)?(?P<family>a|l)?gpl\s*-?\s*v?(?P<major>\d)(?:\.(?P<minor>\d))?"
    r"(?P<later>\s*\+|\s+or\s+later|-or-later)?"
)
#: "LGPL with exceptions" names no exception: the licence stays, an unnamed exception cannot be an id
_UNNAMED_EXCEPTION = re.compile(r"\s+with\s+(?:linking\s+|classpath\s+)?exceptions?$", re.I)
_CHOICE = re.compile(r"^(?:your choice of|dual licensed under|either)\s+", re.I)


def name_to_spdx(text: str) -> str | None:
    """A free-text licence name as an expression (or ``family:NAME``); None when not recognised.
    Names joined by one kind of ``or``/``and`` ("MIT -or- Apache License 2.0") are their expression
    when every one is recognised and names a licence exactly."""
    if "\n" in text.strip():
        return ALIASES.get(normalize(text))
    name = _UNNAMED_EXCEPTION.sub("", text.strip())
    if (expr := _one_name(name)) is not None:
        return expr
    parts = re.split(r"\s+-?(or|and)-?\s+", _CHOICE.sub("", name), flags=re.I)
    names, operators = parts[::2], {op.upper() for op in parts[1::2]}
    exprs = [_one_name(n) for n in names]
    if len(operators) != 1 or not all(e and not e.startswith("family:") for e in exprs):
        return None
    return parse_expression(f" {operators.pop()} ".join(f"({e})" for e in exprs))


def _one_name(name: str) -> str | None:
    if (expr := parse_expression(name)) is not None:
        return expr
    if m := _GNU_SHORT.fullmatch(name.lower()):
        family = {"a": "AGPL", "l": "LGPL", None: "GPL"}[m["family"]]
        licence = f"{family}-{m['major']}.{m['minor'] or 0}"
        if licence in GNU_LICENCES:
            return licence + ("-or-later" if m["later"] else "-only")
    norm = normalize(name)
    for n in (norm, re.sub(r"^the | licen[cs]e$", "", norm)):
        if n in ALIASES:
            return ALIASES[n]
        if CLASSIFIERS.get(n):
            return CLASSIFIERS[n]
    return None


def expression_keys(expression: str) -> set[str]:
    """The licences an expression names, each without its version scope (``WITH`` exceptions dropped)."""
    try:
        parsed = _LICENSING.parse(expression)
    except ExpressionError:
        return {expression}
    keys = set()
    for sym in _LICENSING.license_symbols(parsed, decompose=True):
        if not getattr(sym, "is_exception", False):
            keys.add(without_scope(sym.key))
    return keys


@dataclass(frozen=True)
class Evidence:
    """One thing a repository says about its licence. ``value`` is an SPDX expression, ``family:NAME``
    (a name without a version), or ``NOASSERTION`` (a licence file no text matched)."""

    kind: str  # "licence_file", "metadata", "readme", "header"; "detected" beside a declared licence
    where: str  # path, ``path:field``, or for headers the first path carrying it
    value: str
    files: int = 1  # headers: how many kept files carry it

    def to_list(self) -> list[Any]:
        return [self.kind, self.where, self.value, self.files]


def agrees(evidence: Evidence, expression: str) -> bool:
    """Does the evidence name the licences of the expression? Metadata describes the whole package, so
    it must name the same ones; a licence file, a README or a header may be one part (``LICENSE-MIT`` of
    ``MIT OR Apache-2.0``); a family agrees when one of the licences is of that family."""
    keys = expression_keys(expression)
    if evidence.value.startswith("family:"):
        fam = evidence.value.split(":", 1)[1]
        if fam == "public-domain":
            return licence_class(expression) == "public_domain"
        return any(k == fam or k.startswith(fam + "-") for k in keys)
    if evidence.kind in ("licence_file", "readme", "header"):
        return expression_keys(evidence.value) <= keys
    return expression_keys(evidence.value) == keys


_OR_LATER = re.compile(r"[A-Za-z0-9.\-]+-or-later")
_WITH = re.compile(r"([A-Za-z0-9.\-]+) WITH ([A-Za-z0-9.\-]+)")


def _refine(expression: str, evidence: list[Evidence]) -> str:
    """``X-only`` -> ``X-or-later`` where other evidence grants the same licence "or later", and ``X`` ->
    ``X WITH E`` where other evidence grants it only with an exception (a GNU text beside its notice)."""
    exact = [e.value for e in evidence if _expression(e)]
    for sym in sorted({sym for v in exact for sym in _OR_LATER.findall(v)}):
        expression = re.sub(rf"\b{re.escape(without_scope(sym))}-only\b", sym, expression)
    for value in exact:
        for licence, exc in _WITH.findall(value):
            bare = re.compile(rf"(?<![\w.\-]){re.escape(licence)}(?![\w.\-]| WITH)")
            if not bare.search(value):  # torch's metadata: Apache-2.0 and Apache-2.0 WITH LLVM-exception
                expression = bare.sub(f"{licence} WITH {exc}", expression)
    return expression


@dataclass(frozen=True)
class RepositoryLicence:
    """The reconciled licence of one repository and everything behind it (JSON: :meth:`to_dict`)."""

    expression: str
    decided_by: str  # "licence_file", "metadata", "readme", "header", "declared", "unrecognised", "none"
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
    found, readme, headers = (
        sorted({e.value for e in ev if e.kind == k and _expression(e)}) for k in _EXACT_KINDS
    )
    meta = {e.where: e for e in ev if e.kind == "metadata" and _expression(e)}
    meta_exprs = [meta[w].value for w in _metadata_rank(meta)]
    gnu = [e for e in ev if e.kind == "metadata" and e.value in _GNU_FAMILIES]
    if found:
        keys = set().union(*(expression_keys(f) for f in found))
        same = [m for m in meta_exprs if expression_keys(m) == keys]
        expression, decided = same[0] if same else _and(found), "licence_file"
    elif meta_exprs:
        expression, decided = meta_exprs[0], "metadata"
    elif gnu:
        expression, decided = _versionless_gnu(gnu, readme, headers)
    elif readme:
        expression, decided = _and(readme), "readme"
    elif headers:
        expression, decided = _and(headers), "header"
    elif ev:  # something said something, but nothing recognisable: not the same as no licence at all
        return RepositoryLicence(NOASSERTION, "unrecognised", tuple(ev))
    else:
        return RepositoryLicence(NONE, "none")
    expression = parse_expression(_refine(expression, ev)) or expression
    conflicts = tuple(e for e in ev if e.value != NOASSERTION and not agrees(e, expression))
    return RepositoryLicence(expression, decided, tuple(ev), conflicts)


_EXACT_KINDS = ("licence_file", "readme", "header")
_GNU_FAMILIES = {f"family:{name}" for name in GNU_ANY_VERSION}


def _versionless_gnu(names: list[Evidence], readme: list[str], headers: list[str]) -> tuple[str, str]:
    """A GNU licence named without a version (``License: LGPL``) decides with the version a README or
    the headers give it, else as "any version" (:data:`GNU_ANY_VERSION`)."""
    for exprs, kind in ((readme, "readme"), (headers, "header")):
        named = [x for x in exprs if all(agrees(n, x) for n in names)]
        if named:
            return _and(named), kind
    return _and(sorted({GNU_ANY_VERSION[n.value.split(":", 1)[1]] for n in names})), "metadata"


def _and(expressions: list[str]) -> str:
    return " AND ".join(f"({x})" if " " in x else x for x in expressions)


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
    return CLASSIFIERS.get(normalize(text.split("::")[-1]))


def _is_licence_classifier(text: str) -> bool:
    """A ``License ::`` classifier that names a licence (not a category such as ``OSI Approved``)."""
    key = normalize(text.split("::")[-1])
    return text.strip().startswith("License ::") and not (key in CLASSIFIERS and CLASSIFIERS[key] is None)


def _pkg_info(text: str) -> list[tuple[str, str]]:
    head = HeaderParser().parsestr(text.split("\n\n", 1)[0])
    out = [("License-Expression", v) for v in head.get_all("License-Expression") or []]
    out += [("License", v) for v in head.get_all("License") or [] if v.strip() and v.strip() != "UNKNOWN"]
    out += [("Classifier", v) for v in head.get_all("Classifier") or [] if _is_licence_classifier(v)]
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
    out += [("classifier", c) for c in project.get("classifiers") or [] if _is_licence_classifier(str(c))]
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
        if _is_licence_classifier(c):
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
        if value is None and fld.lower() != "classifier":  # a licence text or notice pasted into the field
            value = _and(match_text(raw)) or None
        where = f"{path}:{fld}[{i}]" if fld.lower() == "classifier" else f"{path}:{fld}"
        out.append(Evidence("metadata", where, value or NOASSERTION))
    return out


def spdx_header(head: str) -> list[str]:
    """The expressions of a file header's ``SPDX-License-Identifier`` lines (``NOASSERTION`` for one
    that does not parse)."""
    return [
        parse_expression(_COMMENT_END.sub("", m.group(1)).strip()) or NOASSERTION
        for m in _SPDX_HEADER.finditer(head)
    ]


def header_notice(head: str) -> list[str]:
    """The licences a file header's notice names; the matcher (a normalization and the table) runs only
    where one of :data:`NOTICE_WORDS` occurs (in one kept file in twelve of the shared archives)."""
    lower = head.lower()
    return match_text(head) if any(w in lower for w in NOTICE_WORDS) else []


def is_licence_file(path: str) -> bool:
    """A root licence file, or one of a REUSE-style root ``LICENSES/`` folder."""
    if "/" in path:
        folder, _, rest = path.partition("/")
        return folder.lower() == "licenses" and "/" not in rest
    stem = re.split(r"[.\-_]", path.lower(), maxsplit=1)[0]
    return stem in LICENCE_STEMS


def is_metadata_file(path: str) -> bool:
    return "/" not in path and path.lower() in METADATA_FILES


def is_readme(path: str) -> bool:
    return "/" not in path and path.lower().split(".", 1)[0] == "readme"


@dataclass
class LicenceScanner:
    """Collects a repository's evidence while its files go by once; holds only the root licence,
    README and metadata files' evidence and a count of header expressions, never the repository's text."""

    evidence: list[Evidence] = field(default_factory=list)
    headers: Counter = field(default_factory=Counter)
    first_header_path: dict[str, str] = field(default_factory=dict)

    def wants(self, path: str) -> bool:
        """Is this a file the scanner reads even when the rules reject it (a ``PKG-INFO`` is generated)?"""
        return is_licence_file(path) or is_metadata_file(path) or is_readme(path)

    def see(self, path: str, size: int, text: str | None, read: Callable[[], bytes], kept: bool) -> None:
        """One file: ``text`` when the rules kept it; ``read`` gives its bytes when a root licence,
        README or metadata file was rejected (read at most once more by the caller's cache)."""
        root = self.wants(path)
        if root:
            if text is None:
                text = self._read(path, size, read)
            if text is not None:
                self._root_file(path, text)
        if kept and text is not None:
            head = text[:HEADER_CHARS]
            # a root licence, README or metadata file is evidence of its own kind, not a header
            for expr in spdx_header(head) or ([] if root else header_notice(head)):
                self.headers[expr] += 1
                self.first_header_path.setdefault(expr, path)

    def _read(self, path: str, size: int, read: Callable[[], bytes]) -> str | None:
        if size > MAX_LICENCE_FILE_BYTES:
            if not is_readme(path):  # a README too large to read is no licence evidence
                kind = "licence_file" if is_licence_file(path) else "metadata"
                self.evidence.append(Evidence(kind, path, NOASSERTION))
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
        elif is_readme(path):  # most READMEs name no licence: only a match is evidence
            self.evidence += [Evidence("readme", path, f) for f in match_text(text)]
        else:
            self.evidence += metadata_evidence(path, text)

    def result(self) -> RepositoryLicence:
        ev = list(self.evidence)
        ev += [Evidence("header", self.first_header_path[h], h, n) for h, n in sorted(self.headers.items())]
        return reconcile(ev)
