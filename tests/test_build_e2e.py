"""`corpus build` on the bundled sample: the whole pipeline, end to end, on real MPI ranks."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.conftest import SAMPLE, run_corpus

pytestmark = pytest.mark.slow

SNAPSHOT_LINE = re.compile(r"^snapshot_id sha256:[0-9a-f]{64}$")


def sample_inputs(root=SAMPLE):
    return [str(p) for p in sorted(root.iterdir()) if p.is_dir()]


def build(out, ranks, *extra, inputs=None):
    proc = run_corpus("build", "--input", *(inputs or sample_inputs()), "--out", str(out), "--ranks", str(ranks), *extra)
    last = proc.stdout.strip().splitlines()[-1]
    assert SNAPSHOT_LINE.match(last), last
    return last.split()[1], proc


@pytest.fixture(scope="module")
def two_rank_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("build") / "b2"
    snapshot_id, _ = build(out, 2)
    return out, snapshot_id


def test_same_snapshot_id_on_any_rank_count_and_input_location(two_rank_build, tmp_path):
    _, id2 = two_rank_build
    moved = tmp_path / "elsewhere"
    shutil.copytree(SAMPLE, moved)
    id1, _ = build(tmp_path / "b1", 1, inputs=sample_inputs(moved))
    id3, _ = build(tmp_path / "b3", 3)
    assert id1 == id2 == id3


def test_every_stage_reconciles_in_the_report(two_rank_build):
    out, _ = two_rank_build
    counts = json.loads(run_corpus("report", str(out), "--json").stdout)
    from corpus.pipeline import PIPELINE

    assert list(counts) == list(PIPELINE)
    previous_out = None
    for stage, c in counts.items():
        assert c["in"] == c["out"] + sum(c["filtered"].values()) + sum(c["quarantined"].values()), stage
        if previous_out is not None:
            assert c["in"] == previous_out, f"{stage} did not receive what the stage before it kept"
        previous_out = c["out"]
    assert counts["ingest"]["quarantined"], "the sample's malformed WARC must be quarantined with a reason"
    assert counts["exact_dedup"]["filtered"].get("exact_duplicate", 0) > 0
    assert counts["minhash_dedup"]["filtered"].get("near_duplicate", 0) > 0


def test_a_rebuild_does_no_work_and_gives_the_same_id(two_rank_build):
    out, snapshot_id = two_rank_build
    again, proc = build(out, 2)
    assert again == snapshot_id
    from corpus.pipeline import PIPELINE

    assert proc.stderr.count("nothing to do") == len(PIPELINE)


def test_a_new_seed_gives_a_new_snapshot(two_rank_build, tmp_path):
    out, snapshot_id = two_rank_build
    shutil.copytree(out, tmp_path / "b", symlinks=True)
    reseeded, _ = build(tmp_path / "b", 2, "--seed", "1")
    assert reseeded != snapshot_id
