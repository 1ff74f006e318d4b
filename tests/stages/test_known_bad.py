"""Known-bad content (issue 34, item 1): an operator's list of exact keys of texts removes every copy
of them at extract, before any later stage or candidate shard sees them; only hashes, the source and
counts are kept (a quarantine record without text, URL or doc_id), and the build records the list by
its digest, never its path. A list of another key version or a malformed line is refused in one line."""

from __future__ import annotations

import json
import subprocess

import pytest

from corpus.model.errors import UserError
from corpus.text.known_bad import read_known_bad, spelt_key
from corpus.text.normalize import KEY_VERSION
from tests.conftest import run_corpus
from tests.stages.chain import docs, manifest, reconciles, run_stage
from tests.stages.warc_fixtures import real_pages, warc_bytes, write_jsonl_gz

BAD = "This paragraph stands for content nobody may keep, word for word.\nIts second line, too.\n" * 3
#: a longer text standing for content nobody may keep, and a copy of it with two words changed
LONG = " ".join(
    f"Sentence {n} of the long text says that {w} rivers cross the {w} plain before the sea."
    for n, w in enumerate(["old", "wide", "cold", "slow", "green", "dark", "calm", "deep", "bright", "quiet"])
)
EDITED = LONG.replace("Sentence 3 ", "Line 3 ").replace("the dark plain", "the dark valley")


def test_a_copy_that_differs_in_case_and_spacing_has_the_same_entry():
    assert spelt_key(BAD) == spelt_key("  " + BAD.upper().replace("\n", "\n\n  ")) != spelt_key(BAD + "x")
    assert spelt_key(BAD).startswith(f"{KEY_VERSION}:") and len(spelt_key(BAD).split(":")[1]) == 32


@pytest.mark.parametrize(
    "line, why",
    [
        ("not-a-key", "line 2: not a key VERSION:32-HEX-DIGITS or VERSION:near:SIGNATURE"),
        ("v0:" + "ab" * 16, "line 2: a key of version v0"),
    ],
)
def test_a_malformed_list_is_refused_naming_the_line(tmp_path, line, why):
    (tmp_path / "list.txt").write_text(f"# keys\n{line}\n")
    with pytest.raises(UserError, match=why) as e:
        read_known_bad(tmp_path / "list.txt")
    assert "\n" not in str(e.value)


def test_extract_removes_every_copy_and_keeps_only_hashes(tmp_path, shared_data):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "pages.warc.gz").write_bytes(warc_bytes(real_pages(shared_data, 2)))
    fine = "An innocent note about rivers and the towns along them, long enough to be kept as a note.\n"
    write_jsonl_gz(
        tmp_path / "in" / "notes.jsonl.gz",
        [
            {"url": "https://notes.example/bad", "text": BAD},
            {"url": "https://mirror.example/bad-copy", "text": BAD.upper().replace("\n", "\n\n")},
            {"url": "https://notes.example/fine", "text": fine},
            {"url": "https://notes.example/edited", "text": EDITED},
        ],
    )
    (tmp_path / "bad.txt").write_text(BAD)
    (tmp_path / "long.jsonl").write_text(json.dumps({"text": LONG}) + "\n")
    made = run_corpus("known-bad-keys", str(tmp_path / "bad.txt"), str(tmp_path / "long.jsonl"), "--near")
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "known-bad.txt").write_text("# from the partner's tool\n" + made.stdout)
    (tmp_path / "cfg.toml").write_text(
        f'[extract]\nknown_bad_keys = "{tmp_path / "lists" / "known-bad.txt"}"\n'
    )
    run_stage("ingest", 1, [tmp_path / "in"], tmp_path / "ingest")
    run_stage("extract", 2, [tmp_path / "ingest"], tmp_path / "extract", tmp_path / "cfg.toml")

    m = manifest(tmp_path / "extract")
    assert reconciles(m["totals"]) and m["totals"]["in"] == 6
    kept = {d.url for d in docs(tmp_path / "extract")}
    assert "https://notes.example/fine" in kept and len(kept) == 3  # the two pages and the fine note
    records = list(docs(tmp_path / "extract", "quarantine"))
    assert sorted(r["reason"] for r in records) == ["known_bad_content"] * 2 + ["known_bad_near"]
    assert {r["detail"] for r in records if r["reason"] == "known_bad_content"} == {spelt_key(BAD)}
    (near,) = [r for r in records if r["reason"] == "known_bad_near"]
    entry, similarity = near["detail"].split()
    assert entry.startswith("near:") and 0.8 <= float(similarity) < 1.0  # two words of 150 changed
    assert all(r["url"] == r["input_name"] == "" and r["source"] == "web" for r in records)
    # no byte of the text is anywhere in the stage's output
    assert len(made.stdout.split()) == 2 + 2  # BAD and LONG, each an exact and a near entry
    snippet = b"content nobody may keep"
    for path in (tmp_path / "extract").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert snippet not in data and snippet.upper() not in data and b"rivers cross" not in data, path
    config = m["config"]
    assert config["known_bad_keys"] == "known-bad.txt"  # its name, never its path
    assert config["known_bad_sha256"] == read_known_bad(tmp_path / "lists" / "known-bad.txt").digest


def test_a_list_of_another_key_version_stops_the_stage_in_one_line(tmp_path):
    (tmp_path / "list.txt").write_text("v0:" + "00" * 16 + "\n")
    (tmp_path / "cfg.toml").write_text(f'[extract]\nknown_bad_keys = "{tmp_path / "list.txt"}"\n')
    (tmp_path / "in").mkdir()
    write_jsonl_gz(tmp_path / "in" / "n.jsonl.gz", [{"url": "https://n.example/", "text": "text"}])
    proc = run_stage("extract", 1, [tmp_path / "in"], tmp_path / "out", tmp_path / "cfg.toml", check=False)
    assert proc.returncode != 0 and "a key of version v0" in proc.stderr
    assert json.dumps(BAD) not in proc.stderr and isinstance(proc, subprocess.CompletedProcess)
