"""A stage's progress as a person reads it: units done of units, MB of MB, MB/s and an ETA, from rank
0, gathered from the ranks' files without an MPI call."""

from __future__ import annotations

import re

from corpus.model.layout import work_dir
from runtime.progress import RankProgress, progress_line, read_counts
from tests.stages.chain import run_stage
from tests.stages.warc_fixtures import write_jsonl_gz


def test_the_line_counts_what_is_done_and_the_eta_assumes_the_rest_goes_as_fast():
    counts = {"units": 2, "bytes": 20_000_000, "skipped_units": 1, "skipped_bytes": 10_000_000}
    line = progress_line(counts, units=6, weight=60_000_000, elapsed=10.0)
    # 20 MB in 10 s this run: 2 MB/s; 30 MB left: 15 s
    assert line == "3/6 units, 30.0 of 60.0 MB, 2.00 MB/s, ETA 0m15s"
    assert "ETA" not in progress_line(counts | {"units": 5}, units=6, weight=60_000_000, elapsed=10.0)


def test_the_ranks_counts_are_summed_and_a_rank_not_yet_written_counts_as_nothing(tmp_path):
    a, b = RankProgress(tmp_path, 0), RankProgress(tmp_path, 2)
    a.done(100)
    b.done(50, skipped=True)
    (tmp_path / "r1.json").write_text("{half a wri")
    assert read_counts(tmp_path, 4) == {"units": 1, "bytes": 100, "skipped_units": 1, "skipped_bytes": 50}


def test_a_stage_on_two_ranks_reports_its_units_and_bytes_then_tidies_up(tmp_path, monkeypatch):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for k in range(3):
        write_jsonl_gz(inputs / f"part{k}.jsonl.gz", [{"text": f"document {k}.{j} " * 40} for j in range(50)])
    total = sum(p.stat().st_size for p in inputs.iterdir())
    monkeypatch.setenv("CORPUS_PROGRESS_S", "0.05")
    stderr = run_stage("ingest", 2, [inputs], tmp_path / "out").stderr
    lines = [ln for ln in stderr.splitlines() if "progress:" in ln]
    assert lines and all("[ingest r0/2]" in ln for ln in lines)
    assert re.search(
        rf"progress: 3/3 units, {total / 1e6:.1f} of {total / 1e6:.1f} MB, [0-9.]+ MB/s$", lines[-1]
    )
    assert not (work_dir(tmp_path / "out") / "progress").exists()
