"""The index commit and compaction across ranks (hpc_jobs/commit_index/): the owning process begins and
commits, the job's ranks each write the partitions they own. The generation is byte-identical to the one
process's on 1, 2 and 3 ranks (P = 5: uneven blocks), and a rank killed mid-write fails the job, commits
nothing, and a rerun gives the uninterrupted bytes. Real mpiexec jobs, on a build directory laid out as a
build's last step finds it (the stages' index_records artifacts and manifests)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from corpus.formats import dedup_index as pi
from corpus.formats import dedup_keys
from corpus.formats.docshard import atomic_write_json
from corpus.model import ShardRef, StageManifest
from corpus.model.errors import UserError
from corpus.model.layout import dedup_index_dir, manifest_path, stage_dir
from runtime import build as pipeline
from tests.conftest import ROOT, run_corpus

P = 5
LABEL = "a" * 64
KINDS = ("recrawl", "lines", "band", "exact")
#: the config a minhash_dedup manifest records: what defines the band index's keys
MINHASH_CONFIG = {"num_perm": 112, "bands": 14, "rows": 8, "seed": 0, "ngram": 5}

#: the commit job, its rank 1 killed (SIGKILL) after writing its second partition, before it is complete
KILLED_JOB = """
import os, signal, sys
from mpi4py import MPI
from corpus.formats import dedup_files
from hpc_jobs.commit_index.job import main
written = 0

def hook(at):
    global written
    if at == "partition-written" and MPI.COMM_WORLD.Get_rank() == 1:
        written += 1
        if written == 2:
            os.kill(os.getpid(), signal.SIGKILL)

dedup_files._HOOK = hook
sys.exit(main(sys.argv[1:]))
"""


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def part_rows(kind: str, seed: int) -> np.ndarray:
    """One stage part's records: 2,000 random keys, the first 300 also keys of part 0 (other values: the
    smallest value of a key is kept, or the lines kind's counts summed), in random order."""
    r = np.random.default_rng(seed)
    k = dedup_keys.KINDS[kind]
    keys = r.integers(0, 256, (2000, k.key_bytes), dtype=np.uint8)
    keys[:300] = np.random.default_rng(100).integers(0, 256, (2000, k.key_bytes), dtype=np.uint8)[:300]
    if k.sums:
        return dedup_keys.records(kind, keys, dedup_keys.count_values(r.integers(1, 1000, 2000)))
    return dedup_keys.records(kind, keys, r.integers(0, 256, (2000, k.value_bytes), dtype=np.uint8))


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A build at its last step: empty indexes of P partitions, and ingest's, line_dedup's, minhash_dedup's and
    exact_dedup's manifests listing three index_records artifacts each."""
    out = tmp_path_factory.mktemp("commit") / "build"
    for kind, stage, params in pipeline.COMMITTED_INDEXES:
        side = []
        for part in range(3):
            rel = f"{pipeline.INDEX_RECORDS}/p{part:05d}.{kind}.rec"
            path = stage_dir(out, stage) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            data = part_rows(kind, 10 * part + len(kind)).tobytes()
            path.write_bytes(data)
            side.append(
                ShardRef(
                    rel, hashlib.sha256(data).hexdigest(), len(data) // dedup_keys.KINDS[kind].record.itemsize
                )
            )
        config = MINHASH_CONFIG if kind == "band" else {}
        m = StageManifest(stage, "test", config, "", (), (), tuple(side), {}, {}, run_info={"ranks": 3})
        atomic_write_json(manifest_path(stage_dir(out, stage)), m.to_dict())
        pi.PersistentIndex.create(dedup_index_dir(out, kind), kind, params(m), P)
    return out


def manifests(out: Path) -> dict[str, StageManifest]:
    return {m.stage: m for m in pipeline.read_stage_manifests(out)}


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="module")
def one_process(made, tmp_path_factory) -> dict[str, dict[str, str]]:
    """What the build's one process wrote before the job: every artifact's records through one writer of
    every partition (``add_generation``), then the switch."""
    out = copy(made, tmp_path_factory.mktemp("one") / "build")
    for kind in KINDS:
        rows = [part_rows(kind, 10 * part + len(kind)) for part in range(3)]
        pi.PersistentIndex.open(dedup_index_dir(out, kind)).add_generation(LABEL, rows)
    return {kind: tree(dedup_index_dir(out, kind)) for kind in KINDS}


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_the_generation_written_on_any_number_of_ranks_is_the_one_process_generation(
    made, one_process, tmp_path, ranks
):
    out = copy(made, tmp_path / "build")
    pipeline.commit_indexes(out, manifests(out), LABEL, ranks)
    for kind in KINDS:
        assert tree(dedup_index_dir(out, kind)) == one_process[kind], f"{kind} on {ranks} ranks"
        assert pi.PersistentIndex.open(dedup_index_dir(out, kind)).labels == [LABEL]


def test_a_rank_killed_mid_write_commits_nothing_and_the_rerun_gives_the_uninterrupted_bytes(
    made, one_process, tmp_path
):
    out = copy(made, tmp_path / "build")
    m = manifests(out)
    for kind, stage, params in pipeline.COMMITTED_INDEXES:  # what commit_indexes does before the job
        pipeline.begin_commit(out, kind, params(m[stage]), m[stage], LABEL)
    argv = pipeline.commit_job_command(out, list(KINDS), LABEL)[3:]  # after `python -m hpc_jobs.commit_index`
    job = subprocess.run(
        [pipeline.mpiexec_path(), "-n", "2", sys.executable, "-c", KILLED_JOB, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert job.returncode != 0, job.stdout + job.stderr
    partial = dedup_index_dir(out, "recrawl") / "generations" / "g000001.partial"
    assert (partial / "part-00002.rec").is_file(), "rank 1 was killed while writing its partitions"
    assert not (partial / "part-00004.json").exists(), "rank 1's last partition was never completed"
    for kind in KINDS:
        assert pi.PersistentIndex.open(dedup_index_dir(out, kind)).labels == [], "nothing committed"
    pipeline.commit_indexes(out, m, LABEL, 2)
    for kind in KINDS:
        assert tree(dedup_index_dir(out, kind)) == one_process[kind]


def test_a_damaged_index_records_artifact_is_refused_by_the_rank_reading_it(made, tmp_path):
    out = copy(made, tmp_path / "build")
    m = manifests(out)
    path = stage_dir(out, "exact_dedup") / m["exact_dedup"].side_outputs[1].path
    data = bytearray(path.read_bytes())
    data[40] ^= 1
    path.write_bytes(bytes(data))
    pipeline.begin_commit(out, "exact", dedup_keys.exact_key_params(), m["exact_dedup"], LABEL)
    with pytest.raises(UserError, match=f"{path} is not the file exact_dedup wrote"):
        pipeline.write_commit_partitions(out, "exact", LABEL, range(0, 1))


@pytest.fixture(scope="module")
def generations(made, tmp_path_factory) -> Path:
    """The build's indexes with three generations each (the second and third share keys with the first)."""
    out = copy(made, tmp_path_factory.mktemp("gens") / "build")
    for kind in KINDS:
        index = pi.PersistentIndex.open(dedup_index_dir(out, kind))
        for g in range(3):
            index = index.add_generation(f"build-{g}", [part_rows(kind, 1000 + g)])
    return out


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_corpus_compact_on_any_number_of_ranks_writes_the_one_process_compaction(
    generations, tmp_path, ranks
):
    reference = copy(generations, tmp_path / "one")
    for kind in KINDS:
        pi.PersistentIndex.open(dedup_index_dir(reference, kind)).compact()
    out = copy(generations, tmp_path / "build")
    proc = run_corpus("compact", str(out), "--ranks", str(ranks))
    assert "exact: 3 generation(s) -> 1, 5400 records" in proc.stdout
    for kind in KINDS:
        assert tree(dedup_index_dir(out, kind)) == tree(dedup_index_dir(reference, kind)), (
            f"{kind} on {ranks} ranks"
        )


def test_without_a_rank_count_the_commit_runs_on_as_many_ranks_as_the_stages_did(made):
    """``buildsteps finalize`` (the DAGs) does not know the build's ``--ranks``: its stages' manifests do."""
    assert pipeline.stage_ranks(list(manifests(made).values())) == 3
    assert pipeline.stage_ranks([]) == 1
