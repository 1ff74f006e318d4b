"""Recipes: the file, its refusals, phases that switch at global token boundaries, exact resumes across
them, and ``corpus recipe-audit`` (in one process; test_recipe_torchrun.py does the same on real ranks).

Exactly once is checked position by position: what the ranks delivered equals every epoch a bucket has
opened less the unread rest in the final record (``snapshot_factory.owed_tokens``), so a position read
twice or skipped in any bucket epoch, in any phase, across any resume, fails the test.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path

import pytest
from snapshot_factory import PHASES, RECIPE_TOKENIZER, corpus_cli, flags, owed_tokens, recipe_toml

from cli.commands.recipe_audit import audit_recipe
from corpus.select.recipe import RecipeError, parse_recipe
from loader import ResumeRefused, SnapshotLoader, load_manifest
from loader.counter import MixtureCounter, MixtureDrift

OPTS = dict(batch_size=2, chunk_tokens=24, run_len=3)


@pytest.fixture(scope="module")
def snapshot_id(recipe_snapshot) -> str:
    return load_manifest(recipe_snapshot)[0].snapshot_id


@pytest.fixture(scope="module")
def recipe(snapshot_id):
    return parse_recipe(recipe_toml(snapshot_id))


def loaders(root: Path, recipe, world: int, **kw) -> list[SnapshotLoader]:
    return [
        SnapshotLoader.from_recipe(recipe, root, dp_rank=r, dp_world=world, **{**OPTS, **kw})
        for r in range(world)
    ]


def run(
    lds: list[SnapshotLoader], delivered: Counter, steps: int | None = None, log: list | None = None
) -> None:
    """Step every rank together (as training does) until the recipe ends or ``steps`` steps ran."""
    n = 0
    while not lds[0].finished and (steps is None or n < steps):
        batches = [ld.next_batch() for ld in lds]
        for b in batches:
            if b is not None:
                delivered.update(b.tokens[b.loss_mask].tolist())
                if log is not None:
                    per_bucket: Counter = Counter()
                    for bucket, mask in zip(b.buckets, b.loss_mask, strict=True):
                        per_bucket[bucket] += int(mask.sum())
                    log.append((b.step, b.phase, b.tokens.shape[1], dict(per_bucket)))
        n += 1


def record(lds: list[SnapshotLoader]) -> dict:
    return lds[0].global_record([ld.local_state() for ld in lds])


def boundaries(recipe, world: int, batch_size: int, step: int = 0, tokens: int = 0) -> list[int]:
    """Where the phases end, computed here from the rule (the first step whose global tokens reach the end)."""
    out, end = [], 0
    for phase in recipe.phases:
        end += phase.tokens
        per_step = world * batch_size * phase.seq_len
        n = max(0, math.ceil((end - tokens) / per_step))
        step, tokens = step + n, tokens + n * per_step
        out.append(step)
    return out


# --- the file ----------------------------------------------------------------------------------------


def test_the_hash_ignores_formatting_and_inherited_caps_but_not_a_weight(snapshot_id, recipe):
    reformatted = recipe_toml(
        snapshot_id,
        "# comments and order do not matter\n"
        + PHASES.replace('name = "mid"\ntokens = 1200', 'tokens = 1200 # the middle\nname = "mid"').replace(
            "max_epochs = { web = 2 }", "max_epochs = { web = 2, code = 1 }"
        ),
    )  # code's cap restated, the same
    assert parse_recipe(reformatted).recipe_hash == recipe.recipe_hash
    assert (
        parse_recipe(recipe_toml(snapshot_id, PHASES.replace("web = 0.4", "web = 0.41"))).recipe_hash
        != recipe.recipe_hash
    )
    assert [dict(p.max_epochs) for p in recipe.phases] == [
        {"code": 1},
        {"code": 1, "web": 2},
        {"code": 2, "web": 2},
    ]


@pytest.mark.parametrize(
    "phases,message",
    [
        (PHASES.replace("weights = { web = 0.4,", "weights = { books = 0.1, web = 0.4,"), "books"),
        (PHASES.replace("max_epochs = { web = 2 }", "max_epochs = { books = 2 }"), "books"),
        (PHASES.replace("tokens = 1200", "tokens = 0"), "phase 'mid': no tokens"),
        (PHASES.replace("tokens = 1200\n", ""), "phase 'mid': no tokens"),
        ("", "no [[phases]]"),
        (PHASES.replace("max_epochs = { code = 2 }", "max_epochs = { web = 1 }"), "goes down from 2 to 1"),
        (PHASES.replace("run_len = 2", "runlen = 2"), "unknown keys ['runlen']"),
        (PHASES.replace("max_epochs = { code = 2 }", ""), "bucket 'code' needs 500 tokens"),  # 484 a epoch
    ],
)
def test_bad_recipes_are_refused_in_one_line(recipe_snapshot, snapshot_id, phases, message):
    with pytest.raises(RecipeError) as e:
        SnapshotLoader.from_recipe(
            parse_recipe(recipe_toml(snapshot_id, phases)), recipe_snapshot, dp_rank=0, dp_world=2, **OPTS
        )
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_recipe_for_another_snapshot_or_tokenizer_is_refused_naming_both(recipe_snapshot, snapshot_id):
    other = "sha256:" + "0" * 64
    for text, names in (
        (recipe_toml(other), (other, snapshot_id)),
        (recipe_toml(snapshot_id, tokenizer="ab" * 32), ("ab" * 32, RECIPE_TOKENIZER)),
    ):
        with pytest.raises(RecipeError) as e:
            SnapshotLoader.from_recipe(parse_recipe(text), recipe_snapshot, dp_rank=0, dp_world=1)
        assert all(n in str(e.value) for n in names) and "\n" not in str(e.value)


# --- phases ------------------------------------------------------------------------------------------


def test_every_rank_switches_phase_and_seq_len_at_the_global_token_boundary(recipe_snapshot, recipe):
    log: list = []
    run(loaders(recipe_snapshot, recipe, 4), Counter(), log=log)
    ends = boundaries(recipe, 4, OPTS["batch_size"])
    assert ends == [8, 27, 32]  # 1000/128 -> 8 steps; (2200 - 1024)/64 -> 19; (2800 - 2240)/128 -> 5
    for step, phase, seq_len, _ in log:
        i = next(i for i, end in enumerate(ends) if step < end)
        assert (phase, seq_len) == (recipe.phases[i].name, recipe.phases[i].seq_len), step
    assert max(s for s, *_ in log) == ends[-1] - 1


@pytest.mark.parametrize(
    "world,new_world,where",
    [
        (4, 3, -1),
        (4, 3, 0),
        (4, 3, 1),  # one step before the first boundary, at it, one after
        (3, 5, 0),
        (2, 4, 1),
        (5, 2, -1),
    ],
)
def test_a_resume_before_at_or_after_a_boundary_delivers_every_bucket_epoch_exactly_once(
    recipe_snapshot, recipe, world, new_world, where
):
    boundary = boundaries(recipe, world, OPTS["batch_size"])[0]
    k = boundary + where
    delivered: Counter = Counter()
    first = loaders(recipe_snapshot, recipe, world)
    run(first, delivered, steps=k)
    saved = record(first)
    resumed = loaders(recipe_snapshot, recipe, new_world)
    for ld in resumed:
        ld.load_record(saved)
    log: list = []
    run(resumed, delivered, log=log)
    assert delivered == owed_tokens(recipe_snapshot, record(resumed))
    # the boundaries left move to the new global batch, at the same global tokens
    tokens = saved["recipe"]["tokens"]
    assert tokens == sum(world * OPTS["batch_size"] * (16 if s < boundary else 8) for s in range(k))
    ends = boundaries(recipe, new_world, OPTS["batch_size"], k, tokens)
    assert {s for s, p, *_ in log if p == "anneal"} == set(range(ends[1], ends[2]))


def test_a_resume_on_the_same_world_continues_the_same_stream_across_a_boundary(recipe_snapshot, recipe):
    straight: list = []
    run(loaders(recipe_snapshot, recipe, 3), Counter(), log=straight)
    first = loaders(recipe_snapshot, recipe, 3)
    resumed_log: list = []
    run(first, Counter(), steps=10, log=resumed_log)  # the first boundary on 3 ranks is at step 11
    resumed = loaders(recipe_snapshot, recipe, 3)
    for ld in resumed:
        ld.load_state_dict({"record": json.dumps(record(first))})
    run(resumed, Counter(), log=resumed_log)
    assert resumed_log == straight


def test_seek_across_phases_lands_where_iteration_does(recipe_snapshot, recipe):
    walked = loaders(recipe_snapshot, recipe, 2)
    run(walked, Counter(), steps=20)
    jumped = loaders(recipe_snapshot, recipe, 2)
    for ld in jumped:
        ld.seek(20)
    assert [ld.local_state() for ld in jumped] == [ld.local_state() for ld in walked]
    assert jumped[0].phase == walked[0].phase == "mid"


def test_a_resume_under_another_recipe_is_refused_unless_overridden_and_then_recorded(
    recipe_snapshot, recipe, snapshot_id
):
    first = loaders(recipe_snapshot, recipe, 2)
    run(first, Counter(), steps=5)
    saved = record(first)
    changed = parse_recipe(recipe_toml(snapshot_id, PHASES.replace("tokens = 600", "tokens = 700")))
    other = loaders(recipe_snapshot, changed, 2)
    with pytest.raises(ResumeRefused, match="allow_recipe_mismatch") as e:
        other[0].load_record(saved)
    assert recipe.recipe_hash[:19] in str(e.value) and changed.recipe_hash[:19] in str(e.value)
    with pytest.raises(ResumeRefused, match="no recipe"):
        SnapshotLoader(recipe_snapshot, dp_rank=0, dp_world=2, **OPTS).load_record(saved)
    for ld in other:
        ld.load_record(saved, allow_recipe_mismatch=True)
    after = record(other)
    assert after["recipe_changes"] == [{"step": 5, "from": recipe.recipe_hash, "to": changed.recipe_hash}]
    assert after["recipe"]["recipe_hash"] == changed.recipe_hash


# --- the audit ---------------------------------------------------------------------------------------


def test_the_audit_counts_what_the_loader_delivers_per_phase_and_bucket(recipe_snapshot, recipe):
    report = audit_recipe(recipe, recipe_snapshot, 3, **OPTS)
    log: list = []
    run(loaders(recipe_snapshot, recipe, 3), Counter(), log=log)
    delivered: Counter = Counter()
    for _, phase, _, per_bucket in log:
        for b, n in per_bucket.items():
            delivered[(phase, b)] += n
    assert {(r["phase"], r["bucket"]): r["tokens"] for r in report["buckets"]} == dict(delivered)
    assert [p["end_step"] for p in report["phases"]] == boundaries(recipe, 3, OPTS["batch_size"])


def test_the_audit_says_which_bucket_runs_out_at_which_step(recipe_snapshot, snapshot_id, tmp_path):
    path = tmp_path / "short.toml"
    path.write_text(recipe_toml(snapshot_id, PHASES.replace("max_epochs = { code = 2 }", "")))
    audit = flags(snapshot=recipe_snapshot, world=2, batch_size=2, chunk_tokens=24, json=True)
    proc = corpus_cli("recipe-audit", path, *audit, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    report = json.loads(proc.stdout)
    (code,) = [r for r in report["buckets"] if r["phase"] == "anneal" and r["bucket"] == "code"]
    first = min(x["step"] for x in report["runs_out"])
    assert f"bucket 'code' runs out in phase 'anneal' at step {code['runs_out_at_step']}" in proc.stderr
    assert first == code["runs_out_at_step"] >= report["phases"][2]["start_step"]
    assert code["ranks_exhausted"] >= 1 and 0 < code["epochs_used"] <= 1  # its one epoch, all ranks together
    assert {"phase", "bucket", "target", "realized"} <= set(code)


def test_64_ranks_and_10_5_steps_per_phase_hold_every_bucket_within_1e_3_relative(
    recipe_snapshot, snapshot_id
):
    per_step = 64 * 2  # sequences of a global batch
    phases = "".join(
        f"""
[[phases]]
name = "{name}"
tokens = {100_000 * per_step * seq_len}
seq_len = {seq_len}
weights = {weights}
"""
        for name, seq_len, weights in (
            ("main", 16, "{ code = 0.2, web = 0.5, wiki = 0.3 }"),
            ("long", 64, "{ code = 0.013, web = 0.637, wiki = 0.35 }"),
            ("anneal", 16, "{ code = 0.45, wiki = 0.55 }"),
        )
    )
    recipe = parse_recipe(recipe_toml(snapshot_id, phases, seed=3))
    t0 = time.process_time()
    report = audit_recipe(recipe, recipe_snapshot, 64, batch_size=2, chunk_tokens=24)
    assert time.process_time() - t0 < 30
    assert [p["end_step"] for p in report["phases"]] == [100_000, 200_000, 300_000]
    for phase in report["phases"]:
        assert phase["max_rel_error"] <= 1e-3, phase
        assert phase["max_dev_slots"] < phase["bound_slots"] == 20
    assert not report["runs_out"]


# --- the online counter (one process: the all-reduce over a group of one) ---------------------------


def test_the_counter_restarts_at_each_phase_and_raises_past_the_tolerance(recipe_snapshot, recipe):
    (ld,) = loaders(recipe_snapshot, recipe, 1)
    counter = MixtureCounter(sorted(ld.layout.buckets), every=4, tolerance=0.5, action="raise")
    per_phase: dict[str, Counter] = {}
    reports = []
    steps = 0
    while not ld.finished:
        phase, weights = ld.phase, dict(ld.mixture)
        batch = ld.next_batch()
        counter.add(batch, phase, weights)
        for bucket, mask in zip(batch.buckets, batch.loss_mask, strict=True):
            per_phase.setdefault(phase, Counter())[bucket] += int(mask.sum())
        steps += 1
        if counter.due(steps):
            reports.append((phase, counter.reduce(steps), dict(per_phase[phase])))
    assert {p for p, *_ in reports} == {"main", "mid", "anneal"}
    shares = {p.name: p.shares() for p in recipe.phases}
    for phase, report, so_far in reports:  # each phase counted from its own first step
        assert report["phase"] == phase and {b: n for b, n in report["tokens"].items() if n} == so_far
        assert report["target"] == pytest.approx(shares[phase])
    strict = MixtureCounter(sorted(ld.layout.buckets), every=1, tolerance=1e-9, action="raise")
    strict.add(batch, "anneal", {"code": 0.5, "wiki": 0.5})
    with pytest.raises(MixtureDrift, match="anneal"):
        strict.reduce(1)
