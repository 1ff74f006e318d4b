"""Licences from notices and metadata names (issue 36): a licence notice, a ``License:`` field and a
trove classifier each give an SPDX id and its class, exceptions stay as ``WITH``, and the evidence
reconciles as before (agreement gives one expression, disagreement a recorded conflict).

Every notice here is a real one, copied into ``licence_notices/`` (origins: its SOURCES.md), or read
from the shared archives in ../shared/data/code."""

from __future__ import annotations

import tarfile

import pytest

from corpus.code.licence_detect import (
    CLASSIFIERS,
    HEADER_CHARS,
    NOASSERTION,
    Evidence,
    metadata_evidence,
    name_to_spdx,
    parse_expression,
    reconcile,
)
from corpus.code.licence_texts import match_text
from corpus.select.licences import licence_class
from tests.code.test_licences import CODE, OWN_CODE, licence_of, standard, write_repo
from tests.conftest import ROOT

NOTICES = ROOT / "tests" / "code" / "licence_notices"
PSYCOPG2_NOTICE = (NOTICES / "psycopg2-LICENSE").read_text()
PSYCOPG2_PKG_INFO = (NOTICES / "psycopg2-PKG-INFO").read_text()
OPENSSL_LGPL3 = "LicenseRef-scancode-openssl-exception-lgpl3.0plus"


def from_archive(archive: str, member: str) -> str:
    with tarfile.open(CODE / archive) as t:
        return t.extractfile(member).read().decode()


def metadata_alone(field: str) -> Evidence:
    [e] = [
        e for e in metadata_evidence("PKG-INFO", PSYCOPG2_PKG_INFO) if e.where.startswith(f"PKG-INFO:{field}")
    ]
    return e


# -- psycopg2 (the case): each source alone, then together --------------------------------------
def test_psycopg2s_notice_alone_is_lgpl_3_or_later_with_its_openssl_exception():
    # the zlib-style licence its LICENSE offers for some files is found too; AND keeps the LGPL's class
    assert match_text(PSYCOPG2_NOTICE) == [f"LGPL-3.0-or-later WITH {OPENSSL_LGPL3}", "Zlib"]
    lic = reconcile([Evidence("licence_file", "LICENSE", v) for v in match_text(PSYCOPG2_NOTICE)])
    assert (lic.expression, lic.licence_class) == (
        f"LGPL-3.0-or-later WITH {OPENSSL_LGPL3} AND Zlib",
        "weak_copyleft",
    )


@pytest.mark.parametrize("field", ["License", "Classifier"])
def test_psycopg2s_license_field_or_classifier_alone_is_the_lgpl_of_any_version(field):
    evidence = metadata_alone(field)
    assert evidence.value == "family:LGPL"  # "LGPL with exceptions" names no version and no exception
    lic = reconcile([evidence])
    assert (lic.expression, lic.licence_class, lic.decided_by) == (
        "LGPL-2.0-or-later",
        "weak_copyleft",
        "metadata",
    )


def test_psycopg2s_notice_field_and_classifier_together_are_the_notice_without_conflicts(tmp_path):
    files = {"LICENSE": PSYCOPG2_NOTICE, "PKG-INFO": PSYCOPG2_PKG_INFO, "pkg/tiers.py": OWN_CODE}
    lic = licence_of(write_repo(tmp_path / "psycopg2", files))
    assert lic.expression == f"LGPL-3.0-or-later WITH {OPENSSL_LGPL3} AND Zlib"
    assert (lic.licence_class, lic.decided_by, lic.conflicts) == ("weak_copyleft", "licence_file", ())
    assert {(e.where, e.value) for e in lic.evidence if e.kind == "metadata"} == {
        ("PKG-INFO:License", "family:LGPL"),
        ("PKG-INFO:Classifier[0]", "family:LGPL"),
    }


# -- notice forms, each on a real notice -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("notice", "expected"),
    [
        # "either version 3 of the License, or (at your option) any later version"
        ("autocommand-errors.py.txt", ["LGPL-3.0-or-later"]),
        # "under the terms of version 2.1 of the GNU Lesser General Public License as published by ..."
        ("libseccomp-copyright.txt", ["LGPL-2.1-only"]),
        # "either version 3, or (at your option) any later version" + the GCC Runtime Library Exception
        ("scipy-libgfortran-notice.txt", ["GPL-3.0-or-later WITH GCC-exception-3.1"]),
        ("pyarrow-dataset.py-header.txt", ["Apache-2.0"]),  # "The ASF licenses this file to you under ..."
        ("warcio-LICENSE-head", ["Apache-2.0"]),  # the Apache text without its title line
        ("termcolor.py-header.txt", ["MIT"]),
        ("shellingham-LICENSE", ["ISC"]),  # "modify, and distribute"
        ("pathlib_abc-LICENSE.txt", ["PSF-2.0"]),  # the agreement without its title
        ("numpy-splitmix64-LICENSE.md", ["CC0-1.0"]),  # Creative Commons' CC0 notice
    ],
)
def test_each_notice_form_gives_its_spdx_id(notice, expected):
    assert match_text((NOTICES / notice).read_text()) == expected


def test_a_gnu_notice_in_a_file_header_grants_or_later():
    header = from_archive("chardet-5.2.0.tar.gz", "chardet-5.2.0/chardet/__init__.py")[:HEADER_CHARS]
    assert "either\n# version 2.1 of the License, or (at your option) any later version" in header
    assert match_text(header) == ["LGPL-2.1-or-later"]


def test_naming_a_gnu_licence_without_the_fsf_grant_is_no_notice():
    # the LGPL 3 text names "version 3 of the GNU General Public License"; a text's title names a version
    assert match_text(standard("LGPL-3.0-only")) == ["LGPL-3.0-only"]
    assert match_text("compatible with version 3 of the GNU General Public License") == []
    assert match_text("GNU GENERAL PUBLIC LICENSE\nVersion 2, June 1991") == ["GPL-2.0-only"]


def test_a_licence_told_apart_by_a_missing_clause_is_not_read_from_a_header_cut_before_its_end():
    meta = from_archive("mkdocs-1.6.1.tar.gz", "mkdocs-1.6.1/mkdocs/utils/meta.py")
    assert match_text(meta[:HEADER_CHARS]) == ["BSD-3-Clause"]
    cut = meta[: meta.index("3. Neither the name")]  # BSD-2-Clause is BSD-3-Clause without clause 3
    assert match_text(cut) == []
    mit = (NOTICES / "termcolor.py-header.txt").read_text()
    assert match_text(mit[: mit.index("The above copyright notice")]) == []  # not MIT-0


# -- metadata names ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "expected"),
    [  # License: fields as the venv's packages write them (psycopg2, protobuf, justext, greenback, ...)
        ("LGPL with exceptions", "family:LGPL"),
        ("3-Clause BSD License", "BSD-3-Clause"),
        ("The BSD 2-Clause License", "BSD-2-Clause"),
        ("Apache Software License 2.0", "Apache-2.0"),
        ("Your choice of MIT or Apache License 2.0", "MIT OR Apache-2.0"),
        ("MIT -or- Apache License 2.0", "MIT OR Apache-2.0"),
        ("Artistic License", "family:Artistic"),
        ("GPLv2+", "GPL-2.0-or-later"),  # "+" is the "or later"
        ("LGPL 2.1", "LGPL-2.1-only"),
        (
            "GNU Lesser General Public License v3 or later (LGPLv3+)",
            "LGPL-3.0-or-later",
        ),  # a classifier's name
        ("GPL-2.0+ WITH Classpath-exception-2.0", "GPL-2.0-or-later WITH Classpath-exception-2.0"),
        ("MIT or a licence of my own", None),  # a part not recognised: the whole is not
    ],
)
def test_free_text_license_fields_map_to_spdx(field, expected):
    assert name_to_spdx(field) == expected


def test_a_notice_in_a_license_field_is_read():
    evidence = metadata_evidence("PKG-INFO", (NOTICES / "python-daemon-PKG-INFO").read_text())
    # "... as published by the Free Software Foundation; version 3 of that license or any later version"
    assert [(e.where, e.value) for e in evidence] == [
        ("PKG-INFO:License", "GPL-3.0-or-later"),
        ("PKG-INFO:Classifier[0]", "family:Apache"),
    ]


def test_every_license_classifier_maps_to_an_spdx_id_a_family_or_no_evidence():
    for name, value in CLASSIFIERS.items():
        assert value is None or value.startswith("family:") or parse_expression(value) == value, name
    pkg = "Name: x\nClassifier: License :: OSI Approved\nClassifier: License :: Freeware\n\n"
    # a category names no licence; a licence SPDX has no id for is unrecognised
    assert [(e.where, e.value) for e in metadata_evidence("PKG-INFO", pkg)] == [
        ("PKG-INFO:Classifier[0]", NOASSERTION)
    ]


# -- reconciliation ----------------------------------------------------------------------------------------
def test_a_versionless_gnu_name_takes_the_version_the_headers_give_it():
    family = Evidence("metadata", "PKG-INFO:License", "family:LGPL")
    header = Evidence("header", "chardet/__init__.py", "LGPL-2.1-or-later", 26)
    other = Evidence("header", "vendored.py", "MIT", 1)
    lic = reconcile([family, header, other])
    assert (lic.expression, lic.decided_by) == ("LGPL-2.1-or-later", "header")
    assert [e.where for e in lic.conflicts] == ["vendored.py"]


def test_an_exception_granted_beside_a_licence_text_joins_it():
    # COPYING.LESSER (the LGPL 3 text, "-only" alone) and a README with psycopg2's notice
    evidence = [
        Evidence("licence_file", "COPYING.LESSER", "LGPL-3.0-only"),
        Evidence("readme", "README", f"LGPL-3.0-or-later WITH {OPENSSL_LGPL3}"),
    ]
    assert reconcile(evidence).expression == f"LGPL-3.0-or-later WITH {OPENSSL_LGPL3}"
    # metadata naming the licence both with and without the exception (torch) adds none
    files = [
        Evidence("licence_file", "LICENSE", "Apache-2.0"),
        Evidence("licence_file", "LICENSE-MIT", "MIT"),
    ]
    torch = Evidence(
        "metadata", "PKG-INFO:License-Expression", "Apache-2.0 AND Apache-2.0 WITH LLVM-exception"
    )
    assert reconcile([*files, torch]).expression == "Apache-2.0 AND MIT"


def test_a_readme_notice_decides_without_a_licence_file_or_metadata(tmp_path):
    readme = "# pkg\n\nA package.\n\n## Licence\n\n" + (NOTICES / "autocommand-errors.py.txt").read_text()
    lic = licence_of(write_repo(tmp_path / "r", {"README.md": readme, "pkg/tiers.py": OWN_CODE}))
    assert (lic.expression, lic.licence_class, lic.decided_by) == (
        "LGPL-3.0-or-later",
        "weak_copyleft",
        "readme",
    )


def test_header_notices_are_counted_and_one_that_disagrees_is_a_conflict(tmp_path):
    mit = (NOTICES / "termcolor.py-header.txt").read_text()
    files = {f"pkg/m{i}.py": mit + OWN_CODE for i in range(3)}
    files["pkg/vendored.py"] = (NOTICES / "autocommand-errors.py.txt").read_text()
    lic = licence_of(write_repo(tmp_path / "h", {**files, "LICENSE": standard("MIT")}))
    assert [(e.where, e.value, e.files) for e in lic.evidence if e.kind == "header"] == [
        ("pkg/m0.py", "MIT", 3),
        ("pkg/vendored.py", "LGPL-3.0-or-later", 1),
    ]
    assert (lic.expression, [e.where for e in lic.conflicts]) == ("MIT", ["pkg/vendored.py"])
    assert licence_class(lic.expression) == "permissive"  # headers never outvote the licence file
