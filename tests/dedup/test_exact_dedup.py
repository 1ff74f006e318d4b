"""exact_dedup: the same text up to Unicode form, case and spacing = the same document; the most
trusted, then earliest copy stays, the rest are filtered as duplicates of it, identically on any rank
count."""

from __future__ import annotations

import pytest

from corpus.text.normalize import key_form, normalize_text, text_key
from tests.dedup.dedup_corpus import make_doc, perl_sections, write_stage_dir
from tests.dedup.stage_io import filtered_records, kept_docs, manifest, output_digests, run_stage


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory):
    sections = perl_sections(shared_data)[:150]
    docs = [make_doc(t, i) for i, t in enumerate(sections)]
    a, b, c = sections[0], sections[1], sections[2]
    planted = {
        # group a: same text up to case and spacing; the curated copy is as early as the earliest web
        # copy and wins on tier
        "a_late_web": make_doc(a.upper(), 1000, crawl_date="2026-06-01"),
        "a_curated": make_doc(a.replace(" ", "  ") + " \n", 1001, source="perl-doc", tier="curated"),
        # the same words with other punctuation are another text
        "a_punctuated": make_doc(a + " !!!", 1004),
        # group b: an earlier copy in a later-listed shard beats the original's crawl date
        "b_early": make_doc(b + "\n", 1002, source="mirror", crawl_date="2025-12-24"),
        # group c: the very same document twice (same doc_id): exactly one copy stays
        "c_again": make_doc(c, 2),
        # one changed word is not an exact duplicate
        "near_a": make_doc(a.replace("the", "a", 1), 1003),
    }
    docs += list(planted.values())
    in_dir = write_stage_dir(tmp_path_factory.mktemp("exact") / "in", docs, shards=5)
    return in_dir, docs, planted


def test_the_exact_key_folds_unicode_form_case_and_spacing_only():
    assert key_form("Hello,  World!\n\tÉté") == key_form("hello, world! ÉTÉ") == "hello, world! été"
    assert key_form("ﬁle") == "file"  # NFKC
    assert text_key("pi = 3.14") != text_key("pi = 314")
    assert text_key("if (a < b) return x - 1;") != text_key("if (a > b) return x + 1;")
    assert text_key("Hello World") == text_key("  hello\n world ")


def test_the_shingle_normalization_also_drops_punctuation():
    assert normalize_text("Hello,  World!\n\tÉté") == normalize_text("hello world ÉTÉ") == "hello world été"
    assert normalize_text("ﬁle") == "file"  # NFKC
    assert normalize_text("hello world") != normalize_text("hello word")


def test_keeper_is_most_trusted_then_earliest_and_copies_point_to_it(corpus, tmp_path):
    in_dir, docs, planted = corpus
    out = tmp_path / "out"
    run_stage("exact_dedup", 2, in_dir, out)
    kept = kept_docs(out)
    filtered = filtered_records(out)
    assert {r["reason"] for r in filtered} == {"exact_duplicate"}
    dup_of = {r["doc"]["url"]: r["doc"]["dup_of"] for r in filtered}
    by_url = {d.url: d for d in docs}
    a_keeper = planted["a_curated"].doc_id
    assert dup_of[planted["a_late_web"].url] == a_keeper
    assert dup_of[by_url["https://web-crawl.example.org/0"].url] == a_keeper
    assert dup_of[by_url["https://web-crawl.example.org/1"].url] == planted["b_early"].doc_id
    assert planted["near_a"].url not in dup_of and planted["a_punctuated"].url not in dup_of
    kept_urls = {d.url for d in kept}
    assert {planted["a_curated"].url, planted["b_early"].url, planted["near_a"].url} <= kept_urls
    assert sum(1 for d in kept if d.doc_id == planted["c_again"].doc_id) == 1
    keeper = next(d for d in kept if d.doc_id == a_keeper)
    assert keeper.annotation("exact_dedup", "copies").value == 3

    # every group of equal key form keeps exactly one document
    groups: dict[str, int] = {}
    for d in docs:
        groups.setdefault(key_form(d.text), 0)
    for d in kept:
        groups[key_form(d.text)] += 1
    assert set(groups.values()) == {1}
    t = manifest(out)["totals"]
    assert t["in"] == len(docs) == t["out"] + t["filtered"]["exact_duplicate"]
    assert t["filtered"]["exact_duplicate"] == len(docs) - len(groups)


def test_same_outputs_on_1_2_and_4_ranks(corpus, tmp_path):
    in_dir, _, _ = corpus
    digests = []
    for ranks in (1, 2, 4):
        run_stage("exact_dedup", ranks, in_dir, tmp_path / f"r{ranks}")
        digests.append(output_digests(tmp_path / f"r{ranks}"))
    assert digests[0] == digests[1] == digests[2]


def test_rerun_after_losing_a_finished_shard_redoes_only_that_shard(corpus, tmp_path):
    in_dir, _, _ = corpus
    out = tmp_path / "out"
    run_stage("exact_dedup", 2, in_dir, out)
    first = output_digests(out)
    checkpoint = (out / "work" / "phase" / "complete.json").stat().st_mtime_ns
    (out / "manifest.json").unlink()  # as if a rank died before the end
    (out / "stats" / "part-003.json").unlink()
    (out / "shards" / "part-003.jsonl.zst").unlink()
    again = run_stage("exact_dedup", 3, in_dir, out)
    assert "1 shards processed" in again.stderr
    assert (out / "work" / "phase" / "complete.json").stat().st_mtime_ns == checkpoint, (
        "global phase was redone"
    )
    assert output_digests(out) == first


@pytest.mark.parametrize("stage", ["exact_dedup", "line_dedup", "minhash_dedup"])
def test_empty_and_single_document_shards_pass_through(stage, tmp_path):
    docs = [make_doc("just one short document here", 1)]
    in_dir = write_stage_dir(tmp_path / "in", docs, shards=3)  # two of the three shards are empty
    run_stage(stage, 2, in_dir, tmp_path / "out")
    m = manifest(tmp_path / "out")
    assert m["totals"]["in"] == m["totals"]["out"] == 1 and len(m["outputs"]) == 3
    assert [d.text for d in kept_docs(tmp_path / "out")] == [docs[0].text]


def test_ascii_fast_path_of_normalization_equals_the_regex_rule(shared_data):
    import re
    import unicodedata

    def by_regex(text: str) -> str:
        text = re.sub(r"[^\w\s]+", "", unicodedata.normalize("NFKC", text).lower())
        return re.sub(r"\s+", " ", text).strip()

    texts = [t for t in perl_sections(shared_data) if t.isascii()][:500]
    texts += ["".join(map(chr, range(128))) * 3, "A\x1cB\x1fc_d  e-f\t\n"]
    assert [normalize_text(t) for t in texts] == [by_regex(t) for t in texts]


@pytest.mark.parametrize("stage", ["exact_dedup", "minhash_dedup"])
def test_a_stage_of_a_build_whose_eval_holdout_is_missing_stops_in_one_line(stage, tmp_path, shared_data):
    """The eval holdout is handed over by the build layout (``<build>/stages/extract``): a dedup stage
    reading a build's stage while the build has no complete extract stage stops, naming it, rather
    than tagging nothing."""
    sections = perl_sections(shared_data)[:6]
    build = tmp_path / "b"
    in_dir = write_stage_dir(
        build / "stages" / "line_dedup", [make_doc(t, i) for i, t in enumerate(sections)]
    )
    proc = run_stage(stage, 2, in_dir, build / "stages" / stage, check=False)
    assert proc.returncode != 0
    (line,) = [x for x in proc.stderr.splitlines() if "eval holdout" in x]
    assert str(build / "stages" / "extract") in line and "run the build's extract stage first" in line
    assert not (build / "stages" / stage / "manifest.json").exists()


def test_the_parts_of_an_exchange_follow_the_corpus_size_never_its_file_count(tmp_path, shared_data):
    """The same 40 documents in 2 or in 8 files: exact_dedup's groups and minhash_dedup's bucket parts
    are ceil(rows / part_rows) either way (40 / 16 documents; 40 x 14 / 200 band rows), and without a
    code document minhash_dedup never starts its repository graph."""
    from tests.support.interruptions import completed_parts

    docs = [make_doc(t, i) for i, t in enumerate(perl_sections(shared_data)[:40])]
    cfg = tmp_path / "parts.toml"
    cfg.write_text("[exact_dedup]\npart_rows = 16\n[minhash_dedup]\npart_rows = 200\n")
    for files in (2, 8):
        in_dir = write_stage_dir(tmp_path / f"in-{files}", docs, shards=files)
        for stage, step in (("exact_dedup", "groups"), ("minhash_dedup", "buckets")):
            out = tmp_path / f"{stage}-{files}"
            run_stage(stage, 2, in_dir, out, cfg)
            assert completed_parts(out, step) == 3, (stage, files)
        phase = tmp_path / f"minhash_dedup-{files}" / "work" / "phase"
        assert (phase / "labels").is_dir() and not (phase / "repos").exists()
