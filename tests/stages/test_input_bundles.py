"""A crawl of many small files is read in bundles of consecutive files: every later stage's cost per
unit is paid per bundle, and the documents, verdicts and counts are those of the files read one by one."""

from __future__ import annotations

from collections import Counter

import pytest

from hpc_jobs.ingest.bundles import bundled, key_prefixes
from runtime.input_shard import InputShard, raw_input_shard
from tests.stages.chain import docs, manifest, reconciles, run_stage
from tests.stages.warc_fixtures import real_pages, warc_bytes, write_jsonl_gz


def files(tmp_path, sizes: list[int]):
    out = []
    for k, n in enumerate(sizes):
        p = tmp_path / f"f{k:03d}.jsonl"
        p.write_bytes(b"x" * n)
        out.append(raw_input_shard(p))
    return out


def test_a_listing_of_at_most_min_units_units_is_read_a_unit_per_file(tmp_path):
    units = files(tmp_path, [100] * 8)
    assert bundled(units, 1 << 20, 8) == units
    assert bundled(units, 0, 2) == units


def test_runs_of_consecutive_small_files_become_bundles_of_about_the_target(tmp_path):
    units = files(tmp_path, [1000] * 40)
    out = bundled(units, 1 << 20, 4)  # 40,000 bytes in at least 4 units: 10,000 bytes each
    assert [len(u.members) for u in out] == [10, 10, 10, 10]
    assert [f for u in out for f in u.files] == units  # every file once, in listing order
    assert [len(u.members) for u in bundled(units, 3000, 4)] == [3] * 13 + [0]  # the last file alone
    assert bundled(units, 3000, 4)[-1] == units[-1]


def test_a_bundle_is_sized_by_what_its_members_carry_not_by_its_files_again(tmp_path):
    units = files(tmp_path, [1000] * 6)
    assert [u.weight for u in units] == [1000] * 6  # each file sized once, by the rank that digested it
    out = bundled(units, 2000, 2)
    for u in units:
        u.path.unlink()  # a bundle's files are not looked at again to size it (10^4 stats a rank)
    assert [u.weight for u in out] == [2000, 2000, 2000]


def test_a_large_file_a_piece_of_a_file_and_a_repository_stay_units_of_their_own(tmp_path):
    units = files(tmp_path, [1000] * 9 + [50_000] + [1000] * 9)
    (tmp_path / "repo").mkdir()
    repo = InputShard(name="repo-0", path=tmp_path / "repo", sha256="0" * 64)
    piece = InputShard(name="big-u00000", path=units[1].path, sha256="1" * 64, span=(0, 10))
    out = bundled([*units, repo, piece], 1 << 20, 4)
    assert units[9] in out and repo in out and piece in out
    assert all(units[9] not in u.members for u in out)
    assert sorted(f.name for u in out for f in u.files) == sorted(u.name for u in [*units, repo, piece])


def test_a_bundle_is_named_by_its_files_and_their_contents(tmp_path):
    units = files(tmp_path, [1000] * 10)
    names = [u.name for u in bundled(units, 2000, 2)]
    assert names == [u.name for u in bundled(list(units), 2000, 2)]
    assert len(set(names)) == len(names) and names[0].startswith("f000-x2-")
    (tmp_path / "f001.jsonl").write_bytes(b"y" * 1000)
    changed = [*units[:1], raw_input_shard(tmp_path / "f001.jsonl"), *units[2:]]
    assert [u.name for u in bundled(changed, 2000, 2)][1:] == names[1:]
    assert bundled(changed, 2000, 2)[0].name != names[0]
    assert [p for p, _ in key_prefixes(bundled(units, 2000, 2)[0])] == ["0:", "1:"]
    assert key_prefixes(units[0]) == [("", units[0])]


# --- the stage --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def many_files(shared_data, tmp_path_factory):
    """24 small crawl files of three pages each, 6 recrawl files fetching pages of earlier files again
    (unchanged), an identical copy of one crawl file and 4 curated JSONL files."""
    root = tmp_path_factory.mktemp("bundles")
    inputs = root / "in"
    inputs.mkdir()
    pages = real_pages(shared_data, 72)
    for k in range(24):
        (inputs / f"crawl-{k:02d}.warc.gz").write_bytes(warc_bytes(pages[3 * k : 3 * k + 3]))
    for k in range(6):
        again = pages[k * 11 : k * 11 + 2]
        (inputs / f"recrawl-{k:02d}.warc.gz").write_bytes(warc_bytes(again, date="2026-06-01T00:00:00Z"))
    (inputs / "crawl-05-copy.warc.gz").write_bytes((inputs / "crawl-05.warc.gz").read_bytes())
    for k in range(4):
        texts = [{"text": f"Curated note {k}-{i}. " * 40, "id": f"{k}-{i}"} for i in range(5)]
        write_jsonl_gz(inputs / f"notes-{k}.jsonl.gz", texts)
    bundles = root / "bundles.toml"
    bundles.write_text("[ingest]\nbundle_min_units = 4\n")
    files_alone = root / "alone.toml"
    files_alone.write_text("[ingest]\nbundle_bytes = 0\n")
    run_stage("ingest", 1, [inputs], root / "alone", files_alone)
    run_stage("ingest", 1, [inputs], root / "one", bundles)
    run_stage("ingest", 2, [inputs], root / "two", bundles)
    return root


def fates(stage_dir):
    kept = sorted((d.doc_id, d.url, d.source, d.source_tier, d.text_digest) for d in docs(stage_dir))
    filtered = sorted((r["doc"]["doc_id"], r["reason"]) for r in docs(stage_dir, "filtered"))
    return kept, filtered


def test_bundles_keep_every_document_verdict_and_count_of_the_files_read_one_by_one(many_files):
    alone, one = manifest(many_files / "alone"), manifest(many_files / "one")
    assert len(alone["outputs"]) == 35 and len(one["outputs"]) <= 8
    assert one["totals"] == alone["totals"] and reconciles(one["totals"])
    assert one["totals"]["filtered"]["recrawl_duplicate"] == 12 == one["extra"]["recrawl_duplicates"]
    assert fates(many_files / "one") == fates(many_files / "alone")
    # the identical copy's pages are kept twice (exact_dedup's business), as read alone
    assert Counter(d.url for d in docs(many_files / "one")).most_common(1)[0][1] == 2


def test_a_bundled_ingest_records_every_file_it_read(many_files):
    alone, one = manifest(many_files / "alone"), manifest(many_files / "one")
    assert sorted(i["sha256"] for i in one["inputs"]) == sorted(i["sha256"] for i in alone["inputs"])
    assert sorted(i["path"] for i in one["inputs"]) == sorted(i["path"] for i in alone["inputs"])
    assert one["extra"]["sources"] == alone["extra"]["sources"] and len(one["extra"]["sources"]) == 35


def test_bundles_are_the_same_bytes_on_any_rank_count(many_files):
    one, two = manifest(many_files / "one"), manifest(many_files / "two")
    assert [o["sha256"] for o in one["outputs"]] == [o["sha256"] for o in two["outputs"]]
    assert all(two["run_info"]["processed_by_rank"][r] for r in ("0", "1"))
    assert one["totals"] == two["totals"]
