"""corpus.code without MPI: archives recognised by their bytes, damaged ones named, the rule table and
its config, the generated-header patterns on real header lines, the order and the split."""

from __future__ import annotations

import io
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from corpus.code.archive import ArchiveError, common_root, repository_kind, sniff
from corpus.code.language import language_of
from corpus.code.repository import KeptFile, order_key, plan_documents, read_repository
from corpus.code.rules import Verdict, build_rules, judge
from corpus.text.sources import parse_source_tables, resolve_format
from tests.conftest import ROOT, SAMPLE, SHARED_DATA

CODE = SHARED_DATA / "code"
RULES = build_rules([])
#: The limits a repository is read with here (those of the default config).
READ_LIMITS = {"max_file_bytes": 1_000_000, "max_doc_tokens": 32_768, "bytes_per_token": 3.0}


def linked_inputs(root: Path, archives: list[str]) -> Path:
    """``root/in``, holding a copy of each of the shared code ``archives`` (a symbolic link under an
    input root is skipped, never followed: tests/stages/test_input_trust.py)."""
    inputs = root / "in"
    inputs.mkdir()
    for name in archives:
        shutil.copyfile(CODE / name, inputs / name)
    return inputs


def tar_bytes(mode: str, files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def own_files() -> dict[str, bytes]:
    return {f"proj/{p.name}": p.read_bytes() for p in sorted((ROOT / "corpus" / "code").glob("*.py"))}


def read(path: Path, **kw):
    return read_repository(path, repository_kind(path), path.name, RULES, **(READ_LIMITS | kw))


def test_archives_are_recognised_by_their_bytes_and_a_warc_stays_a_warc(tmp_path):
    files = own_files()
    for mode, name in [("w", "a.tar"), ("w:gz", "b.bin"), ("w:bz2", "c.tar.bz2"), ("w:xz", "d.data")]:
        (tmp_path / name).write_bytes(tar_bytes(mode, files))
        assert sniff(tmp_path / name) == "tar" and resolve_format(tmp_path / name, []) == "repository"
    with zipfile.ZipFile(tmp_path / "e.jar", "w") as z:
        z.writestr("x/y.py", b"pass\n")
    assert sniff(tmp_path / "e.jar") == "zip" and resolve_format(tmp_path / "e.jar", []) == "repository"
    assert sniff(CODE / "jquery-3.7.1.tgz") == "tar"
    warc = sorted((SAMPLE / "web").glob("*.warc.gz"))[0]
    assert sniff(warc) == "warc" and resolve_format(warc, []) == "warc"
    renamed = tmp_path / "crawl.tar.gz"
    renamed.write_bytes(warc.read_bytes())
    assert resolve_format(renamed, []) == "warc", "the bytes decide before the name"
    (tmp_path / "junk.tgz").write_bytes(b"not an archive\n")
    assert resolve_format(tmp_path / "junk.tgz", []) == "repository", "to be quarantined by name"
    assert resolve_format(tmp_path / "junk.txt", []) == "text"
    (tmp_path / "cut.tar.gz").write_bytes(
        (CODE / "six-1.16.0.tar.gz").read_bytes()[:300]
    )  # no tar header yet
    assert resolve_format(tmp_path / "cut.tar.gz", []) == "repository"
    with pytest.raises(ArchiveError, match="truncated_archive"):
        read(tmp_path / "cut.tar.gz")
    declared = parse_source_tables([{"match": "*/src", "name": "s", "tier": "code", "kind": "repository"}])
    (tmp_path / "src").mkdir()
    assert resolve_format(tmp_path / "src", declared) == "repository"


@pytest.mark.parametrize(
    "mode,cut,reason",
    [
        ("w", 0.7, "truncated_archive"),
        ("w:gz", 0.5, "truncated_archive"),
        ("w:bz2", 0.5, "truncated_archive"),
        ("w:xz", 0.5, "truncated_archive"),
        ("zip", 0.6, "truncated_archive"),
    ],
)
def test_a_cut_archive_is_named_truncated(tmp_path, mode, cut, reason):
    files = own_files()
    if mode == "zip":
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for n, d in files.items():
                z.writestr(n, d)
        data = buf.getvalue()
    else:
        data = tar_bytes(mode, files)
    p = tmp_path / "cut.archive"
    end = int(len(data) * cut)
    if mode == "w":  # in a member's data: tarfile reads a plain tar cut in a header as a shorter archive
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            end = next(max(end, m.offset_data + 1) for m in t.getmembers() if m.offset_data + m.size > end)
    p.write_bytes(data[:end])
    with pytest.raises(ArchiveError) as e:
        read(p)
    assert e.value.reason == reason, e.value.detail


def test_a_zip_with_a_bad_crc_is_malformed(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("p/a.py", (ROOT / "corpus" / "model" / "tiers.py").read_bytes())
    data = bytearray(buf.getvalue())
    data[40] ^= 0xFF  # a byte of the stored file
    (tmp_path / "bad.zip").write_bytes(bytes(data))
    with pytest.raises(ArchiveError) as e:
        read(tmp_path / "bad.zip")
    assert e.value.reason == "malformed_archive" and "CRC" in e.value.detail


def test_the_top_folder_is_the_root_only_when_everything_is_under_it():
    assert common_root(["package/a.js", "package/lib/b.js"]) == "package"
    assert common_root(["p/", "p/a", "p/b/c"]) == "p"
    assert common_root(["p/a", "q/b"]) == ""
    assert common_root(["README", "src/a.py"]) == ""


HEADERS_GENERATED = [  # real header lines of the shared repositories (and the conventions they follow)
    "# Generated by the protocol buffer compiler.  DO NOT EDIT!",
    "# Generated by the gRPC Python protocol compiler plugin. DO NOT EDIT!",
    "# Generated by synthtool. DO NOT EDIT!",
    "# This file is automatically generated by tools/idna-data",
    "# Automatically generated by scripts/gen_mapfiles.py.",
    "# Auto generated by make_terminal_widths.py",
    "# This file is autogenerated by pip-compile-multi",
    ".. This file is auto-generated. Make any changes to the associated",
    "# file generated by setuptools_scm",
    "// Code generated by protoc-gen-go. DO NOT EDIT.",
    "# Generated by Django 4.2.1 on 2023-05-01 12:00",
    "// @generated by the build",
]
HEADERS_WRITTEN = [  # real lines that are not generated-file headers, past the first five lines as in their files
    "# autogenerated file.",  # Sphinx's conf.py template, lines 8-17 in chardet, niquests, pathspec and pylint
    "  // generated by some common infrastructure, the error domain must be a",  # error_details.proto
    '__version__ = "2.0.1"  # DO NOT EDIT THIS LINE MANUALLY. LET bump2version UTILITY DO IT',  # tomli
    "    The response generated from a Request.",  # requests/hooks.py
    " * Creates an object composed of keys generated from the results of running",  # lodash
]


def module_with(line: str, at: int) -> str:
    """A small module whose line number ``at`` (3 or more) is ``line``."""
    return '"""A module,\n' + "its docstring.\n" * (at - 3) + '"""\n' + line + "\nimport os\n"


@pytest.mark.parametrize("line", HEADERS_GENERATED)
def test_a_generated_header_is_found(line):
    text = module_with(line, at=3)
    assert judge("pkg/mod.py", len(text), lambda: text.encode(), RULES, 10**6).reason == "generated"


@pytest.mark.parametrize("line", HEADERS_WRITTEN)
def test_a_line_that_only_mentions_generation_is_not_a_header(line):
    text = module_with(line, at=6)
    assert judge("pkg/mod.py", len(text), lambda: text.encode(), RULES, 10**6) == Verdict("", text)


def test_a_published_phrase_is_a_header_in_the_first_five_lines_only():
    """StarCoder2's phrases count anywhere in a line, so there Sphinx's line would be a header."""
    at5, at6 = module_with("# autogenerated file.", at=5), module_with("# autogenerated file.", at=6)
    assert judge("pkg/mod.py", len(at5), lambda: at5.encode(), RULES, 10**6) == Verdict(
        "generated", detail="header 'autogenerated'"
    )
    assert judge("pkg/mod.py", len(at6), lambda: at6.encode(), RULES, 10**6).reason == ""
    named = module_with("from .exc import AutogenerateDiffsDetected", at=3)  # alembic: not the word
    assert judge("pkg/mod.py", len(named), lambda: named.encode(), RULES, 10**6).reason == ""


def test_the_rule_table_is_validated_and_a_team_rule_comes_first():
    bad = [
        ({"reason": "x"}, "needs a condition"),
        ({"reason": "Bad Name", "path": "*"}, "lower_snake_case"),
        ({"reason": "binary", "path": "*.x"}, "decided by the reader"),
        ({"reason": "x", "pathz": "*"}, "unknown keys pathz"),
        ({"reason": "x", "header": "("}, "bad 'header'"),
        ({"reason": "x", "min_bytes": -1}, "positive"),
        ({"reason": "x", "alpha_fraction_under": 1.5}, "up to 1"),
        ({"reason": "x", "except_languages": ["klingon"]}, "unknown languages klingon"),
    ]
    for table, msg in bad:
        with pytest.raises(ValueError, match=msg):
            build_rules([table])
    rules = build_rules(
        [{"reason": "keep", "path": "*/vendor/ours/*"}, {"reason": "schema", "path": "/schemas/*"}]
    )
    text = "import os\n"
    assert judge("lib/vendor/ours/a.py", 10, lambda: text.encode(), rules, 100) == Verdict("", text)
    assert judge("lib/vendor/theirs/a.py", 10, lambda: text.encode(), rules, 100).reason == "vendored"
    assert judge("schemas/a.py", 10, lambda: text.encode(), rules, 100).reason == "schema"
    assert judge("lib/schemas/a.py", 10, lambda: text.encode(), rules, 100).reason == ""
    never = []
    assert judge("a.py", 101, lambda: never.append(1) or b"", rules, 100).reason == "too_large" and not never
    assert build_rules([], builtin=False) == []
    with pytest.raises(ValueError, match="kind must be one of"):
        parse_source_tables([{"match": "*", "name": "x", "kind": "git"}])


def test_the_order_and_the_split_at_file_boundaries():
    paths = [
        "src/b.py",
        "setup.py",
        "README.md",
        "LICENSE",
        "src/README",
        "src/a.py",
        "src/pkg/x.py",
        "docs/index.md",
        "src/package.json",
        "Makefile",
    ]
    assert sorted(paths, key=order_key) == [
        "README.md",
        "Makefile",
        "setup.py",
        "LICENSE",
        "docs/index.md",
        "src/README",
        "src/package.json",
        "src/a.py",
        "src/b.py",
        "src/pkg/x.py",
    ]
    kept = [KeptFile(f"f{i}.py", "python", n, 0, n) for i, n in enumerate([300, 300, 2000, 10, 10])]
    # estimate = ceil((header + path + file bytes) / 3): 109, 109, 672, 13, 13 tokens
    assert plan_documents(kept, 250, 3.0) == [[0, 1], [2], [3, 4]]
    assert plan_documents(kept, 10_000, 3.0) == [[0, 1, 2, 3, 4]]
    assert plan_documents(kept, 1, 3.0) == [[0], [1], [2], [3], [4]]


def test_language_by_name_then_shebang():
    assert language_of("a/b.py", "") == "python"
    assert language_of("include/x.h", "") == "c"
    assert language_of("Makefile", "") == "makefile"
    assert language_of("bin/run", "#!/bin/sh\necho\n") == "shell"
    assert language_of("bin/tool", "#!/usr/bin/env python3\n") == "python"
    assert language_of("LICENSE", "MIT") == "text"
    assert language_of("MANIFEST.in", "include x") == ""


def test_a_real_repository_counts_every_entry():
    repo = read(CODE / "six-1.16.0.tar.gz")
    with tarfile.open(CODE / "six-1.16.0.tar.gz") as t:
        entries = [m for m in t.getmembers() if not m.isdir()]
    assert len(repo.kept) + len(repo.rejected) == len(entries)
    assert [f.path for f in repo.kept][:3] == ["README.rst", "setup.cfg", "setup.py"]
    assert {f.reason for f in repo.rejected} == {"generated"}  # PKG-INFO and six.egg-info/
    repo.close()
