"""What a licence text says: the SPDX expressions of the standard licences a text contains, as full
texts (:data:`TEXTS`, by distinctive passages), GNU notices (:data:`GNU_NOTICES`) and the exceptions
they grant (:data:`EXCEPTIONS`). Pure: a text in, sorted expressions out; used on a repository's root
licence files and READMEs, on file headers and on metadata fields by :mod:`corpus.code.licence_detect`.
A text nothing matches gives no expression, never a guessed one. Forms and limits: docs/code.md
("Licences").
"""

from __future__ import annotations

import re
from dataclasses import dataclass


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
    # the title line may be missing (warcio's copy starts at "Version 2.0, January 2004")
    LicenceText(
        "Apache-2.0",
        ("version 2 0 january 2004", "terms and conditions for use reproduction and distribution"),
    ),
    LicenceText("Apache-2.0", ("licensed under the apache license version 2 0",)),
    # the ASF's file header ("The ASF licenses this file to You under the Apache License, ...")
    LicenceText(
        "Apache-2.0",
        (
            "under the apache license version 2 0 the license you may not use this file except in compliance "
            "with the license",
        ),
    ),
    LicenceText("Apache-1.1", ("the apache software license version 1 1",)),
    LicenceText(
        "PSF-2.0",
        (
            "this license agreement is between the python software foundation psf and the individual or "
            "organization licensee",
        ),
    ),
    LicenceText("BSL-1.0", ("boost software license version 1 0",)),
    LicenceText("Artistic-2.0", ("the artistic license 2 0",)),
    LicenceText("CC0-1.0", ("cc0 1 0 universal", "statement of purpose")),
    # Creative Commons' own short notice for a work dedicated under CC0
    LicenceText(
        "CC0-1.0",
        (
            "dedicated all copyright and related and neighboring rights to this software to the public domain "
            "worldwide",
            "creativecommons org publicdomain zero 1 0",
        ),
    ),
    LicenceText("Unlicense", ("this is free and unencumbered software released into the public domain",)),
    LicenceText("WTFPL", ("do what the fuck you want to public license",)),
    # the three clauses, with or without the disclaimer before them (psycopg2 omits it)
    LicenceText(
        "Zlib",
        (
            "permission is granted to anyone to use this software for any purpose including commercial "
            "applications and to alter it and redistribute it freely",
            "the origin of this software must not be misrepresented",
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
    # a text told apart by a clause it lacks must reach its disclaimer (after every clause): a file
    # header cut at HEADER_CHARS is not a shorter licence
    LicenceText(
        "MIT-0",
        (
            "permission is hereby granted free of charge to any person obtaining a copy of this software",
            "the software is provided as is without warranty of any kind",
        ),
        ("the above copyright notice and this permission notice shall be included",),
    ),
    LicenceText(
        "ISC",
        (
            "permission to use copy modify and or distribute this software for any purpose with or without fee "
            "is hereby granted provided that the above copyright notice and this permission notice appear in all copies",
        ),
    ),
    # ISC's older wording ("modify, and distribute"), as shellingham and isoduration ship it
    LicenceText(
        "ISC",
        (
            "permission to use copy modify and distribute this software for any purpose with or without fee "
            "is hereby granted provided that the above copyright notice and this permission notice appear in all copies",
        ),
    ),
    LicenceText(
        "0BSD",
        (
            "permission to use copy modify and or distribute this software for any purpose with or without fee is hereby granted",
            "the software is provided as is and the author disclaims all warranties",
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
            "this software is provided by",
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

_GNU_NAME = r"gnu (?:(?P<family>lesser|library|affero) )?general public license"
_GNU_VERSION = r"(?:version|v) ?(?P<major>\d)(?: (?P<minor>\d))?"
_FSF = "as published by the free software foundation"
_GNU_LATER_GRANT = (
    r"(?: of (?:the|that|this) license)?"
    r"(?P<later> or at your option any later version| or any later version| or later)?"
)
#: the GNU grant in its three word orders (normalized); "as published by the Free Software Foundation" is
#: required, so a text that only names a GNU licence ("version 3 of the GNU General Public License", a
#: licence text's title) grants nothing
GNU_NOTICES: tuple[re.Pattern[str], ...] = (
    re.compile(rf"{_GNU_NAME} {_FSF}(?: either)? {_GNU_VERSION}{_GNU_LATER_GRANT}"),
    re.compile(rf"{_GNU_NAME} {_GNU_VERSION} {_FSF}{_GNU_LATER_GRANT}"),
    re.compile(rf"under the terms of {_GNU_VERSION} of the {_GNU_NAME} {_FSF}{_GNU_LATER_GRANT}"),
)
_GNU_FAMILY = {None: "GPL", "lesser": "LGPL", "library": "LGPL", "affero": "AGPL"}
GNU_LICENCES = {"GPL-1.0", "GPL-2.0", "GPL-3.0", "LGPL-2.0", "LGPL-2.1", "LGPL-3.0", "AGPL-3.0"}


@dataclass(frozen=True)
class LicenceException:
    """An exception to a GNU licence by its passage (normalized), and its SPDX id for each licence it
    amends: the id ScanCode's licence DB (shipped with ``license-expression``) gives that licence's
    exception; a licence without one keeps no ``WITH`` (an exception only adds permissions)."""

    passage: re.Pattern[str]
    ids: dict[str, str]  # licence id or family ("LGPL") -> exception id


EXCEPTIONS: tuple[LicenceException, ...] = (
    LicenceException(
        re.compile(r"special exception(?: [a-z]+){0,8} permission to link(?: [a-z]+){0,10} with the openssl"),
        {
            "LGPL-3.0-or-later": "LicenseRef-scancode-openssl-exception-lgpl3.0plus",
            "LGPL-2.0-or-later": "LicenseRef-scancode-openssl-exception-lgpl2.0plus",
            "LGPL": "LicenseRef-scancode-openssl-exception-lgpl",
            "GPL-2.0-only": "x11vnc-openssl-exception",
            "GPL-2.0-or-later": "LicenseRef-scancode-openssl-exception-gpl-2.0-plus",
            "GPL-3.0-or-later": "cryptsetup-OpenSSL-exception",
            "AGPL-3.0-only": "LicenseRef-scancode-openssl-exception-agpl-3.0",
            "AGPL-3.0-or-later": "LicenseRef-scancode-openssl-exception-agpl3.0plus",
        },
    ),
    LicenceException(
        re.compile(r"gcc runtime library exception version 3 1"),
        {"GPL-3.0-or-later": "GCC-exception-3.1", "GPL-3.0-only": "GCC-exception-3.1"},
    ),
)

_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def normalize(text: str) -> str:
    """Lower case, every run of non-alphanumerics (punctuation, line breaks, comment marks) one space."""
    return _NON_ALNUM.sub(" ", text.lower()).strip()


def without_scope(spdx_id: str) -> str:
    """A licence without its version scope: ``GPL-2.0-or-later`` and ``GPL-2.0-only`` are one licence."""
    return re.sub(r"(-only|-or-later|\+)$", "", spdx_id)


def match_text(text: str) -> list[str]:
    """The SPDX expressions of the standard licences a text contains, as full texts or notices (sorted,
    deduplicated; a GNU licence carries the ``WITH`` of an exception the text grants)."""
    norm = normalize(text)
    head = norm[: m.start()] if (m := _APPENDIX.search(norm)) else norm
    found: set[str] = set()
    for t in TEXTS:
        if all(p in norm for p in t.all_of) and not any(p in norm for p in t.none_of):
            later = any(p in head for p in t.or_later)
            found.add(t.spdx.replace("-only", "-or-later") if later else t.spdx)
    found |= gnu_notices(head)
    # a licence both granted "or later" and found as a bare text is granted "or later"
    found -= {f.replace("-or-later", "-only") for f in found if f.endswith("-or-later")}
    keys = {without_scope(f) for f in found}
    found = {f for f in found if not any(_SUBSUMES.get(k) == without_scope(f) for k in keys)}
    return sorted(_with_exceptions(f, norm) for f in found)


def gnu_notices(norm: str) -> set[str]:
    """The GNU licences a normalized text grants in a notice (``either version 3 ... or any later``)."""
    found = set()
    for pattern in GNU_NOTICES:
        for m in pattern.finditer(norm):
            licence = f"{_GNU_FAMILY[m['family']]}-{m['major']}.{m['minor'] or 0}"
            if licence in GNU_LICENCES:
                found.add(licence + ("-or-later" if m["later"] else "-only"))
    return found


def _with_exceptions(licence: str, norm: str) -> str:
    for exc in EXCEPTIONS:
        exc_id = exc.ids.get(licence) or exc.ids.get(licence.split("-")[0])
        if exc_id and exc.passage.search(norm):
            return f"{licence} WITH {exc_id}"
    return licence
