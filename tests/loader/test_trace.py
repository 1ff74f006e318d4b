"""``corpus trace`` names the token the loader delivered: after epoch caps, across recipe phases, after a
resume on another world size and from a corrupt shard's substitute, with the run's record or without one.

Each test runs the ranks as training does and keeps every delivered batch; then, for steps and ranks of
the run, a loader positioned by :func:`loader.trace.loader_at` (a fresh process's view: nothing shared
with the run but the snapshot and the record) names the shard, document and offset of every position,
and the token at that offset of the shard file (or EOS, where the loader appended one) must be the
token delivered there. In an id snapshot every token is distinct, so a wrong document cannot match.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from snapshot_factory import (
    CAPS,
    EOS,
    MIXTURE,
    corpus_cli,
    damaged_copy,
    flags,
    recipe_toml,
    write_lineage_snapshot,
)

from cli.commands.trace import describe_source
from corpus.formats.megatron import read_index
from corpus.select.recipe import parse_recipe
from corpus.select.selection import parse_inline
from corpus.snapshot.lookup import Snapshot
from corpus.version.open import open_version
from corpus.version.query import evaluate
from corpus.version.write import version_manifest, write_version
from loader import SnapshotLoader, load_manifest
from loader.provenance import Padding
from loader.trace import loader_at

OPTS = dict(batch_size=2, chunk_tokens=24, run_len=3)


@pytest.fixture(scope="module")
def snap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recipe snapshot's three buckets, with lineage files (what trace answers from)."""
    return write_lineage_snapshot(tmp_path_factory.mktemp("trace-snapshot"))


@pytest.fixture(scope="module")
def recipe(snap):
    return parse_recipe(recipe_toml(load_manifest(snap)[0].snapshot_id))


def run(lds: list[SnapshotLoader], out: dict, steps: int | None = None) -> None:
    """Step every rank together until all are done (or ``steps`` steps ran), keeping each delivered batch
    as out[(step, rank)] = (tokens, loss_mask)."""
    n = 0
    while steps is None or n < steps:
        if lds[0].recipe is not None and lds[0].finished:
            break
        batches = [ld.next_batch() for ld in lds]
        if lds[0].recipe is None and all(b is None for b in batches):
            break
        for ld, b in zip(lds, batches, strict=True):
            if b is not None:
                out[(b.step, ld.rank)] = (b.tokens.numpy(), b.loss_mask.numpy())
        n += 1


def record(lds: list[SnapshotLoader]) -> dict:
    return lds[0].global_record([ld.local_state() for ld in lds])


def resumed_on_three(make, root: Path, first_steps: int, steps: int = 12) -> tuple[dict, dict]:
    """Two ranks made by ``make(root, rank, world)`` run ``first_steps`` steps; their record, resumed on three,
    runs ``steps`` more: what the three delivered (as :func:`run` keeps it) and the record."""
    first = [make(root, r, 2) for r in range(2)]
    run(first, {}, steps=first_steps)
    rec = record(first)
    delivered: dict = {}
    resumed = [make(root, r, 3) for r in range(3)]
    for ld in resumed:
        ld.load_record(rec)
    run(resumed, delivered, steps=steps)
    return delivered, rec


class Files:
    """The shard files, read apart from the loader: token ``offset`` of document ``doc`` of shard ``i``."""

    def __init__(self, root: Path) -> None:
        self.root, self.manifest = root, load_manifest(root)[0]
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def token(self, i: int, doc: int, offset: int) -> int:
        if i not in self._cache:
            s = self.manifest.shards[i]
            idx = read_index(self.root / s.files["idx"])
            self._cache[i] = (idx.token_starts(), np.fromfile(self.root / s.path, dtype=idx.dtype))
        starts, toks = self._cache[i]
        assert 0 <= offset <= starts[doc + 1] - starts[doc]
        return int(toks[starts[doc] + offset])


def check_traces(root: Path, delivered: dict, keys, world: int, base: Path | None = None, **how) -> list:
    """Trace every position of the delivered batches at ``keys`` ((step, rank) pairs) on ``root`` (a snapshot,
    or a version of ``base``) and check each against the shard files; the sources, for the caller's checks."""
    files, sources = Files(base or root), []
    for step, rank in keys:
        tokens, mask = delivered[(step, rank)]
        traced = loader_at(root, step, rank, world, **how).traced_batch()
        assert traced is not None and traced.batch.step == step
        for p in range(tokens.size):
            row, col = divmod(p, tokens.shape[1])
            if not mask[row, col]:
                with pytest.raises(Padding):
                    traced.source(p)
                continue
            src = traced.source(p)
            assert (src.step, src.rank, src.row, src.column) == (step, rank, row, col)
            expected = EOS if src.appended_eos else files.token(src.shard, src.doc, src.offset_in_doc)
            assert expected == tokens[row, col], (step, rank, p, src)
            sources.append(src)
    return sources


def sample(delivered: dict, first: int = 0, every: int = 4) -> list[tuple[int, int]]:
    steps = sorted({s for s, _ in delivered if s >= first})
    keep = set(steps[::every]) | {steps[-1]}
    return sorted(k for k in delivered if k[0] in keep)


def test_trace_names_what_a_plain_run_delivered(snap):
    delivered: dict = {}
    run(
        [SnapshotLoader(snap, MIXTURE, seed=4, seq_len=16, dp_rank=r, dp_world=3, **OPTS) for r in range(3)],
        delivered,
        steps=20,
    )
    sources = check_traces(snap, delivered, sample(delivered), 3, mixture=MIXTURE, seed=4, seq_len=16, **OPTS)
    assert {s.bucket for s in sources} == set(MIXTURE)
    assert all(s.appended_eos for s in sources if s.offset_in_doc == files_len(snap, s))


def files_len(root: Path, src) -> int:
    starts = read_index(root / load_manifest(root)[0].shards[src.shard].files["idx"]).token_starts()
    return int(starts[src.doc + 1] - starts[src.doc])


def test_trace_names_what_was_delivered_after_an_epoch_cap_wrapped_a_bucket(snap):
    delivered: dict = {}
    lds = [
        SnapshotLoader(snap, MIXTURE, seed=4, seq_len=16, dp_rank=r, dp_world=3, epoch_caps=CAPS, **OPTS)
        for r in range(3)
    ]
    run(lds, delivered)
    # the steps after wiki's second epoch began on some rank: a token delivered a second time (ids are distinct)
    seen: Counter = Counter()
    second = None
    for (step, _), (tokens, mask) in sorted(delivered.items()):
        for t in tokens[mask].tolist():
            seen[t] += 1
            if t != EOS and seen[t] == 2 and second is None:
                second = step
    assert second is not None
    sources = check_traces(
        snap,
        delivered,
        sample(delivered, first=second, every=3),
        3,
        mixture=MIXTURE,
        seed=4,
        seq_len=16,
        epoch_caps=CAPS,
        **OPTS,
    )
    assert any(seen[s.token_id] == 2 for s in sources if s.token_id != EOS)  # tokens of a second epoch traced
    assert "code" not in {s.bucket for s in sources if s.step == max(k[0] for k in delivered)}  # capped: gone


def test_trace_names_what_was_delivered_in_every_phase_of_a_recipe_without_a_checkpoint(snap, recipe):
    delivered: dict = {}
    run(
        [SnapshotLoader.from_recipe(recipe, snap, dp_rank=r, dp_world=4, **OPTS) for r in range(4)], delivered
    )
    sources = check_traces(snap, delivered, sample(delivered, every=3), 4, recipe=recipe, **OPTS)
    assert {s.phase for s in sources} == {"main", "mid", "anneal"}
    assert {s.bucket for s in sources if s.phase == "mid"} == {"web", "wiki"}  # mid reads no code


@pytest.mark.parametrize("pause", [6, 9])  # before the boundary of phase main (step 8 on 4 ranks), after it
def test_trace_from_a_record_names_what_a_resume_on_another_world_delivered(snap, recipe, pause, tmp_path):
    first = [SnapshotLoader.from_recipe(recipe, snap, dp_rank=r, dp_world=4, **OPTS) for r in range(4)]
    run(first, {}, steps=pause)
    rec = record(first)
    delivered: dict = {}
    resumed = [SnapshotLoader.from_recipe(recipe, snap, dp_rank=r, dp_world=3, **OPTS) for r in range(3)]
    for ld in resumed:
        ld.load_record(rec)
    run(resumed, delivered)
    sources = check_traces(snap, delivered, sample(delivered, every=4), 3, record=rec, recipe=recipe, **OPTS)
    assert {s.phase for s in sources} >= {"mid", "anneal"}
    # the same steps traced as if the run had never been resumed on 3 ranks name other tokens: the record matters
    step, rank = sample(delivered, every=4)[1]
    fresh = loader_at(snap, step, rank, 3, recipe=recipe, **OPTS).traced_batch()
    assert not np.array_equal(fresh.batch.tokens.numpy(), delivered[(step, rank)][0])


@pytest.fixture
def damaged(snap: Path, tmp_path: Path) -> tuple[Path, int]:
    return damaged_copy(snap, tmp_path / "snap")


def test_trace_names_the_substitute_a_corrupt_shard_was_read_from(damaged):
    root, bad = damaged
    mix = dict(mixture=MIXTURE, seed=4, seq_len=16, epoch_caps=CAPS, **OPTS)
    first = [SnapshotLoader(root, dp_rank=r, dp_world=3, max_skip_fraction=0.1, **mix) for r in range(3)]
    before: dict = {}
    run(first, before, steps=5)
    rec = record(first)
    after: dict = {}
    resumed = [SnapshotLoader(root, dp_rank=r, dp_world=2, max_skip_fraction=0.1, **mix) for r in range(2)]
    for ld in resumed:
        ld.load_record(rec)
    run(resumed, after)
    assert bad in resumed[0].store.skipped
    # without a record, from step 0 on 3 ranks: the trace finds the corrupt shard by reading, as the run did
    early = check_traces(root, before, sorted(before), 3, **mix)
    late = check_traces(root, after, sample(after, every=2), 2, record=rec, **mix)
    substituted = [s for s in early + late if s.substituted]
    assert substituted and all(s.planned_shard == bad and s.shard != bad for s in substituted)
    assert all(s.shard != bad for s in early + late)
    # replaying every step from the record reads what seeking does
    step, rank = sample(after, every=2)[2]
    replayed = loader_at(root, step, rank, 2, record=rec, replay=True, **mix).traced_batch()
    assert np.array_equal(replayed.batch.tokens.numpy(), after[(step, rank)][0])


@pytest.mark.slow
def test_under_torchrun_the_trace_names_the_substitute_each_rank_read_for_a_corrupt_shard(damaged, tmp_path):
    """Real processes (examples/train.py under torchrun, gloo): the ranks find the corrupt shard as they read
    and read a substitute of its bucket; every delivered position traced in this process (from the same
    settings, no record) names the substitute, and the shard's token there is the delivered one."""
    from test_loader_torchrun import batches, torchrun

    root, bad = damaged
    dump = tmp_path / "dump"
    settings = dict(mixture=MIXTURE, epoch_caps=CAPS, seq_len=16, seed=4, **OPTS)
    run_flags = flags(snapshot=root, **settings, steps=5, max_skip_fraction=0.1, ckpt=tmp_path / "ckpt")
    torchrun(3, *run_flags, *flags(dump_tokens=dump, tag="damaged"))
    delivered = batches(dump, "damaged")
    assert sorted({step for step, _ in delivered}) == [0, 1, 2, 3, 4] and len(delivered) == 15
    sources = check_traces(root, delivered, sorted(delivered), 3, **settings)
    substituted = [s for s in sources if s.substituted]
    assert substituted and all(s.planned_shard == bad and s.shard != bad for s in substituted)
    assert all(s.shard != bad for s in sources)


def test_trace_names_what_a_run_moved_to_a_version_read_through_its_selection(snap, tmp_path):
    """A run on the snapshot moved at a record to a version that drops documents (on another world): the
    trace reads the version's streams as the resumed run did, and names selected documents only."""
    version = open_version(snap)
    sel = parse_inline('exclude_hosts = ["b.example.org"]\nmin_scores = { quality = 0.3 }\n')
    bits = evaluate(version, sel)
    write_version(version, version_manifest(version, sel, bits, []), bits, tmp_path / "v", version.base_dir)
    mix = dict(mixture=MIXTURE, seed=4, seq_len=16, **OPTS)
    first = [SnapshotLoader(snap, dp_rank=r, dp_world=3, **mix) for r in range(3)]
    run(first, {}, steps=5)
    rec = record(first)
    moved = [SnapshotLoader(tmp_path / "v", dp_rank=r, dp_world=2, **mix) for r in range(2)]
    for ld in moved:
        ld.load_record(rec)
    delivered: dict = {}
    run(moved, delivered, steps=12)
    sources = check_traces(
        tmp_path / "v", delivered, sample(delivered, every=3), 2, base=snap, record=rec, **mix
    )
    chosen = open_version(tmp_path / "v")
    refs = {Path(r.name).name: r for r in chosen.shards}
    names = Snapshot(snap).names
    assert all(chosen.selected(refs[names[s.shard]])[s.doc] for s in sources)
    # the same steps read through the snapshot instead name other tokens: the version's streams matter
    step, rank = sample(delivered, every=3)[1]
    plain = loader_at(snap, step, rank, 2, record=rec, **mix).traced_batch()
    assert not np.array_equal(plain.batch.tokens.numpy(), delivered[(step, rank)][0])


def test_the_trace_command_reads_a_checkpoint_and_names_the_documents_lineage(snap, recipe, tmp_path):
    """``corpus trace --record CKPT`` on a checkpoint written by save_checkpoint (one process, world 1),
    then the resumed run on 2 ranks: the command's answer is the delivered token's document and lineage."""
    import torch

    from loader.checkpoint import save_checkpoint

    one = SnapshotLoader.from_recipe(recipe, snap, dp_rank=0, dp_world=1, **OPTS)
    run([one], {}, steps=10)
    save_checkpoint(tmp_path / "ckpt", 10, torch.nn.Linear(1, 1), None, one)
    rec = record([one])
    delivered: dict = {}
    two = [SnapshotLoader.from_recipe(recipe, snap, dp_rank=r, dp_world=2, **OPTS) for r in range(2)]
    for ld in two:
        ld.load_record(rec)
    run(two, delivered, steps=8)
    (recipe_file := tmp_path / "recipe.toml").write_text(recipe_toml(load_manifest(snap)[0].snapshot_id))
    step, rank, position = 15, 1, 5
    source = flags(snapshot=snap, record=tmp_path / "ckpt", recipe=recipe_file)
    out = corpus_cli(
        "trace", *source, *flags(step=step, rank=rank, world=2, position=position, **OPTS, json=True)
    )
    got = json.loads(out.stdout)
    tokens, _ = delivered[(step, rank)]
    assert got["token_id"] == tokens.reshape(-1)[position]
    shard = Snapshot(snap).shard_number(got["shard"])
    assert got["doc"]["doc_id"] == f"{shard:016x}{got['doc_index']:016x}"
    assert got["doc"]["url"].endswith(f"/{got['bucket']}/{shard}/{got['doc_index']}")
    assert got["doc"]["dup_cluster_id"] and got["doc"]["crawl_date"] == "2026-03-01"
    assert got["doc"]["scores"]["quality"] >= 0 and got["loader"]["world"] == 2
    # the in-process description of the same source is the command's
    src = loader_at(snap, step, rank, 2, record=rec, recipe=recipe, **OPTS).traced_batch().source(position)
    assert describe_source(Snapshot(snap), src) == got
