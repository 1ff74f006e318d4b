"""The loader under torchrun: real processes, gloo all-gather at the checkpoint, DCP with the model.

4 processes train to step k and checkpoint model + optimizer + loader together; the same checkpoint is
resumed on 3 and on 6 processes, which train until every bucket reaches its epoch cap. The tokens
trained on before the checkpoint plus those after it are, as a multiset, exactly the snapshot's tokens
under the caps: nothing repeated, nothing skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from snapshot_factory import CAPS, TRAIN_SETTINGS, expected_tokens, flags, write_id_snapshot

from loader import load_manifest

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
#: The training runs' settings here: the seed, and a step budget that only the epoch caps end.
RUN = dict(TRAIN_SETTINGS, seed=5, steps=100000)


def torchrun(nproc: int, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [
        TORCHRUN,
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        str(ROOT / "examples" / "train.py"),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def tokens(dump: Path, tag: str) -> Counter:
    out: Counter = Counter()
    for f in sorted(dump.glob(f"tokens-{tag}-rank*.npy")):
        out.update(np.load(f).tolist())
    return out


def batches(dump: Path, tag: str) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """(step, rank) -> the whole batch that rank delivered at that step: (tokens, loss_mask)."""
    out = {}
    for f in sorted(dump.glob(f"batches-{tag}-rank*.npz")):
        rank = int(f.stem.rsplit("rank", 1)[1])
        with np.load(f) as z:
            for key in z.files:
                if key.startswith("tokens-"):
                    step = int(key.split("-")[1])
                    out[(step, rank)] = (z[key], z[f"mask-{step}"])
    return out


@pytest.mark.slow
def test_checkpoint_on_4_processes_resumes_exactly_once_on_3_and_on_6(id_snapshot, tmp_path):
    common = flags(snapshot=id_snapshot, **RUN, dump_tokens=tmp_path, ckpt=tmp_path / "ckpt")
    k = 9
    torchrun(4, *common, *flags(save_at=k, stop_after_save=True, tag="before"))
    assert (tmp_path / "ckpt" / "latest" / "train.json").is_file()
    before = tokens(tmp_path, "before")
    assert sum(before.values()) > 0
    expected = expected_tokens(id_snapshot, load_manifest(id_snapshot)[0], CAPS)
    for world in (3, 6):
        out = torchrun(world, *common, *flags(resume=True, save_every=1000000, tag=f"after{world}"))
        assert f"starting at step {k}, loader step {k}" in out.stdout
        assert before + tokens(tmp_path, f"after{world}") == expected


@pytest.mark.slow
@pytest.mark.cluster
def test_sbatch_train_on_4_tasks_resumes_exactly_once_on_3(id_snapshot, tmp_path):
    """The same under SLURM: sbatch/train.sbatch launches the ranks with srun."""
    assert subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0, "SLURM is not up"
    work = tmp_path / "a dir; $(touch pwned)"
    work.mkdir()
    common = flags(snapshot=id_snapshot, **RUN, dump_tokens=work, ckpt=work / "ckpt", auto_resume=True)
    for ntasks, extra in (
        (4, ["--save-at", "7", "--stop-after-save", "--tag", "before"]),
        (3, ["--save-every", "1000000", "--tag", "after"]),
    ):
        proc = subprocess.run(
            [
                "sbatch",
                "--wait",
                "--parsable",
                "-n",
                str(ntasks),
                "--oversubscribe",
                f"--output={work}/train-%j.log",
                str(ROOT / "sbatch" / "train.sbatch"),
                *common,
                *extra,
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=900,
        )
        logs = "\n".join(p.read_text() for p in work.glob("train-*.log"))
        assert proc.returncode == 0, f"{proc.stderr}\n{logs[-4000:]}"
        assert f"slurm: starting at step {7 if ntasks == 3 else 0}" in logs
    assert not (ROOT / "pwned").exists() and not (work / "pwned").exists()
    expected = expected_tokens(id_snapshot, load_manifest(id_snapshot)[0], CAPS)
    assert tokens(work, "before") + tokens(work, "after") == expected


@pytest.mark.slow
def test_a_job_moves_to_a_narrower_version_at_a_checkpoint_on_4_then_3_processes(id_snapshot, tmp_path):
    """Train on a version, checkpoint, resume the same checkpoint on a narrower version (an opt-out
    applied mid-run): every still-selected token is trained on exactly as often as its bucket's cap
    says, and no token of a dropped document after the switch."""
    from test_loader_versions import SELECTION, doc_tokens, make_version

    wide = make_version(id_snapshot, tmp_path / "wide", SELECTION)
    opt_out = SELECTION.replace('"b.example.org"', '"b.example.org", "c.example.net"')
    narrow = make_version(id_snapshot, tmp_path / "narrow", opt_out)
    common = flags(**RUN, dump_tokens=tmp_path, ckpt=tmp_path / "ckpt")
    torchrun(4, *flags(snapshot=wide), *common, *flags(save_at=6, stop_after_save=True, tag="before"))
    out = torchrun(3, *flags(snapshot=narrow), *common, *flags(resume=True, save_every=1000000, tag="after"))
    assert "starting at step 6" in out.stdout
    before, after = tokens(tmp_path, "before"), tokens(tmp_path, "after")
    old, new = doc_tokens(wide, id_snapshot), doc_tokens(narrow, id_snapshot)
    for bucket, cap in CAPS.items():
        assert not any(after[t] for t in old[bucket] - new[bucket]), bucket
        assert {before[t] + after[t] for t in new[bucket]} == {cap}, bucket


@pytest.mark.slow
def test_a_job_moves_onto_a_takedown_at_a_checkpoint_on_4_then_3_processes(tmp_path):
    """Train on a version, take two documents down (their tokens zeroed in their shards), resume the
    checkpoint on the new version: every other selected token exactly as often as its bucket's cap says,
    no token of the two documents after the switch, and no shard refused by its digests."""
    from test_loader_versions import SELECTION, doc_tokens, make_version
    from test_takedown import doc_ids_of, selected_doc, take_down

    snap = tmp_path / "snap"
    write_id_snapshot(snap, {"code": 3, "web": 7, "wiki": 5})
    wide = make_version(snap, tmp_path / "wide", SELECTION)
    picks = [selected_doc(wide, b, 1) for b in ("web", "wiki")]
    gone = set().union(*(doc_ids_of(snap, p[0], p[1]) for p in picks))
    kept = {b: t - gone for b, t in doc_tokens(wide, snap).items()}
    common = flags(**RUN, dump_tokens=tmp_path, ckpt=tmp_path / "ckpt")
    torchrun(4, *flags(snapshot=wide), *common, *flags(save_at=6, stop_after_save=True, tag="before"))
    assert take_down(wide, tmp_path / "td", ids=[p[2] for p in picks]) == 0
    out = torchrun(
        3, *flags(snapshot=tmp_path / "td"), *common, *flags(resume=True, save_every=1000000, tag="after")
    )
    assert "starting at step 6" in out.stdout and "skipped" not in out.stdout + out.stderr
    before, after = tokens(tmp_path, "before"), tokens(tmp_path, "after")
    assert not any(after[t] for t in gone)
    for bucket, cap in CAPS.items():
        assert {before[t] + after[t] for t in kept[bucket]} == {cap}, bucket
