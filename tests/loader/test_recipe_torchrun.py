"""A recipe under torchrun: real processes, gloo, DCP checkpoints with the model (examples/train.py --recipe).

One chain of three launches (each costs its processes' imports): 4 ranks checkpoint inside the first
phase, 3 resume across the phase boundary and checkpoint inside the second phase, 5 resume inside it and
run to the recipe's end. Every stream position of every bucket epoch is delivered exactly once (all three
runs together = what the final record says is owed); every rank changes phase at the step where the
global token count reaches the phase's end (computed here from the token count at each checkpoint and
the new global batch), with its sequence length; and ``corpus recipe-audit`` counts, per phase and
bucket, what the ranks delivered before the first checkpoint; the online counter's all-reduced reports
hold what the ranks' own step logs add up to since the phase's first step, across the resumes (its counts
are in the checkpoint); and ``corpus trace`` (:func:`loader.trace.loader_at`, from the checkpoint each
launch resumed from) names, for every position of sampled steps of every rank, the document offset whose
token in the shard file is the one that rank delivered there: after each resume, after each phase
boundary and once an epoch cap has wrapped a bucket.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from snapshot_factory import EOS, flags, owed_tokens, recipe_toml
from test_loader_torchrun import batches, tokens, torchrun
from test_recipe import boundaries
from test_trace import check_traces

from cli.commands.recipe_audit import audit_recipe
from corpus.select.recipe import parse_recipe
from loader import load_manifest
from loader.checkpoint import read_record

BATCH, CHUNK, RUN_LEN = 2, 24, 3
#: The training runs' settings: a step budget only the recipe's end ends, the online counter every 4 steps.
RUN = dict(batch_size=BATCH, chunk_tokens=CHUNK, run_len=RUN_LEN, steps=100000, count_every=4)


def steps_log(dump: Path, tag: str) -> dict[int, list[dict]]:
    """rank -> its logged steps (step, phase, seq_len, tokens per bucket)."""
    return {
        int(f.stem.rsplit("rank", 1)[1]): [json.loads(x) for x in f.read_text().splitlines()]
        for f in sorted(dump.glob(f"steps-{tag}-rank*.jsonl"))
    }


def assert_phases(
    logs: dict[int, list[dict]], recipe, world: int, first: int, last: int, ends: list[int]
) -> None:
    """Every rank logged steps ``first..last-1``, each in the phase (and at the seq_len) the boundaries say."""
    assert sorted(logs) == list(range(world))
    for rank, steps in logs.items():
        assert [s["step"] for s in steps] == list(range(first, last)), rank
        for s in steps:
            i = next(i for i, end in enumerate(ends) if s["step"] < end)
            assert s["phase"] == recipe.phases[i].name, (rank, s)
            assert s["seq_len"] in (None, recipe.phases[i].seq_len), (rank, s)


def assert_counter_reports(dump: Path, tags: list[str], recipe) -> list[dict]:
    """Every all-reduced report of the online counter (rank 0's) of the launch ``tags[-1]`` holds, per
    bucket, the tokens the ranks' own step logs of that launch and the ones before it (``tags``) say they
    delivered in that phase before that step, from the phase's first step whichever launch took it, and
    the phase's target shares; the reports."""
    logs = [s for tag in tags for steps in steps_log(dump, tag).values() for s in steps]
    reports = [json.loads(x) for x in (dump / f"mixture-{tags[-1]}-rank0.jsonl").read_text().splitlines()]
    assert reports and all(r["step"] % 4 == 0 for r in reports)
    shares = {p.name: p.shares() for p in recipe.phases}
    for r in reports:
        expected: Counter = Counter()
        for s in logs:
            if s["step"] < r["step"] and s["phase"] == r["phase"]:
                expected.update(s["tokens"])
        assert {b: n for b, n in r["tokens"].items() if n} == dict(expected), (tags, r)
        assert r["target"] == pytest.approx(shares[r["phase"]]), (tags, r)
    return reports


def first_repeat(delivered: dict) -> int:
    """The first step at which some rank delivered a token a second time: in an id snapshot every token is
    distinct, so it is a token of a bucket's second epoch (an epoch cap above one wrapped it)."""
    seen: Counter = Counter()
    for step in sorted({s for s, _ in delivered}):
        for (s, _), (toks, mask) in delivered.items():
            if s == step:
                seen.update(t for t in toks[mask].tolist() if t != EOS)
        if max(seen.values()) > 1:
            return step
    raise AssertionError("no bucket wrapped into a second epoch")


@pytest.mark.slow
def test_a_recipe_resumes_exactly_once_across_a_boundary_and_inside_a_phase(recipe_snapshot, tmp_path):
    """4 ranks to step 6 (phase main ends at 8 on 4 ranks) -> 3 ranks cross into phase mid and stop at 14
    -> 5 ranks resume inside mid and run the recipe to its end."""
    path = tmp_path / "recipe.toml"
    path.write_text(recipe_toml(load_manifest(recipe_snapshot)[0].snapshot_id))
    recipe = parse_recipe(path.read_text())
    common = flags(snapshot=recipe_snapshot, recipe=path, **RUN, dump_tokens=tmp_path, ckpt=tmp_path / "ckpt")
    torchrun(4, *common, "--save-at", "6", "--stop-after-save", "--tag", "before")
    out = torchrun(3, *common, "--resume", "--save-at", "14", "--stop-after-save", "--tag", "middle")
    assert "starting at step 6, loader step 6" in out.stdout
    out = torchrun(5, *common, "--resume", "--save-every", "1000000", "--tag", "after")
    assert "starting at step 14, loader step 14" in out.stdout

    final = json.loads((tmp_path / "record-after.json").read_text())
    delivered = tokens(tmp_path, "before") + tokens(tmp_path, "middle") + tokens(tmp_path, "after")
    assert delivered == owed_tokens(recipe_snapshot, final)

    # the boundaries, from the global tokens at each checkpoint and the new global batch
    ends4 = boundaries(recipe, 4, BATCH)
    tokens6 = sum(4 * BATCH * (16 if s < ends4[0] else 8) for s in range(6))
    ends3 = boundaries(recipe, 3, BATCH, 6, tokens6)
    assert ends3[0] == 9  # (1000 - 768) / 96 -> 3 more steps of phase main
    tokens14 = tokens6 + sum(3 * BATCH * (16 if s < ends3[0] else 8) for s in range(6, 14))
    ends5 = boundaries(recipe, 5, BATCH, 14, tokens14)
    assert json.loads((tmp_path / "record-middle.json").read_text())["recipe"]["tokens"] == tokens14
    assert_phases(steps_log(tmp_path, "before"), recipe, 4, 0, 6, ends4)
    assert_phases(steps_log(tmp_path, "middle"), recipe, 3, 6, 14, ends3)
    assert_phases(steps_log(tmp_path, "after"), recipe, 5, 14, ends5[-1], ends5)
    assert (
        ends3[0] < 14 < ends5[1] < ends3[1]
    )  # resumed inside phase mid, which ends sooner on a larger batch

    tags = ["before", "middle", "after"]
    for n in (1, 2, 3):
        reports = assert_counter_reports(tmp_path, tags[:n], recipe)
    # after the resume on 5 inside phase mid the reports count mid from step 9 (3 ranks), not from the resume
    mid_before = sum(
        n
        for steps in steps_log(tmp_path, "middle").values()
        for s in steps
        if s["phase"] == "mid"
        for n in s["tokens"].values()
    )
    assert mid_before > 0 and any(r["phase"] == "mid" for r in reports)

    # trace: sampled steps of every rank, from each launch's own start (the recipe, or the checkpoint it resumed)
    how = dict(recipe=recipe, batch_size=BATCH, chunk_tokens=CHUNK, run_len=RUN_LEN)
    launches = {
        "before": (4, None),
        "middle": (3, read_record(tmp_path / "ckpt" / "step-00000006")),
        "after": (5, read_record(tmp_path / "ckpt" / "step-00000014")),
    }
    dumped = {tag: batches(tmp_path, tag) for tag in launches}
    all_batches = {k: v for tag in launches for k, v in dumped[tag].items()}
    wrap = first_repeat(all_batches)
    picks = {"before": {0, 5}, "middle": {6, ends3[0], 13}, "after": {14, ends5[1], ends5[-1] - 1}}
    picks[next(tag for tag in launches if any(s == wrap for s, _ in dumped[tag]))].add(wrap)
    sources = []
    for tag, (world, rec) in launches.items():
        keys = sorted(k for k in dumped[tag] if k[0] in picks[tag])
        assert {r for _, r in keys} == set(range(world)), tag
        sources += check_traces(recipe_snapshot, dumped[tag], keys, world, record=rec, **how)
    assert {(s.world, s.phase) for s in sources} >= {
        (4, "main"),
        (3, "main"),
        (3, "mid"),
        (5, "mid"),
        (5, "anneal"),
    }
    count = Counter(t for toks, mask in all_batches.values() for t in toks[mask].tolist() if t != EOS)
    assert any(count[s.token_id] > 1 for s in sources if s.step == wrap and not s.appended_eos)

    report = audit_recipe(
        recipe, recipe_snapshot, 4, batch_size=BATCH, steps=6, run_len=RUN_LEN, chunk_tokens=CHUNK
    )
    counted: Counter = Counter()
    for steps in steps_log(tmp_path, "before").values():
        for s in steps:
            for b, n in s["tokens"].items():
                counted[(s["phase"], b)] += n
    assert {(r["phase"], r["bucket"]): r["tokens"] for r in report["buckets"] if r["tokens"]} == dict(counted)
