"""The checkpoint record: a :class:`LoaderRecord` saved as the JSON of its dict, read back unchanged, and
records saved before the later keys (chunk cuts, version moves, recipes) still resume."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from snapshot_factory import CAPS, MIXTURE, consume

from loader import SnapshotLoader
from loader.dataset import ResumeRefused
from loader.state import LoaderRecord

PARAMS = dict(mixture=MIXTURE, seed=5, seq_len=16, batch_size=2, epoch_caps=CAPS, run_len=2, chunk_tokens=24)
#: the keys a record of the first loader-state/1 loaders did not have
LATER_KEYS = (
    "base_snapshot_id",
    "version_dir",
    "switches",
    "chunk_cuts",
    "recipe",
    "recipe_changes",
    "shuffle_buffer",
)


def record_after(id_snapshot, world: int, steps: int) -> dict:
    loaders = [SnapshotLoader(id_snapshot, dp_rank=r, dp_world=world, **PARAMS) for r in range(world)]
    consume(loaders, Counter(), steps=steps)
    return loaders[0].global_record([ld.local_state() for ld in loaders])


def next_batches(id_snapshot, record: dict, world: int) -> list:
    loaders = [SnapshotLoader(id_snapshot, dp_rank=r, dp_world=world, **PARAMS) for r in range(world)]
    for ld in loaders:
        ld.load_record(record)
    return [ld.next_batch().tokens.tolist() for ld in loaders]


def test_a_record_reads_back_as_saved(id_snapshot):
    saved = json.loads(json.dumps(record_after(id_snapshot, 2, 5), sort_keys=True))
    assert LoaderRecord.from_dict(saved).to_dict() == saved


def test_a_record_without_the_later_keys_resumes_as_the_full_one(id_snapshot):
    full = record_after(id_snapshot, 2, 5)
    assert not full["chunk_cuts"] and full["recipe"] is None  # what the keys default to
    old = {k: v for k, v in full.items() if k not in LATER_KEYS}
    assert next_batches(id_snapshot, old, 3) == next_batches(id_snapshot, full, 3)


def test_a_record_of_another_format_is_refused(id_snapshot):
    record = {**record_after(id_snapshot, 1, 2), "format": "loader-state/0"}
    with pytest.raises(ResumeRefused, match="not a loader state record"):
        SnapshotLoader(id_snapshot, dp_rank=0, dp_world=1, **PARAMS).load_record(record)
