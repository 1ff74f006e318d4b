"""Hostile input never takes ingest down (issue 30, the parsers and records): each crafted file
(tests/stages/hostile_files.py) goes through the real stage on MPI ranks inside a build, is quarantined
with its reason, counts reconcile, and no rank passes the memory bound; and the WARC, JSONL, tar and
zip readers, fed thousands of mutated files, only ever give records or their own errors."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import sys
import tarfile
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from corpus.code.archive import ArchiveError, ArchiveLimits, display_name, repository_kind
from corpus.code.repository import read_repository
from corpus.code.rules import build_rules
from corpus.formats.dedup_index import PersistentIndex
from corpus.formats.dedup_keys import exact_key_params, recrawl_key_params
from corpus.formats.docshard import iter_docs
from corpus.model.layout import dedup_index_dir
from corpus.text.curated import CuratedError, CuratedRecord, iter_jsonl
from corpus.text.dates import record_day
from corpus.text.warc import MAX_HEADER_BLOCK, BadRecord, RawRecord, SkippedRecord, iter_warc
from tests.conftest import ROOT, mpiexec
from tests.stages.chain import docs, manifest, reconciles
from tests.stages.hostile_files import CONFIG, _tar_bytes, _warc, make_all, run_measured

#: what one ingest rank may peak at on any of the hostile files (the build's budget is 256 MB a rank,
#: the interpreter and libraries about 100 MB of it)
PEAK_MB = 500
RULES = build_rules([], True)


def ingest(inputs: list[Path], out: Path, config: Path, ranks: int = 2):
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "hpc_jobs.ingest", "--in", *map(str, inputs)]
    cmd += ["--out", str(out), "--config", str(config)]
    return run_measured(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)


def in_a_build(build: Path) -> Path:
    """A build directory whose indexes are started, as ``corpus build`` starts them: its ingest
    writes recrawl index records (which refuse a date that is not ASCII or holds a NUL)."""
    PersistentIndex.create(dedup_index_dir(build, "exact"), "exact", exact_key_params(), 2)
    PersistentIndex.create(dedup_index_dir(build, "recrawl"), "recrawl", recrawl_key_params(), 2)
    return build / "stages" / "ingest"


def by_input(out: Path) -> tuple[dict[str, Counter], Counter]:
    """Quarantine reasons per input file, and documents kept per input (shards are named by stem)."""
    reasons: dict[str, Counter] = {}
    for q in docs(out, "quarantine"):
        assert q["stage"] == "ingest" and q["detail"] and len(q["raw_digest"]) in (0, 64)
        reasons.setdefault(q["input_name"], Counter())[q["reason"]] += 1
    kept = Counter()
    for ref in manifest(out)["outputs"]:
        stem = Path(ref["path"]).name.rsplit("-", 1)[0]
        kept[stem] += sum(1 for _ in iter_docs(out / ref["path"]))
    return reasons, kept


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    expected = make_all(d / "in")
    (d / "c.toml").write_text(CONFIG)
    return d, expected


def test_every_hostile_file_is_quarantined_with_its_reason_inside_a_build_within_memory(hostile):
    d, expected = hostile
    out = in_a_build(d / "build")
    proc, peak = ingest([d / "in"], out, d / "c.toml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    t = manifest(out)["totals"]
    assert reconciles(t)
    reasons, kept = by_input(out)
    for h in expected:
        assert reasons.get(h.name, Counter()) == Counter(h.quarantined), h.name
        stem = h.name.split(".")[0]
        assert kept[stem] == h.kept, h.name
    assert t["in"] == t["out"] + sum(t["quarantined"].values())
    assert t["out"] == sum(h.kept for h in expected)
    files = {
        json.loads(p.read_text())["repository"]: json.loads(p.read_text())
        for p in (out / "rejected_files").iterdir()
    }
    for h in expected:
        if h.rejected_files:
            got = files[h.name.split(".")[0]]
            assert {r: v["files"] for r, v in got["rejected"].items()} == h.rejected_files, h.name
    assert ["caf\\xe9.py", "non_utf8_name", 6, ""] in files["odd-name"]["files"], "the name shown escaped"
    assert list((out / "index_records").iterdir()), "the build's recrawl records were written"
    assert peak < PEAK_MB, f"a rank peaked at {peak:.0f} MB"


def test_a_bad_date_is_quarantined_the_same_outside_a_build(hostile, tmp_path):
    d, _ = hostile
    inputs = [d / "in" / "dates.warc.gz", d / "in" / "fields.jsonl"]
    proc, _ = ingest(inputs, tmp_path / "ingest", d / "c.toml", ranks=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reasons, _ = by_input(tmp_path / "ingest")
    assert reasons == {
        "dates.warc.gz": Counter(invalid_date=2),
        "fields.jsonl": Counter(invalid_license=1, invalid_date=5),
    }


def test_an_input_that_outlasts_its_deadline_is_quarantined_from_where_reading_stopped(shared_data, tmp_path):
    """A real crawl file read under a 1 ms bound (``max_input_seconds``): what was read before the
    bound is kept, the rest of the file is one ``input_timeout`` record, and the stage ends well."""
    config = tmp_path / "c.toml"
    config.write_text("[ingest]\nmax_input_seconds = 0.001\n")
    crawl = shared_data / "warc" / "crawl-2026-03-part0.warc.gz"
    proc, _ = ingest([crawl], tmp_path / "ingest", config, ranks=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    totals = manifest(tmp_path / "ingest")["totals"]
    assert reconciles(totals) and totals["quarantined"] == {"input_timeout": 1}
    (record,) = docs(tmp_path / "ingest", "quarantine")
    assert record["input_name"] == crawl.name and "not read" in record["detail"]
    assert record["raw_digest"] == hashlib.sha256(crawl.read_bytes()).hexdigest()


# --- the readers, in process ----------------------------------------------------------------------


def test_dates_are_iso_days_in_ascii_digits_on_the_calendar():
    assert record_day("2026-03-01T12:00:00Z") == "2026-03-01"
    assert record_day("2026-03-01") == "2026-03-01"
    assert record_day("2024-02-29 10:00") == "2024-02-29"
    for bad in (
        "２０２６-０１-０１",
        "2026-01-01\x00",
        "2026-13-45",
        "2025-02-29",
        "2026",
        "0000-01-01",
        "2026-01-01X",
    ):
        assert record_day(bad) is None, bad


def test_a_line_over_the_cap_is_digested_whole_and_the_file_goes_on(tmp_path):
    long = b'{"text": "' + b"x" * 5000 + b'"}'
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"text": "first"}\n' + long + b"\r\n" + b'{"text": "last", "id": 7}')
    got = list(iter_jsonl(p, "curated://s/a.jsonl", max_line_bytes=1000))
    assert [type(r) for r in got] == [CuratedRecord, CuratedError, CuratedRecord]
    assert got[1].reason == "record_too_large" and got[1].raw_digest == hashlib.sha256(long).hexdigest()
    assert got[2].url == "curated://s/a.jsonl#7" and got[2].index == 2


def test_a_header_block_over_its_cap_is_one_quarantined_span(tmp_path):
    record = b"WARC/1.0\r\nWARC-Type: response\r\n" + b"X-Pad: 0123456789\r\n" * (MAX_HEADER_BLOCK // 19 + 1)
    p = tmp_path / "h.warc"
    p.write_bytes(record + b"Content-Length: 0\r\n\r\n")
    (got,) = list(iter_warc(p))
    assert isinstance(got, BadRecord) and got.reason == "header_too_large"
    assert got.raw_digest == hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_chain_of_tar_extended_headers_is_refused_before_it_is_parsed(tmp_path):
    buf = io.BytesIO()
    for _ in range(9):
        info = tarfile.TarInfo("././@LongLink")
        info.type, info.size = tarfile.GNUTYPE_LONGNAME, 100
        buf.write(info.tobuf(format=tarfile.USTAR_FORMAT) + b"a" * 100 + b"\0" * 412)
    p = tmp_path / "chain.tar"
    p.write_bytes(buf.getvalue() + _tar_bytes([("pkg/a.py", b"a = 1\n")]))
    with pytest.raises(ArchiveError) as e:
        read_repository(
            p, "tar", "chain", RULES, max_file_bytes=10**6, max_doc_tokens=10**4, bytes_per_token=3.0
        )
    assert e.value.reason == "header_too_large" and "in a row" in e.value.detail


def test_a_zip_with_more_entries_than_the_cap_is_refused_before_zipfile_lists_them(tmp_path):
    p = tmp_path / "m.zip"
    with zipfile.ZipFile(p, "w") as z:
        for i in range(30):
            z.writestr(f"r/f{i}.py", f"v = {i}\n")
    with pytest.raises(ArchiveError) as e:
        read_repository(
            p,
            "zip",
            "m",
            RULES,
            max_file_bytes=10**6,
            max_doc_tokens=10**4,
            bytes_per_token=3.0,
            limits=ArchiveLimits(max_members=20),
        )
    assert e.value.reason == "too_many_members"
    assert display_name("caf" + b"\xe9".decode("utf-8", "surrogateescape")) == "caf\\xe9"


# --- fuzz: mutated files through each reader ---------------------------------------------------------


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.random()
        if not b:
            break
        at = rng.randrange(len(b))
        if op < 0.45:
            b[at] = rng.randrange(256)
        elif op < 0.6:
            del b[at : at + rng.randint(1, 64)]
        elif op < 0.75:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
        elif op < 0.85:
            b[at:at] = rng.choice([b"\n", b"\r\n\r\n", b"\0" * 8, b"9" * 20, b"Content-Length: 99999999\r\n"])
        else:
            del b[at:]
    return bytes(b)


def _seeds() -> dict[str, bytes]:
    page = b"<html><body><p>" + b"fuzzed text " * 30 + b"</p></body></html>"
    warc = _warc(
        [("https://a.example/", "2026-03-01T00:00:00Z", page), ("https://b.example/", "2026-03-02", page)]
    )
    plain_warc = gzip.decompress(warc)
    jsonl = b'{"text": "one", "date": "2026-01-01", "license": "MIT"}\n{"text": "two", "id": 2}\n'
    files = [
        ("r/README.md", b"# R\n\nA repository.\n"),
        ("r/src/m.py", b"def f(x):\n    return x + 1\n" * 20),
    ]
    tar = _tar_bytes(files)
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            z.writestr(name, data)
    return {
        "x.warc.gz": warc,
        "x.warc": plain_warc,
        "x.jsonl": jsonl,
        "x.jsonl.gz": gzip.compress(jsonl, mtime=0),
        "x.tar": tar,
        "x.tar.gz": gzip.compress(tar, mtime=0),
        "x.zip": zbuf.getvalue(),
    }


def _read(path: Path) -> list:
    name = path.name
    if ".warc" in name:
        got = list(iter_warc(path, 1 << 20, 1 << 20))
        assert all(isinstance(r, (RawRecord, BadRecord, SkippedRecord)) for r in got)
        assert [r.index for r in got] == list(range(len(got))), "records numbered as ingest counts them"
        return got
    if ".jsonl" in name:
        got = list(iter_jsonl(path, "curated://f/x", 1 << 16))
        assert all(isinstance(r, (CuratedRecord, CuratedError)) for r in got)
        assert [r.index for r in got] == list(range(len(got))), "records numbered as ingest counts them"
        return got
    try:
        repo = read_repository(
            path,
            repository_kind(path) or "tar",
            "x",
            RULES,
            max_file_bytes=1 << 16,
            max_doc_tokens=1 << 12,
            bytes_per_token=3.0,
            limits=ArchiveLimits(max_bytes=1 << 22, max_members=200),
        )
    except ArchiveError as e:
        assert e.reason and e.detail == display_name(e.detail)
        return [e]
    try:
        docs_ = [d.text.encode("utf-8") for d in repo.documents()]
        json.dumps([list(f) for f in repo.rejected], ensure_ascii=False).encode("utf-8")
    finally:
        repo.close()
    return docs_


@pytest.mark.parametrize(
    "kind", ["x.warc.gz", "x.warc", "x.jsonl", "x.jsonl.gz", "x.tar", "x.tar.gz", "x.zip"]
)
def test_mutated_files_give_records_or_the_readers_own_errors(tmp_path, kind):
    """A thousand seeded mutations per format (byte flips, cuts, insertions of newlines, NULs,
    digit runs and lying lengths): the reader yields only its record types or raises ArchiveError."""
    rng = random.Random(f"issue-30/{kind}")
    seed = _seeds()[kind]
    path = tmp_path / kind
    results = Counter()
    for _ in range(1000):
        data = _mutate(rng, seed)
        if kind.endswith(".gz") and rng.random() < 0.5:  # mutate inside the compression as well
            data = gzip.compress(_mutate(rng, gzip.decompress(seed)), mtime=0)
        path.write_bytes(data)
        got = _read(path)
        results[type(got[0]).__name__ if got else "none"] += 1
    assert len(results) > 1, f"the mutations never changed the outcome: {results}"
