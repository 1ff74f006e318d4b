"""ingest on hostile inputs: encoded bodies and compression bombs, records too large to hold, files
nobody declared, and records that go missing between the reader and the outcome."""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import tracemalloc
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import zstandard

from corpus.text.content_encoding import content_encodings, decode_body
from corpus.text.sources import DECLARATION_FILE, declared_source, read_declaration
from corpus.text.warc import BadRecord, RawRecord, iter_warc
from hpc_jobs.ingest.config import IngestConfig
from hpc_jobs.ingest.items import Item as _Item
from hpc_jobs.ingest.stage import IngestStage
from runtime.input_shard import InputShard
from runtime.runner import StageError
from tests.conftest import run_corpus
from tests.stages.chain import docs, manifest, run_stage
from tests.stages.warc_fixtures import real_pages, warc_bytes, write_jsonl_gz

ENCODERS = {
    "gzip": lambda b: gzip.compress(b, mtime=0),
    "x-gzip": lambda b: gzip.compress(b, mtime=0),
    "deflate": zlib.compress,  # RFC 9110 deflate: the zlib format
    "zstd": zstandard.ZstdCompressor().compress,
}


def read(tmp_path: Path, data: bytes, **limits) -> list:
    path = tmp_path / "x.warc.gz"
    path.write_bytes(data)
    return [it for it in iter_warc(path, **limits) if not hasattr(it, "kind") or it.kind != "warcinfo"]


@pytest.mark.parametrize("coding", sorted(ENCODERS))
def test_encoded_bodies_of_real_pages_decode_to_the_page(tmp_path, shared_data, coding):
    pages = real_pages(shared_data, 3, part=2)
    encoded = [(url, ENCODERS[coding](page)) for url, page in pages]
    got = read(
        tmp_path, warc_bytes(encoded, headers=(("Content-Encoding", coding),)), max_decoded_bytes=1 << 20
    )
    assert [(r.url, r.payload) for r in got] == pages
    assert all(r.raw_digest == hashlib.sha256(r.payload).hexdigest() for r in got)


def test_a_raw_deflate_body_and_a_mislabelled_plain_body_read_like_a_browser_reads_them():
    page = b"<html><body><p>" + b"text " * 2000 + b"</p></body></html>"
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw_deflate = raw.compress(page) + raw.flush()
    assert decode_body(io.BytesIO(raw_deflate), "deflate", 1 << 20).payload == page
    for coding in ("gzip", "deflate", "zstd"):  # the header says encoded, the bytes are plain HTML
        assert decode_body(io.BytesIO(page), coding, 100).payload == page, (
            "no cap on a body that is not encoded"
        )
    assert content_encodings("identity, GZIP") == ["gzip"]


def test_a_gzip_bomb_costs_no_more_memory_than_the_cap_and_is_quarantined(tmp_path):
    bomb = gzip.compress(b"\0" * (64 << 20), mtime=0)  # 64 MiB in 64 KiB
    data = warc_bytes([("https://bomb.example/", bomb)], headers=(("Content-Encoding", "gzip"),))
    cap = 2_000_000
    tracemalloc.start()
    try:
        (got,) = read(tmp_path, data, max_decoded_bytes=cap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(got, BadRecord) and got.reason == "decoded_too_large"
    assert f"max_decoded_bytes {cap}" in got.detail
    assert got.raw_digest == hashlib.sha256(bomb).hexdigest(), "the digest covers the whole encoded body"
    assert peak < cap + (2 << 20), f"peak {peak} bytes for a cap of {cap}"


def test_a_corrupt_encoded_body_and_an_unknown_or_brotli_coding_are_quarantined_by_name(
    tmp_path, shared_data
):
    (url, page) = real_pages(shared_data, 1, part=2)[0]
    corrupt = gzip.compress(page, mtime=0)
    corrupt = corrupt[:40] + bytes(b ^ 0x5A for b in corrupt[40:200]) + corrupt[200:]
    cases = {"gzip": corrupt, "br": b"\x1b\x03\x00\xf8 not decodable here", "compress": b"\x1f\x9d\x90"}
    for coding, body in cases.items():
        (got,) = read(tmp_path, warc_bytes([(url, body)], headers=(("Content-Encoding", coding),)))
        assert isinstance(got, BadRecord) and got.raw_digest == hashlib.sha256(body).hexdigest()
        if coding == "gzip":
            assert got.reason == "unreadable_payload" and "gzip" in got.detail
        else:
            assert got.reason == "unsupported_content_encoding" and coding in got.detail
    (br,) = read(tmp_path, warc_bytes([(url, cases["br"])], headers=(("Content-Encoding", "br"),)))
    assert "no brotli decoder is installed" in br.detail
    (other,) = read(tmp_path, warc_bytes([(url, page)], headers=(("Content-Encoding", "identity"),)))
    assert isinstance(other, RawRecord) and other.payload == page


@pytest.mark.parametrize("coding", ["gzip", "deflate", "zstd"])
def test_an_encoded_body_cut_short_is_quarantined_as_truncated_not_passed_on_as_half_a_page(
    tmp_path, shared_data, coding
):
    """zlib and zstd decode a cut body to the part before the cut without complaint: the decoder's end
    marker (or the zstd frame's stated size) finds it when the HTTP Content-Length was rewritten to
    the stored bytes, and the Content-Length of the encoded body finds it when it was kept."""
    url, page = real_pages(shared_data, 1, part=2)[0]
    encoded = ENCODERS[coding](page)
    cut = encoded[: len(encoded) // 2]
    header = (("Content-Encoding", coding),)
    for declared in (None, len(encoded)):
        (got,) = read(tmp_path, warc_bytes([(url, cut)], headers=header, http_length=declared))
        assert isinstance(got, BadRecord) and got.reason == "truncated_record", (declared, got)
        assert got.raw_digest == hashlib.sha256(cut).hexdigest()
    (whole,) = read(tmp_path, warc_bytes([(url, encoded)], headers=header))
    assert isinstance(whole, RawRecord) and whole.payload == page


def test_a_record_too_large_is_digested_over_all_its_bytes(tmp_path, shared_data):
    url, page = real_pages(shared_data, 1, part=2)[0]
    big = page * (3_000_000 // len(page) + 1)  # past the first MiB that once was all it digested
    (got,) = read(tmp_path, warc_bytes([(url, big)]), max_record_bytes=1 << 20)
    assert isinstance(got, BadRecord) and got.reason == "record_too_large"
    assert got.raw_digest == hashlib.sha256(big).hexdigest()


def test_the_tier_of_a_jsonl_file_no_source_declares_is_web_curated_when_configured_or_the_file_refused(
    tmp_path,
):
    """Web by default (trust is declared, never inferred from a file format), curated or refused when a
    deployment says so: ``undeclared_files``."""
    (tmp_path / "in").mkdir()
    write_jsonl_gz(tmp_path / "in" / "notes.jsonl.gz", [{"text": "An undeclared note."}])
    for choice in ("web", "curated"):
        cfg = tmp_path / f"{choice}.toml"
        cfg.write_text(f'[ingest]\nundeclared_files = "{choice}"\n')
        run_stage("ingest", 1, [tmp_path / "in"], tmp_path / choice, cfg if choice == "curated" else None)
        (doc,) = docs(tmp_path / choice)
        assert (doc.source, doc.source_tier) == (choice, choice)  # the tier's source, not the file's name
        assert list(manifest(tmp_path / choice)["extra"]["sources"].values()) == [
            {"source": choice, "tier": choice, "license": "", "date": "", "kind": "auto", "url": ""}
        ]
    cfg = tmp_path / "refuse.toml"
    cfg.write_text('[ingest]\nundeclared_files = "refuse"\n')
    proc = run_stage("ingest", 1, [tmp_path / "in"], tmp_path / "refused", cfg, check=False)
    assert proc.returncode != 0 and not (tmp_path / "refused" / "manifest.json").exists()
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert "notes.jsonl.gz" in line and 'undeclared_files = "refuse"' in line


def test_data_declares_its_own_sources_in_a_corpus_sources_file_and_the_build_config_wins(tmp_path):
    """A ``corpus-sources.toml`` in the input root (globs relative to it) declares the files in and
    below its directory; a build-config table for the same file wins; a refusing deployment accepts a
    file so declared. (One above the root is never read: tests/stages/test_input_trust.py.)"""
    data = tmp_path / "data"
    (data / "books").mkdir(parents=True)
    write_jsonl_gz(data / "books" / "manuals.jsonl.gz", [{"text": "A manual, declared by its producer."}])
    write_jsonl_gz(data / "books" / "notes.jsonl.gz", [{"text": "Notes, declared twice."}])
    (data / DECLARATION_FILE).write_text(
        '[[sources]]\nmatch = "books/*.jsonl.gz"\nname = "press"\ntier = "books"\nlicense = "CC-BY-4.0"\n'
    )
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[ingest]\nundeclared_files = "refuse"\n[[ingest.sources]]\nmatch = "*/notes.jsonl.gz"\n'
        'name = "notes"\ntier = "web"\n'
    )
    run_stage("ingest", 1, [data], tmp_path / "out", cfg)
    got = {d.text.split(",")[0]: (d.source, d.source_tier, d.license_hint) for d in docs(tmp_path / "out")}
    assert got == {"A manual": ("press", "books", "CC-BY-4.0"), "Notes": ("notes", "web", "")}


def test_a_changed_declaration_file_redoes_ingest_as_a_fresh_directory_would(tmp_path):
    """The declaration is data the stage's output depends on: rerun after it changed, ingest is
    redone (not "complete already") and its manifest is the one a fresh directory gets."""
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl_gz(data / "manuals.jsonl.gz", [{"text": "A manual, declared by its producer."}])
    declaration = data / DECLARATION_FILE
    declaration.write_text('[[sources]]\nmatch = "manuals.jsonl.gz"\nname = "press"\ntier = "books"\n')
    run_stage("ingest", 1, [data], tmp_path / "out")
    declaration.write_text('[[sources]]\nmatch = "manuals.jsonl.gz"\nname = "press"\ntier = "curated"\n')
    rerun = run_stage("ingest", 1, [data], tmp_path / "out").stderr
    assert "complete already" not in rerun
    assert [d.source_tier for d in docs(tmp_path / "out")] == ["curated"]
    run_stage("ingest", 1, [data], tmp_path / "fresh")
    rerun_m, fresh_m = manifest(tmp_path / "out"), manifest(tmp_path / "fresh")
    assert rerun_m.pop("run_info") and fresh_m.pop("run_info") and rerun_m == fresh_m


def test_a_declaration_file_that_is_not_sources_tables_is_refused_naming_it(tmp_path):
    bad = tmp_path / DECLARATION_FILE
    for text, problem in (
        ("[ingest]\nx = 1\n", "holds [[sources]] tables only"),
        ('[[sources]]\nmatch = "*"\n', "needs 'match'"),
        ("[[sources]\n", "not a readable TOML file"),
    ):
        bad.write_text(text)
        read_declaration.cache_clear()
        with pytest.raises(ValueError, match=re.escape(problem)) as e:
            declared_source(tmp_path / "a.jsonl", [])
        assert str(bad) in str(e.value)


def test_a_record_read_but_never_accounted_fails_the_shard(tmp_path):
    """The readers number every record; one that goes missing before its outcome stops the shard."""

    class Lossy(IngestStage):
        def items(self, shard):
            yield _Item(0, 0, skipped="request")
            yield _Item(2, 0, skipped="request")  # record 1 was read and dropped

    stage = Lossy(IngestConfig())
    stage._phase = SimpleNamespace(root=tmp_path)
    (tmp_path / "decisions").mkdir()
    (tmp_path / "decisions" / "s.decisions.json").write_text("{}")
    shard = InputShard(name="s", path=tmp_path / "s.warc", sha256="0" * 64)
    ctx = SimpleNamespace(side=lambda kind: None)
    with pytest.raises(StageError, match="record 1 was read but never accounted"):
        list(stage.process_shard(shard, ctx))


def test_a_build_whose_only_input_is_a_truncated_archive_ends_with_one_line_naming_it_and_why(
    tmp_path, shared_data
):
    """A repository archive cut short is quarantined (truncated_archive); when it was the only input, no
    document is left and the build says so in one line instead of making an empty snapshot."""
    cut = tmp_path / "requests-2.32.3.tar.gz"
    cut.write_bytes((shared_data / "code" / "requests-2.32.3.tar.gz").read_bytes()[:60000])
    proc = run_corpus("build", "--input", str(cut), "--out", str(tmp_path / "b"), "--ranks", "1", check=False)
    assert proc.returncode == 2 and not (tmp_path / "b" / "snapshot").exists()
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("corpus build: error:")]
    assert line == (
        "corpus build: error: no document left after stage ingest of requests-2.32.3.tar.gz: "
        "ingest read 1 document(s); dropped truncated_archive 1"
    )
