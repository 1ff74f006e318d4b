"""What ingest trusts of where its inputs lie (issue 30, items 7, 9, 16, 17, 18): declarations are read
from the input root down, never above it; links and special files under a root are counted, never
followed or opened; a FIFO named as an input is refused at once; a glob sees the path relative to the
input root, however it was spelled; a file name that is not UTF-8 ingests, its manifest writes, and a
rerun finds the stage complete."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from corpus.text.curated import iter_jsonl, read_text_file
from corpus.text.inputs import InputRefused, display_name, open_regular
from corpus.text.sources import DECLARATION_FILE
from corpus.text.tables import iter_parquet
from corpus.text.warc import iter_warc
from corpus.text.warc_units import warc_units
from tests.conftest import ROOT, SAMPLE, mpiexec
from tests.stages.chain import docs, manifest, reconciles
from tests.stages.warc_fixtures import write_jsonl_gz

PERL_LICENCE = "Artistic-1.0-Perl OR GPL-1.0-or-later"
#: long enough for ingest on a loaded 2-core machine, short enough that a hang fails the test
TIMEOUT_S = 120


def ingest(
    inputs: list[str | Path], out: Path, cwd: Path = ROOT, config: Path | None = None, ranks: int = 1
) -> subprocess.CompletedProcess:
    """``python -m hpc_jobs.ingest`` on real ranks from ``cwd``, the inputs spelled as given."""
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "hpc_jobs.ingest"]
    cmd += ["--in", *map(str, inputs), "--out", str(out)]
    cmd += ["--config", str(config)] if config is not None else []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


def notes(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_jsonl_gz(path, [{"text": text, "url": f"https://notes.example/{path.name}"}])


def test_a_declaration_above_the_input_root_is_never_read_malformed_or_not(tmp_path):
    """Item 16: above the root lie a declaration that would make every file curated and a malformed
    one; neither is read, for a directory root or a file named directly (whose own directory is read)."""
    (tmp_path / DECLARATION_FILE).write_text("[[sources]\n")  # malformed
    above = tmp_path / "mid" / DECLARATION_FILE
    above.parent.mkdir()
    above.write_text('[[sources]]\nmatch = "*"\nname = "imposter"\ntier = "curated"\n')
    data = tmp_path / "mid" / "data"
    notes(data / "notes.jsonl.gz", "Notes nobody declared.")
    notes(data / "sub" / "more.jsonl.gz", "More notes nobody declared.")

    ok(ingest([data], tmp_path / "dir"))
    assert [(d.source, d.source_tier) for d in docs(tmp_path / "dir")] == [("web", "web")] * 2

    ok(ingest([data / "sub" / "more.jsonl.gz"], tmp_path / "file"))
    assert [(d.source, d.source_tier) for d in docs(tmp_path / "file")] == [("web", "web")]

    (data / "sub" / DECLARATION_FILE).write_text(
        '[[sources]]\nmatch = "more.jsonl.gz"\nname = "m"\ntier = "books"\n'
    )
    ok(ingest([data / "sub" / "more.jsonl.gz"], tmp_path / "beside"))
    assert [(d.source, d.source_tier) for d in docs(tmp_path / "beside")] == [("m", "books")]


def test_a_malformed_declaration_inside_the_root_stops_ingest_in_one_line_naming_it(tmp_path):
    data = tmp_path / "data"
    notes(data / "sub" / "notes.jsonl.gz", "Notes.")
    bad = data / "sub" / DECLARATION_FILE
    bad.write_text('[[sources]]\nmatch = "*"\nname = "x"\ntier = "curated"\nlicense = [1, 2\n')
    proc = ingest([data], tmp_path / "out")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    [line] = error_lines(proc)
    assert line.startswith(f"error: ingest: {bad}: not a readable TOML file (")


def test_links_under_an_input_root_are_counted_never_followed(tmp_path):
    """Item 17: a link to a file outside the root (a host file) and a link to a directory outside are
    not documents: ``skipped_inputs`` counts them (in ``run_info``: the digested manifest is the one
    without the links) and the log says so. Named as an input, a link is the operator's word and is read."""
    outside = tmp_path / "outside"
    host = outside / "hostname.txt"
    host.parent.mkdir()
    host.write_text("build-node-17.internal.example\n")
    notes(outside / "private" / "mail.jsonl.gz", "Private mail.")
    data = tmp_path / "data"
    notes(data / "notes.jsonl.gz", "Notes of the team.")
    (data / "host.txt").symlink_to(host)
    (data / "private").symlink_to(outside / "private", target_is_directory=True)
    (data / "also-notes.jsonl.gz").symlink_to(data / "notes.jsonl.gz")  # inside the root: still a link

    proc = ok(ingest([data], tmp_path / "out"))
    assert [d.text for d in docs(tmp_path / "out")] == ["Notes of the team."]
    m = manifest(tmp_path / "out")
    assert m["run_info"]["skipped_inputs"] == {"symlink": 3}
    assert "skipped under the input roots (not followed, not read): symlink 3" in proc.stderr
    assert reconciles(m["totals"]) and m["totals"]["in"] == 1

    for link in ("host.txt", "private", "also-notes.jsonl.gz"):
        (data / link).unlink()
    ok(ingest([data], tmp_path / "without"))
    without = manifest(tmp_path / "without")
    assert without["run_info"]["skipped_inputs"] == {}
    assert {**m, "run_info": None} == {**without, "run_info": None}, "links beside the inputs change nothing"

    (data / "host.txt").symlink_to(host)
    ok(ingest([data / "host.txt"], tmp_path / "named"))
    assert [d.text.strip() for d in docs(tmp_path / "named")] == ["build-node-17.internal.example"]


def test_a_fifo_under_a_root_is_counted_and_one_named_as_input_is_refused_at_once(tmp_path):
    """Item 9: opening a FIFO waits for a writer for ever (and SIGTERM does not end that wait), so none
    is ever opened: under a root it is counted, named directly it is one line, and one put in a
    listed file's place is refused when opened."""
    data = tmp_path / "data"
    notes(data / "notes.jsonl.gz", "Notes of the team.")
    os.mkfifo(data / "pipe.jsonl.gz")
    ok(ingest([data], tmp_path / "out"))
    m = manifest(tmp_path / "out")
    assert m["run_info"]["skipped_inputs"] == {"fifo": 1} and m["totals"]["in"] == 1

    fifo = tmp_path / "named.warc.gz"
    os.mkfifo(fifo)
    started = time.monotonic()
    proc = ingest([fifo], tmp_path / "refused")
    assert proc.returncode == 2 and time.monotonic() - started < TIMEOUT_S
    assert error_lines(proc) == [
        f"error: ingest: input {fifo} is a FIFO, not a regular file or directory: "
        "refused before reading anything"
    ]
    assert not (tmp_path / "refused" / "manifest.json").exists()


@pytest.mark.timeout(30)
def test_a_fifo_put_in_a_listed_files_place_is_refused_when_opened_not_waited_on(tmp_path):
    swapped = tmp_path / "notes.jsonl.gz"
    os.mkfifo(swapped)
    with pytest.raises(InputRefused, match="is a FIFO, not a regular file: not read"):
        open_regular(swapped)
    notes(tmp_path / "real.jsonl.gz", "x")
    with open_regular(tmp_path / "real.jsonl.gz") as f:
        assert f.read(2) == b"\x1f\x8b"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "name, read",
    [
        ("notes.jsonl.gz", lambda p: list(iter_jsonl(p, "curated://x"))),
        ("notes.jsonl.zst", lambda p: list(iter_jsonl(p, "curated://x"))),
        ("notes.jsonl", lambda p: list(iter_jsonl(p, "curated://x"))),
        ("note.txt", lambda p: read_text_file(p, "curated://x")),
        ("rows.parquet", lambda p: list(iter_parquet(p, "curated://x", 1 << 20, {}))),
        ("crawl.warc.gz", lambda p: list(iter_warc(p))),
        ("big.warc.gz", lambda p: warc_units(p, 1)),  # the cutter of a large WARC into units
    ],
)
def test_each_reader_opens_its_file_once_as_a_regular_file_and_refuses_a_fifo(tmp_path, name, read):
    """Ingest opens a file once per pass, in its reader (no check opening it before): so each reader
    must refuse a FIFO put in the listed file's place at once, as the check did."""
    swapped = tmp_path / name
    os.mkfifo(swapped)
    with pytest.raises(InputRefused, match="is a FIFO, not a regular file: not read"):
        read(swapped)


def test_three_spellings_of_one_file_are_one_input_with_one_tier_licence_and_manifest(tmp_path):
    """Item 18: ``*/perl-doc.jsonl.gz`` is matched on the path relative to the input root (a leading
    ``*/`` also matching no directory), so a name, ``./name``, an absolute path and the directory
    holding it (``.`` or absolute) give the same tier, licence and stage manifest."""
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(SAMPLE / "curated" / "perl-doc.jsonl.gz", d / "perl-doc.jsonl.gz")
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[[ingest.sources]]\nmatch = "*/perl-doc.jsonl.gz"\nname = "perl-doc"\ntier = "curated"\n'
        'license = "GPL-1.0"\n'
    )
    spellings = {
        "name": ("perl-doc.jsonl.gz", d),
        "dot": ("./perl-doc.jsonl.gz", d),
        "absolute": (str(d / "perl-doc.jsonl.gz"), ROOT),
        "directory": (".", d),
        "absolute directory": (str(d), ROOT),
    }
    manifests = {}
    for label, (spelled, cwd) in spellings.items():
        out = tmp_path / "out" / label.replace(" ", "-")
        ok(ingest([spelled], out, cwd=cwd, config=cfg))
        got = {(doc.source, doc.source_tier, doc.license_hint) for doc in docs(out)}
        assert got == {("perl-doc", "curated", PERL_LICENCE)}, label  # the records' own licence
        m = manifest(out)
        assert [(s["tier"], s["license"]) for s in m["extra"]["sources"].values()] == [("curated", "GPL-1.0")]
        m.pop("run_info")
        manifests[label] = m
    assert all(m == manifests["name"] for m in manifests.values())


def test_a_file_name_that_is_not_utf8_ingests_its_manifest_writes_and_a_rerun_is_complete(tmp_path):
    """Item 7: the file is read by its name's bytes; what is recorded of it (the manifest, a URL, a
    quarantine record, a repository's name) carries the name's display form, ``\\xNN``."""
    data = tmp_path / "data"
    data.mkdir()
    name = os.fsdecode(b"caf\xe9.jsonl")
    assert display_name(name) == "caf\\xe9.jsonl" and display_name("café.jsonl") == "café.jsonl"
    lines = [json.dumps({"text": "A record with no URL of its own."}), "{not json"]
    (data / name).write_text("\n".join(lines) + "\n")
    body = b"def main():\n    return 'a kept file of a repository with an odd archive name'\n"
    member = tarfile.TarInfo("cafe-1.0/pkg/main.py")
    member.size = len(body)
    with tarfile.open(data / os.fsdecode(b"caf\xe9-1.0.tar"), "w") as t:
        t.addfile(member, io.BytesIO(body))

    ok(ingest([data], tmp_path / "out", ranks=2))
    m = manifest(tmp_path / "out")
    assert sorted(i["path"].rsplit("/", 1)[-1] for i in m["inputs"]) == ["caf\\xe9-1.0.tar", "caf\\xe9.jsonl"]
    assert m["totals"]["quarantined"] == {"bad_json": 1} and reconciles(m["totals"])
    by_source = {d.source: d for d in docs(tmp_path / "out")}
    assert by_source["web"].url.startswith("curated://web/caf\ufffd.jsonl#")  # the JSONL reader's URL
    assert by_source["code"].url == "repo://caf\\xe9-1.0/"
    [bad] = docs(tmp_path / "out", "quarantine")
    assert (bad["input_name"], bad["source"]) == ("caf\\xe9.jsonl", "web")

    rerun = ok(ingest([data], tmp_path / "out", ranks=2))
    assert "complete already" in rerun.stderr
