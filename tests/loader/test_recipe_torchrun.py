"""A recipe under torchrun: real processes, gloo, DCP checkpoints with the model (examples/train.py --recipe).

One chain of three launches (each costs its processes' imports): 4 ranks checkpoint inside the first
phase, 3 resume across the phase boundary and checkpoint inside the second phase, 5 resume inside it and
run to the recipe's end. Every stream position of every bucket epoch is delivered exactly once (all three
runs together = what the final record says is owed); every rank changes phase at the step where the
global token count reaches the phase's end (computed here from the token count at each checkpoint and
the new global batch), with its sequence length; and ``corpus recipe-audit`` counts, per phase and
bucket, what the ranks delivered before the first checkpoint; the online counter's all-reduced reports
hold what the ranks' own step logs add up to.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from snapshot_factory import owed_tokens, recipe_toml
from test_loader_torchrun import tokens, torchrun
from test_recipe import boundaries

from cli.commands.recipe_audit import audit_recipe
from corpus.recipe import parse_recipe
from loader import load_manifest

BATCH, CHUNK, RUN_LEN = 2, 24, 3


def steps_log(dump: Path, tag: str) -> dict[int, list[dict]]:
    """rank -> its logged steps (step, phase, seq_len, tokens per bucket)."""
    return {int(f.stem.rsplit("rank", 1)[1]): [json.loads(x) for x in f.read_text().splitlines()]
            for f in sorted(dump.glob(f"steps-{tag}-rank*.jsonl"))}


def assert_phases(logs: dict[int, list[dict]], recipe, world: int, first: int, last: int, ends: list[int]) -> None:
    """Every rank logged steps ``first..last-1``, each in the phase (and at the seq_len) the boundaries say."""
    assert sorted(logs) == list(range(world))
    for rank, steps in logs.items():
        assert [s["step"] for s in steps] == list(range(first, last)), rank
        for s in steps:
            i = next(i for i, end in enumerate(ends) if s["step"] < end)
            assert s["phase"] == recipe.phases[i].name, (rank, s)
            assert s["seq_len"] in (None, recipe.phases[i].seq_len), (rank, s)


def assert_counter_reports(dump: Path, tag: str, recipe) -> None:
    """Every all-reduced report of the online counter (rank 0's) holds, per bucket, the tokens the ranks'
    own step logs say they delivered in that phase before that step (within this process), and the
    phase's target shares."""
    logs = steps_log(dump, tag)
    reports = [json.loads(x) for x in (dump / f"mixture-{tag}-rank0.jsonl").read_text().splitlines()]
    assert reports and all(r["step"] % 4 == 0 for r in reports)
    shares = {p.name: p.shares() for p in recipe.phases}
    for r in reports:
        expected: Counter = Counter()
        for steps in logs.values():
            for s in steps:
                if s["step"] < r["step"] and s["phase"] == r["phase"]:
                    expected.update(s["tokens"])
        assert {b: n for b, n in r["tokens"].items() if n} == dict(expected), (tag, r)
        assert r["target"] == pytest.approx(shares[r["phase"]]), (tag, r)


@pytest.mark.slow
def test_a_recipe_resumes_exactly_once_across_a_boundary_and_inside_a_phase(recipe_snapshot, tmp_path):
    """4 ranks to step 6 (phase main ends at 8 on 4 ranks) -> 3 ranks cross into phase mid and stop at 14
    -> 5 ranks resume inside mid and run the recipe to its end."""
    path = tmp_path / "recipe.toml"
    path.write_text(recipe_toml(load_manifest(recipe_snapshot)[0].snapshot_id))
    recipe = parse_recipe(path.read_text())
    common = ["--snapshot", str(recipe_snapshot), "--recipe", str(path), "--batch-size", str(BATCH), "--chunk-tokens",
              str(CHUNK), "--run-len", str(RUN_LEN), "--steps", "100000", "--dump-tokens", str(tmp_path),
              "--ckpt", str(tmp_path / "ckpt"), "--count-every", "4"]
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
    assert ends3[0] < 14 < ends5[1] < ends3[1]  # resumed inside phase mid, which ends sooner on a larger batch

    for tag in ("before", "middle", "after"):
        assert_counter_reports(tmp_path, tag, recipe)

    report = audit_recipe(recipe, recipe_snapshot, 4, batch_size=BATCH, steps=6, run_len=RUN_LEN, chunk_tokens=CHUNK)
    counted: Counter = Counter()
    for steps in steps_log(tmp_path, "before").values():
        for s in steps:
            for b, n in s["tokens"].items():
                counted[(s["phase"], b)] += n
    assert {(r["phase"], r["bucket"]): r["tokens"] for r in report["buckets"] if r["tokens"]} == dict(counted)
