"""Licence classes: what a version may allow or exclude, derived from a document's licence id.

The build stores a document's licence (an SPDX expression) and its class and never drops a document
for its licence; which classes a training run may use is a version's selection. Classes, least to most
restrictive: ``public_domain``, ``permissive``, ``weak_copyleft``, ``strong_copyleft``,
``noncommercial``, ``proprietary``; outside the order ``unknown`` (no licence declared, an id not in
the table, ``NOASSERTION``) and ``none`` (``NONE``: all rights reserved, not "we do not know"). ``OR``
takes the least restrictive alternative, ``AND`` the most restrictive part. See docs/code.md
("Licences") and docs/versions.md ("Selections").
"""

from __future__ import annotations

import re

#: classes from least to most restrictive; ``unknown`` is outside the order (it is never "less" than a
#: known class, so ``OR`` with an unknown alternative keeps the known one)
LICENCE_CLASSES: tuple[str, ...] = (
    "public_domain",
    "permissive",
    "weak_copyleft",
    "strong_copyleft",
    "noncommercial",
    "proprietary",
)
UNKNOWN = "unknown"
#: a repository with no licence anywhere (:mod:`corpus.code.licence_detect` writes SPDX's ``NONE``)
NONE = "none"
#: every class a selection may name
ALL_CLASSES: tuple[str, ...] = (*LICENCE_CLASSES, UNKNOWN, NONE)

_EXACT: dict[str, str] = {
    "CC0-1.0": "public_domain",
    "Unlicense": "public_domain",
    "WTFPL": "public_domain",
    "0BSD": "public_domain",
    "PDDL-1.0": "public_domain",
    "MIT": "permissive",
    "MIT-0": "permissive",
    "ISC": "permissive",
    "Zlib": "permissive",
    "Apache-2.0": "permissive",
    "Apache-1.1": "permissive",
    "PSF-2.0": "permissive",
    "Python-2.0": "permissive",
    "BSL-1.0": "permissive",
    "PostgreSQL": "permissive",
    "X11": "permissive",
    "OFL-1.1": "permissive",
    "ODC-By-1.0": "permissive",
    "ODbL-1.0": "strong_copyleft",
    "proprietary": "proprietary",
    "LicenseRef-proprietary": "proprietary",
}
#: families by prefix, checked in order (the longest prefixes first where they overlap)
_PREFIX: tuple[tuple[str, str], ...] = (
    ("CC-BY-NC", "noncommercial"),
    ("CC-BY-SA", "strong_copyleft"),
    ("CC-BY-ND", "proprietary"),
    ("CC-BY", "permissive"),
    ("BSD-", "permissive"),
    ("Artistic-", "permissive"),
    ("LGPL-", "weak_copyleft"),
    ("MPL-", "weak_copyleft"),
    ("EPL-", "weak_copyleft"),
    ("CDDL-", "weak_copyleft"),
    ("AGPL-", "strong_copyleft"),
    ("GPL-", "strong_copyleft"),
    ("GFDL-", "strong_copyleft"),
)


def licence_class_of_id(spdx_id: str) -> str:
    """The class of one SPDX licence id (``WITH`` exceptions keep the licence's class)."""
    lid = spdx_id.strip().split(" WITH ")[0].strip().rstrip("+")
    if lid in _EXACT:
        return _EXACT[lid]
    for prefix, cls in _PREFIX:
        if lid.startswith(prefix):
            return cls
    return UNKNOWN


def _restrictiveness(cls: str) -> int:
    return LICENCE_CLASSES.index(cls)


def licence_class(expression: str) -> str:
    """The class of an SPDX expression: ``OR`` takes the least restrictive known alternative, ``AND``
    the most restrictive part; parentheses group. ``unknown`` for an empty or unrecognised licence,
    ``none`` for ``NONE`` (no licence at all)."""
    if (expression or "").strip() == "NONE":
        return NONE
    tokens = re.findall(r"\(|\)|[^\s()]+(?:\s+WITH\s+[^\s()]+)?", expression or "")
    pos = 0

    def term() -> str:
        nonlocal pos
        if pos < len(tokens) and tokens[pos] == "(":
            pos += 1
            cls = disjunction()
            if pos < len(tokens) and tokens[pos] == ")":
                pos += 1
            return cls
        if pos >= len(tokens):
            return UNKNOWN
        pos += 1
        return licence_class_of_id(tokens[pos - 1])

    def conjunction() -> str:
        nonlocal pos
        parts = [term()]
        while pos < len(tokens) and tokens[pos].upper() == "AND":
            pos += 1
            parts.append(term())
        if UNKNOWN in parts:
            return UNKNOWN  # an unknown obligation could be anything
        return max(parts, key=_restrictiveness)

    def disjunction() -> str:
        nonlocal pos
        options = [conjunction()]
        while pos < len(tokens) and tokens[pos].upper() == "OR":
            pos += 1
            options.append(conjunction())
        known = [c for c in options if c != UNKNOWN]
        return min(known, key=_restrictiveness) if known else UNKNOWN

    return disjunction() if tokens else UNKNOWN
