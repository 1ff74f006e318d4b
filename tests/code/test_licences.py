"""Licences as values (issue 17 items 3 and 7): every shared archive gets the licence its own LICENSE /
COPYING file says, metadata that disagrees is recorded as a conflict, the default selection keeps
permissive code only, a version that allows weak copyleft needs no rebuild, and the data card shows
the code bucket with its licences and rejected files.

The matcher's own unit tests compose licence files from the matcher's table of standard passages
(:data:`corpus.code.licence_texts.TEXTS`) and the project's own files; the real archives are read
from ../shared/data/code, never copied."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from corpus.code.archive import archive_stem, repository_kind
from corpus.code.licence_detect import NOASSERTION, NONE, Evidence, metadata_evidence, reconcile
from corpus.code.licence_texts import TEXTS, match_text
from corpus.code.repository import read_repository
from corpus.code.rules import build_rules
from corpus.model.manifest import read_stage_manifest
from corpus.report.build_view import open_build
from corpus.report.gather import gather
from corpus.select.licences import licence_class
from tests.code.test_code_rules import READ_LIMITS, linked_inputs
from tests.conftest import ROOT, SHARED_DATA, run_corpus
from tests.stages.chain import docs, run_stage

CODE = SHARED_DATA / "code"
#: what each shared archive's own root licence file says (read by hand: its title, version line and
#: clauses), and the class that follows
EXPECTED = {
    "certifi-2024.8.30.tar.gz": ("MPL-2.0", "weak_copyleft"),  # the MPL 2.0 notice around ca-bundle.crt
    # the LGPL 2.1 text alone is -only; its files' headers grant 2.1 "or (at your option) any later version"
    "chardet-5.2.0.tar.gz": ("LGPL-2.1-or-later", "weak_copyleft"),
    "click-8.1.7.tar.gz": ("BSD-3-Clause", "permissive"),
    "gnureadline-8.2.10.tar.gz": ("GPL-3.0-only", "strong_copyleft"),
    "googleapis_common_protos-1.65.0.tar.gz": ("Apache-2.0", "permissive"),
    "idna-3.10.tar.gz": ("BSD-3-Clause", "permissive"),
    "jquery-3.7.1.tgz": ("MIT", "permissive"),
    "lodash-4.17.21.tgz": ("MIT", "permissive"),  # MIT, with a CC0 note for sample code in the docs
    "mkdocs-1.6.1.tar.gz": ("BSD-2-Clause", "permissive"),
    "niquests-3.11.0.tar.gz": ("Apache-2.0", "permissive"),
    "pathspec-0.12.1.tar.gz": ("MPL-2.0", "weak_copyleft"),
    "pip-24.2.tar.gz": ("MIT", "permissive"),
    # the GPL-2.0 text alone is -only; its PKG-INFO and pyproject say GPL-2.0-or-later
    "pylint-3.3.1.tar.gz": ("GPL-2.0-or-later", "strong_copyleft"),
    "requests-2.31.0.tar.gz": ("Apache-2.0", "permissive"),
    "requests-2.32.3.tar.gz": ("Apache-2.0", "permissive"),
    "six-1.16.0.tar.gz": ("MIT", "permissive"),
}
#: the build the selection and card tests share: one archive per class the issue names
BUILT = [
    "six-1.16.0.tar.gz",
    "click-8.1.7.tar.gz",
    "pathspec-0.12.1.tar.gz",
    "chardet-5.2.0.tar.gz",
    "gnureadline-8.2.10.tar.gz",
]
RULES = build_rules([])


def licence_of(path: Path):
    repo = read_repository(path, repository_kind(path), archive_stem(path), RULES, **READ_LIMITS)
    repo.close()
    return repo.licence


def standard(spdx: str) -> str:
    """A licence file made of the matcher's own passages for ``spdx``, wrapped and cased anew."""
    text = next(t for t in TEXTS if t.spdx == spdx)
    return "\n\n".join(p.upper().replace(" ", "\n  ", 3) for p in text.all_of)


def write_repo(d: Path, files: dict[str, str | bytes]) -> Path:
    for rel, data in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data.encode() if isinstance(data, str) else data)
    return d


OWN_CODE = (ROOT / "corpus" / "model" / "tiers.py").read_text()


# -- the shared archives -------------------------------------------------------------------------------
def test_every_shared_archive_is_in_the_expected_table():
    assert sorted(p.name for p in CODE.iterdir() if repository_kind(p)) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_archive_gets_the_licence_its_own_licence_file_says(name):
    lic = licence_of(CODE / name)
    assert (lic.expression, lic.licence_class) == EXPECTED[name]
    assert lic.decided_by == "licence_file"
    files = [e for e in lic.evidence if e.kind == "licence_file"]
    assert files and all("/" not in e.where for e in files), "the repository root's own file decides"


def test_metadata_that_disagrees_with_the_licence_file_is_a_recorded_conflict():
    lic = licence_of(CODE / "chardet-5.2.0.tar.gz")
    # LICENSE is the LGPL 2.1 text (its headers: 2.1 or later); its classifiers say "LGPLv2+" (2.0 or later)
    conflicts = sorted((e.where, e.value) for e in lic.conflicts)
    assert conflicts == [
        ("PKG-INFO:Classifier[0]", "LGPL-2.0-or-later"),
        ("setup.cfg:classifier[0]", "LGPL-2.0-or-later"),
    ]
    # "License: LGPL" names no version: it agrees with any LGPL and is no conflict
    assert ("metadata", "PKG-INFO:License", "family:LGPL") in {
        (e.kind, e.where, e.value) for e in lic.evidence
    }
    assert licence_of(CODE / "six-1.16.0.tar.gz").conflicts == ()


# -- the matcher and the reconciliation, on composed texts ---------------------------------------------
def test_a_licence_text_is_found_whatever_its_case_wrapping_and_punctuation():
    for t in TEXTS:
        assert t.spdx in match_text(standard(t.spdx)), t.spdx


def test_mit_without_its_notice_clause_is_mit_0_and_bsd_clauses_count():
    mit, mit_0 = (next(t for t in TEXTS if t.spdx == spdx) for spdx in ("MIT", "MIT-0"))
    assert match_text(mit.all_of[0]) == []  # the grant alone may be a text cut short
    assert match_text("\n".join(mit_0.all_of)) == ["MIT-0"]
    assert match_text(standard("BSD-3-Clause")) == ["BSD-3-Clause"]
    assert match_text(standard("BSD-2-Clause")) == ["BSD-2-Clause"]


def test_a_gnu_text_is_only_unless_a_grant_before_its_appendix_says_or_later():
    with tarfile.open(CODE / "pylint-3.3.1.tar.gz") as t:
        gpl2 = t.extractfile("pylint-3.3.1/LICENSE").read().decode()
    assert "any later version" in gpl2  # in the appendix of every GPL text: it grants nothing
    assert match_text(gpl2) == ["GPL-2.0-only"]
    grant = "This program is free software; you can redistribute it under the terms of the GNU General "
    grant += "Public License as published by the Free Software Foundation; either version 2 of the License, "
    grant += "or (at your option) any later version.\n\n"
    assert match_text(grant + gpl2) == ["GPL-2.0-or-later"]


def test_an_lgpl_shipped_with_the_gpl_it_amends_is_the_lgpl():
    both = standard("LGPL-3.0-only") + "\n\n" + standard("GPL-3.0-only")
    assert match_text(both) == ["LGPL-3.0-only"]


def test_metadata_names_are_read_from_each_package_format():
    pkg = "Metadata-Version: 2.4\nName: x\nLicense-Expression: MIT OR Apache-2.0\n"
    pkg += "Classifier: License :: OSI Approved :: BSD License\n\nbody\n"
    assert [(e.where, e.value) for e in metadata_evidence("PKG-INFO", pkg)] == [
        ("PKG-INFO:License-Expression", "MIT OR Apache-2.0"),
        ("PKG-INFO:Classifier[0]", "family:BSD"),
    ]
    py = '[project]\nlicense = {text = "Apache 2.0"}\n'
    assert [e.value for e in metadata_evidence("pyproject.toml", py)] == ["Apache-2.0"]
    assert [e.value for e in metadata_evidence("package.json", '{"license": "ISC"}')] == ["ISC"]
    assert [e.value for e in metadata_evidence("Cargo.toml", '[package]\nlicense = "MIT/Apache-2.0"\n')] == [
        "MIT OR Apache-2.0"
    ]
    assert [e.value for e in metadata_evidence("setup.cfg", "[metadata]\nlicense = GPL-2.0+\n")] == [
        "GPL-2.0-or-later"
    ]
    assert [e.value for e in metadata_evidence("package.json", "{not json")] == [NOASSERTION]


def test_two_licence_files_take_the_operator_a_metadata_expression_gives_them():
    ev = [
        Evidence("licence_file", "LICENSE-APACHE", "Apache-2.0"),
        Evidence("licence_file", "LICENSE-MIT", "MIT"),
    ]
    assert reconcile(ev).expression == "Apache-2.0 AND MIT"  # both apply, unless the package says OR
    lic = reconcile([*ev, Evidence("metadata", "Cargo.toml:package.license", "MIT OR Apache-2.0")])
    assert (lic.expression, lic.licence_class, lic.conflicts) == ("MIT OR Apache-2.0", "permissive", ())


def test_no_licence_at_all_is_none_and_an_unrecognised_one_is_unknown(tmp_path):
    bare = licence_of(write_repo(tmp_path / "bare", {"pkg/tiers.py": OWN_CODE}))
    assert (bare.expression, bare.licence_class) == (NONE, "none")
    own_readme = (ROOT / "README.md").read_text()
    odd = licence_of(write_repo(tmp_path / "odd", {"LICENSE": own_readme, "pkg/tiers.py": OWN_CODE}))
    assert (odd.expression, odd.licence_class, odd.decided_by) == (NOASSERTION, "unknown", "unrecognised")


def test_spdx_headers_decide_without_a_licence_file_and_disagreeing_ones_are_conflicts(tmp_path):
    files = {
        "a.py": "# SPDX-License-Identifier: Apache-2.0\n" + OWN_CODE,
        "b.py": "# SPDX-License-Identifier: Apache-2.0\n" + OWN_CODE,
        "c.c": "/* SPDX-License-Identifier: GPL-2.0+ */\n" + OWN_CODE,
    }
    lic = licence_of(write_repo(tmp_path / "h", files))
    assert lic.expression == "Apache-2.0 AND GPL-2.0-or-later" and lic.decided_by == "header"
    assert [(e.value, e.files) for e in lic.evidence] == [("Apache-2.0", 2), ("GPL-2.0-or-later", 1)]
    with_file = licence_of(write_repo(tmp_path / "hf", {**files, "LICENSE": standard("Apache-2.0")}))
    assert with_file.expression == "Apache-2.0"
    assert [(e.kind, e.where, e.value) for e in with_file.conflicts] == [
        ("header", "c.c", "GPL-2.0-or-later")
    ]


def test_a_declared_licence_wins_and_what_the_files_say_stays_as_a_conflict():
    lic = licence_of(CODE / "six-1.16.0.tar.gz").with_declared("Apache-2.0")
    assert (lic.expression, lic.decided_by, lic.declared) == ("Apache-2.0", "declared", "Apache-2.0")
    # its LICENSE, PKG-INFO, the MIT notice in three of its files' headers, and what was detected
    assert {e.kind for e in lic.conflicts} == {"licence_file", "metadata", "header", "detected"}


def test_classes_of_the_copyleft_families_and_of_no_licence():
    assert licence_class("GPL-2.0-or-later") == licence_class("AGPL-3.0-only") == "strong_copyleft"
    assert (
        licence_class("MPL-2.0")
        == licence_class("LGPL-2.1-only")
        == licence_class("EPL-2.0")
        == "weak_copyleft"
    )
    assert licence_class("NONE") == "none" and licence_class(NOASSERTION) == licence_class("") == "unknown"
    assert licence_class("Artistic-1.0-Perl OR GPL-1.0-or-later") == "permissive"  # perl-doc, as before


# -- a build: the documents, the default selection, a version, the card ---------------------------------
@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("licences")
    inputs = linked_inputs(root, BUILT)
    run_corpus("build", "--input", str(inputs), "--out", str(root / "b"), "--ranks", "2")
    return root


def code_rows(version_dir: Path) -> dict[str, tuple[str, str, bool]]:
    """{repository: (licence, class, selected)} over its documents (all of one repository agree)."""
    sql = "SELECT DISTINCT url, licence, licence_class, selected FROM docs WHERE tier = 'code'"
    rows = json.loads(run_corpus("query", "--json", str(version_dir), sql).stdout)
    out: dict[str, set] = {}
    for r in rows:
        repo = r["url"].split("/")[2]
        out.setdefault(repo, set()).add((r["licence"], r["licence_class"], r["selected"]))
    assert all(len(v) == 1 for v in out.values()), out
    return {k: next(iter(v)) for k, v in sorted(out.items())}


def test_each_document_carries_its_repositorys_licence_and_the_record_keeps_the_evidence(built):
    ingest = built / "b" / "stages" / "ingest"
    for d in docs(ingest):
        name = d.url.split("/")[2]
        assert d.license_hint == EXPECTED[name + ".tar.gz"][0]
        assert json.loads(d.annotation("ingest", "repo_licence").value)["decided_by"] == "licence_file"
    [record] = [json.loads(p.read_text()) for p in (ingest / "rejected_files").glob("chardet-*.json")]
    assert record["licence"]["expression"] == "LGPL-2.1-or-later" and len(record["licence"]["conflicts"]) == 2
    classes = read_stage_manifest(ingest).extra["code_files"]["licence_classes"]
    assert classes == {"permissive": 2, "strong_copyleft": 1, "weak_copyleft": 2}


def test_the_default_selection_keeps_permissive_code_only(built):
    rows = code_rows(built / "b" / "snapshot")
    assert {repo: sel for repo, (_, _, sel) in rows.items()} == {
        "chardet-5.2.0": False,  # LGPL-2.1
        "click-8.1.7": True,  # BSD-3-Clause
        "gnureadline-8.2.10": False,  # GPL-3.0
        "pathspec-0.12.1": False,  # MPL-2.0
        "six-1.16.0": True,  # MIT
    }


def test_a_version_allowing_weak_copyleft_selects_mpl_and_lgpl_without_a_rebuild(built):
    b = built / "b"
    before = sorted((p.relative_to(b), p.stat().st_mtime_ns) for p in (b / "stages").rglob("manifest.json"))
    sel = 'allowed_licence_classes_by_tier = { code = ["public_domain", "permissive", "weak_copyleft"] }'
    run_corpus("version", str(b), "--select-inline", sel, "--out", str(built / "weak"))
    rows = code_rows(built / "weak")
    assert [repo for repo, (_, _, sel) in rows.items() if sel] == [
        "chardet-5.2.0",
        "click-8.1.7",
        "pathspec-0.12.1",
        "six-1.16.0",
    ]
    assert rows["gnureadline-8.2.10"][1:] == ("strong_copyleft", False)
    after = sorted((p.relative_to(b), p.stat().st_mtime_ns) for p in (b / "stages").rglob("manifest.json"))
    assert after == before, "no stage ran again"


def test_the_card_shows_the_code_bucket_its_licences_and_rejected_files(built):
    card = gather(open_build(built / "b"))
    code = card["code"]
    assert code["repositories"] == 5 and code["licence_classes"]["weak_copyleft"] == 2
    by_class = {(r["class"], r["expression"]): r for r in code["by_class"]}
    assert by_class[("strong_copyleft", "GPL-3.0-only")]["selected_docs"] == 0
    kept = [r for r in code["by_class"] if r["selected_docs"]]
    assert {r["class"] for r in kept} == {"permissive"}
    bucket = code["bucket"]
    assert bucket["selected_docs"] == sum(r["selected_docs"] for r in code["by_class"])
    assert bucket["stored_tokens"] == sum(r["stored_tokens"] for r in code["by_class"])
    assert 0 < bucket["selected_tokens"] < bucket["stored_tokens"]
    assert code["rejected"]["undecodable"]["files"] > 0  # chardet's test files in legacy encodings


def test_the_same_licence_outputs_on_one_and_two_ranks(built):
    out1 = built / "ingest1"
    run_stage("ingest", 1, [built / "in"], out1)
    m1, m2 = read_stage_manifest(out1), read_stage_manifest(built / "b" / "stages" / "ingest")
    assert m1.run_info["ranks"] == 1 and m2.run_info["ranks"] == 2
    # inside a build ingest also writes its recrawl index records (docs/incremental.md): not a licence output
    in_build = tuple(s for s in m2.side_outputs if not s.path.startswith("index_records/"))
    assert m1.outputs == m2.outputs and m1.side_outputs == in_build
    assert m1.extra["code_files"] == m2.extra["code_files"]
