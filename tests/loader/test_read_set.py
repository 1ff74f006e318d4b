"""Which documents a run had read by a checkpoint, and the step that first read each
(``loader.read_set``), against what the run really delivered.

Every token of the id snapshot is distinct, so the delivered batches name their documents: the oracle
is the run itself, stepped rank by rank, resumed on another world between its checkpoints. The answer
under test is arithmetic on the records alone; every document of the snapshot is asked about.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from snapshot_factory import CAPS, EOS, MIXTURE, checkpoint, lockstep, recipe_toml
from test_loader_versions import make_version

from corpus.formats.megatron import read_index
from corpus.select.recipe import Recipe, parse_recipe
from loader import SnapshotLoader, load_manifest
from loader.read_set import FirstRead, RunReads

OPTS = dict(mixture=MIXTURE, seed=7, seq_len=16, batch_size=2, epoch_caps=CAPS, run_len=2, chunk_tokens=24)


def document_of_token(snapshot: Path) -> dict[int, tuple[int, int]]:
    """Token id -> (shard, document) of the id snapshot."""
    manifest, root = load_manifest(snapshot)
    out = {}
    for i, shard in enumerate(manifest.shards):
        idx = read_index(root / shard.files["idx"])
        toks = np.fromfile(root / shard.path, dtype=idx.dtype)
        ends = np.cumsum(idx.lengths.astype(np.int64))
        for d, (a, b) in enumerate(zip(ends - idx.lengths, ends, strict=True)):
            out.update({int(t): (i, d) for t in toks[a:b]})
    return out


def run(
    source: Path, legs: list[tuple[int, int]], snapshot: Path, recipe: Recipe | None = None, **kw
) -> tuple[list[dict], dict[tuple[int, int], int]]:
    """A run of ``source`` (``snapshot`` or a version of it; with ``recipe``, its phases) over ``legs`` of
    (world, steps), checkpointed and resumed at the end of each: its records and the step each document
    was first delivered at."""
    owner = document_of_token(snapshot)
    first: dict[tuple[int, int], int] = {}
    records: list[dict] = []
    for world, steps in legs:
        if recipe is not None:
            loaders = [SnapshotLoader.from_recipe(recipe, source, 2, r, world, **kw) for r in range(world)]
        else:
            loaders = [SnapshotLoader(source, dp_rank=r, dp_world=world, **OPTS, **kw) for r in range(world)]
        for ld in loaders:
            if records:
                ld.load_record(records[-1])
        for batches in lockstep(loaders, steps):
            for b in batches:
                for t in b.tokens[b.loss_mask].tolist():
                    if t != EOS:
                        first.setdefault(owner[t], b.step)
        records.append(checkpoint(loaders))
    return records, first


def every_document(snapshot: Path) -> list[tuple[int, int]]:
    manifest, _ = load_manifest(snapshot)
    return [(i, d) for i, s in enumerate(manifest.shards) for d in range(s.docs)]


@pytest.mark.parametrize(
    "options",
    [{}, {"shuffle_buffer": 3}, {"packing_window": 4}, {"shuffle_buffer": 3, "packing_window": 4}],
    ids=["plain", "shuffled", "packed", "shuffled-packed"],
)
def test_each_document_read_and_the_step_that_first_read_it_are_what_the_run_delivered(id_snapshot, options):
    records, delivered = run(id_snapshot, [(2, 9), (3, 7), (1, 6)], id_snapshot, **options)
    reads = RunReads(id_snapshot, records)
    docs = every_document(id_snapshot)
    answered = dict(zip(docs, reads.first_reads(docs), strict=True))
    assert {d: f.step for d, f in answered.items() if f is not None} == delivered
    assert 0 < len(delivered) < len(answered)  # some read, some not yet


def test_one_record_alone_says_what_was_read_and_brackets_the_first_step(id_snapshot):
    records, delivered = run(id_snapshot, [(2, 9), (3, 7)], id_snapshot)
    alone = RunReads(id_snapshot, records[-1:])  # resumed on 3 ranks: nothing shows the 2-rank leg
    for doc in every_document(id_snapshot):
        found = alone.first_read(*doc)
        assert (found is not None) == (doc in delivered)
        assert found is None or found == FirstRead(None, None, 16)


def test_a_version_s_run_is_answered_through_its_selection(id_snapshot, tmp_path):
    version = make_version(id_snapshot, tmp_path / "v", "min_scores = { quality = 0.5 }\n")
    records, delivered = run(version, [(2, 8), (3, 8)], id_snapshot)
    reads = RunReads(version, records)
    docs = every_document(id_snapshot)
    answered = dict(zip(docs, reads.first_reads(docs), strict=True))
    assert {d: f.step for d, f in answered.items() if f is not None} == delivered
    left_out = [doc for doc in answered if not any(r for _, _, r in reads.places(*doc))]
    assert left_out and all(answered[doc] is None for doc in left_out)


def test_a_recipe_run_is_answered_across_its_phases_given_the_recipe(recipe_snapshot):
    recipe = parse_recipe(recipe_toml(load_manifest(recipe_snapshot)[0].snapshot_id))
    records, delivered = run(recipe_snapshot, [(2, 10), (3, 12)], recipe_snapshot, recipe, run_len=2)
    reads = RunReads(recipe_snapshot, records, recipe)
    docs = every_document(recipe_snapshot)
    answered = dict(zip(docs, reads.first_reads(docs), strict=True))
    assert {d: f.step for d, f in answered.items() if f is not None} == delivered
    assert records[0]["recipe"]["phase_name"] != records[1]["recipe"]["phase_name"]  # a phase change between
