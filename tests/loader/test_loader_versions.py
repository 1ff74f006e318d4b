"""The loader reads versions: a version's stream is the selected documents of the build's shards, each
position exactly once per bucket epoch, at any world size, and never a token of an unselected document.

The id snapshot makes every token a distinct id, so "never an unselected document" is checked token by
token: the delivered multiset must equal the selected documents' tokens (plus one EOS per selected
document per epoch), nothing more.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from snapshot_factory import CAPS, EOS, MIXTURE, consume, write_id_snapshot

from corpus.formats.megatron import read_index
from corpus.model.errors import UserError
from corpus.select.selection import parse_inline
from corpus.version.open import open_version
from corpus.version.query import evaluate
from corpus.version.write import version_manifest, write_version
from loader import SnapshotLoader
from loader.dataset import ResumeRefused
from loader.state import shards_read
from loader.versions import LoaderVersion

SELECTION = 'exclude_hosts = ["b.example.org"]\nmin_scores = { quality = 0.3 }\n'


def make_version(snapshot: Path, out: Path, selection: str) -> Path:
    """What ``corpus version SNAPSHOT --select-inline SELECTION --out OUT`` writes."""
    version = open_version(snapshot)
    sel = parse_inline(selection)
    bits = evaluate(version, sel)
    write_version(version, version_manifest(version, sel, bits, []), bits, out, version.base_dir)
    return out


def selected_tokens(version_dir: Path, caps: dict[str, int]) -> Counter:
    """Every token of every selected document, once per bucket epoch up to its cap, and their EOS."""
    v = open_version(version_dir)
    out: Counter = Counter()
    for shard, ref in zip(v.base.shards, v.shards, strict=True):
        idx = read_index(v.base_dir / shard.files["idx"])
        toks = np.fromfile(v.base_dir / shard.path, dtype=idx.dtype)
        bits = v.selected(ref)
        cap = caps[shard.bucket]
        for d in np.flatnonzero(bits):
            start = int(idx.offsets[d]) // idx.dtype.itemsize
            out.update({int(t): cap for t in toks[start : start + int(idx.lengths[d])]})
        out[EOS] += cap * int(bits.sum())
    return out


@pytest.fixture(scope="module")
def version_of_ids(id_snapshot: Path, tmp_path_factory) -> Path:
    return make_version(id_snapshot, tmp_path_factory.mktemp("version") / "v", SELECTION)


def make(root: Path, rank: int, world: int, **kw) -> SnapshotLoader:
    params = dict(
        mixture=MIXTURE, seed=5, seq_len=16, batch_size=2, epoch_caps=CAPS, run_len=2, chunk_tokens=24
    )
    params.update(kw)
    return SnapshotLoader(root, dp_rank=rank, dp_world=world, **params)


def test_a_loader_opens_a_version_from_its_directory_or_manifest_and_a_snapshot_as_none(
    version_of_ids, id_snapshot, tmp_path
):
    """A version is opened from one read of its manifest; a snapshot's manifest is not a version."""
    for ref in (version_of_ids, version_of_ids / "manifest.json"):
        opened = LoaderVersion.open(ref)
        assert opened is not None and opened.snapshot_id == open_version(version_of_ids).snapshot_id
    assert LoaderVersion.open(id_snapshot) is None and LoaderVersion.open(tmp_path) is None


def test_the_selection_really_drops_documents_of_every_bucket(version_of_ids, id_snapshot):
    v = open_version(version_of_ids)
    counts = {s.name: (d, s.docs) for s, d, _ in v.selected_counts()}
    assert all(0 < d < n for d, n in counts.values() if n > 3)
    assert sum(d for d, _ in counts.values()) < sum(n for _, n in counts.values())


@pytest.mark.parametrize("world", [1, 3])
def test_a_version_delivers_each_selected_token_once_per_epoch_and_nothing_unselected(version_of_ids, world):
    delivered = Counter()
    consume([make(version_of_ids, r, world) for r in range(world)], delivered)
    assert delivered == selected_tokens(version_of_ids, CAPS)


@pytest.mark.parametrize("case", range(4))
def test_resume_of_a_version_at_another_world_size_is_exactly_once(version_of_ids, case):
    rnd = random.Random(case)
    world, new_world = rnd.randint(1, 5), rnd.randint(1, 5)
    delivered = Counter()
    first = [make(version_of_ids, r, world) for r in range(world)]
    consume(first, delivered, steps=rnd.randint(1, 25))
    record = first[0].global_record([ld.local_state() for ld in first])
    assert record["snapshot_id"] == open_version(version_of_ids).snapshot_id
    resumed = [make(version_of_ids, r, new_world) for r in range(new_world)]
    for ld in resumed:
        ld.load_record(record)
    consume(resumed, delivered)
    assert delivered == selected_tokens(version_of_ids, CAPS), (world, new_world)


def test_the_natural_mixture_of_a_version_is_its_selected_tokens(version_of_ids):
    ld = SnapshotLoader(version_of_ids, dp_rank=0, dp_world=1)
    v = open_version(version_of_ids)
    per_bucket: Counter = Counter()
    for s, _, t in v.selected_counts():
        per_bucket[s.bucket] += t
    assert ld.mixture == {b: float(t) for b, t in per_bucket.items()}


def test_a_version_whose_build_changed_or_moved_is_refused_naming_the_shard(tmp_path):
    snap = tmp_path / "snap"
    write_id_snapshot(snap, {"web": 2}, seed=1)
    version = make_version(snap, tmp_path / "v", "")
    write_id_snapshot(snap, {"web": 2}, seed=2)  # rebuilt in place: other tokens
    with pytest.raises(UserError, match=r"shard web-00000 of its build has changed"):
        SnapshotLoader(version, dp_rank=0, dp_world=1)
    snap.rename(tmp_path / "elsewhere")
    with pytest.raises(UserError, match=r"its build's snapshot is not at .*snap \(moved or deleted\)"):
        SnapshotLoader(version, dp_rank=0, dp_world=1)


def doc_tokens(version_dir: Path | None, snapshot: Path) -> dict[str, set[int]]:
    """The token ids of the selected documents (every document for the build itself), by bucket."""
    out: dict[str, set[int]] = {}
    if version_dir is None:
        from loader import load_manifest

        manifest, root = load_manifest(snapshot)
        for s in manifest.shards:
            out.setdefault(s.bucket, set()).update(int(t) for t in np.fromfile(root / s.path, dtype=np.int32))
        return out
    v = open_version(version_dir)
    for shard, ref in zip(v.base.shards, v.shards, strict=True):
        if ref.name in v.tombstones:
            continue
        idx = read_index(v.base_dir / shard.files["idx"])
        toks = np.fromfile(v.base_dir / shard.path, dtype=idx.dtype)
        for d in np.flatnonzero(v.selected(ref)):
            start = int(idx.offsets[d]) // idx.dtype.itemsize
            out.setdefault(shard.bucket, set()).update(
                int(t) for t in toks[start : start + int(idx.lengths[d])]
            )
    return out


def move(
    first_root: Path, then_root: Path, world: int, new_world: int, steps: int, **load
) -> tuple[Counter, Counter, dict]:
    """Train ``steps`` steps on ``first_root`` with ``world`` ranks, checkpoint, resume on ``then_root``
    with ``new_world`` ranks and train to the end: what each half delivered, and the last record."""
    before, after = Counter(), Counter()
    first = [make(first_root, r, world) for r in range(world)]
    consume(first, before, steps=steps)
    record = first[0].global_record([ld.local_state() for ld in first])
    resumed = [make(then_root, r, new_world) for r in range(new_world)]
    for ld in resumed:
        ld.load_record(record, **load)
    consume(resumed, after)
    return before, after, resumed[0].global_record([ld.local_state() for ld in resumed])


@pytest.mark.parametrize(("steps", "world", "new_world"), [(6, 4, 3), (20, 2, 5), (1, 3, 3)])
def test_moving_to_a_narrower_version_at_a_checkpoint(
    id_snapshot, version_of_ids, tmp_path, steps, world, new_world
):
    """Positions read stay read, documents the new version drops are never read again, every other
    position of the open epochs is read exactly once (the caps count epochs across the move)."""
    narrower = make_version(id_snapshot, tmp_path / "narrow", SELECTION + 'langs = ["en"]\n')
    before, after, record = move(version_of_ids, narrower, world, new_world, steps)
    old, new = doc_tokens(version_of_ids, id_snapshot), doc_tokens(narrower, id_snapshot)
    for bucket, cap in CAPS.items():
        dropped = old[bucket] - new[bucket]
        assert dropped and not any(after[t] for t in dropped), bucket
        assert {before[t] + after[t] for t in new[bucket]} == {cap}, bucket
    assert record["switches"] == [
        {
            "step": steps,
            "from": open_version(version_of_ids).snapshot_id,
            "to": open_version(narrower).snapshot_id,
        }
    ]


def test_a_run_on_the_build_itself_can_move_to_a_version(id_snapshot, version_of_ids):
    before, after, _ = move(id_snapshot, version_of_ids, 2, 3, 9)
    everything, kept = doc_tokens(None, id_snapshot), doc_tokens(version_of_ids, id_snapshot)
    for bucket, cap in CAPS.items():
        assert not any(after[t] for t in everything[bucket] - kept[bucket])
        assert {before[t] + after[t] for t in kept[bucket]} == {cap}


def test_resuming_across_a_tombstone_of_a_shard_already_read_is_refused_unless_told_to_go_on(
    id_snapshot, version_of_ids, tmp_path
):
    from cli.main import main as corpus

    first = [make(version_of_ids, r, 2) for r in range(2)]
    consume(first, Counter(), steps=15)
    record = first[0].global_record([ld.local_state() for ld in first])
    v = LoaderVersion.open(version_of_ids)
    read = [v.name(i) for i in sorted(shards_read(first[0].layout, record))]
    assert read, "15 steps read some shard"
    assert (
        corpus(
            [
                "tombstone",
                str(version_of_ids),
                "--shard",
                read[0],
                "--reason",
                "takedown 7",
                "--out",
                str(tmp_path / "t"),
            ]
        )
        == 0
    )
    with pytest.raises(
        ResumeRefused, match=rf"read shard {read[0]}, which version .* tombstones \(takedown 7\)"
    ):
        make(tmp_path / "t", 0, 2).load_record(record)
    resumed = [make(tmp_path / "t", r, 2) for r in range(2)]
    for ld in resumed:
        ld.load_record(record, allow_tombstoned=True)
    after = Counter()
    consume(resumed, after)
    v_t = open_version(tmp_path / "t")
    gone = next(s for s in v_t.base.shards if s.path.endswith(f"{read[0]}.bin"))
    assert not any(after[int(t)] for t in np.fromfile(v_t.base_dir / gone.path, dtype=np.int32))
