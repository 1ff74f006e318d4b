"""``corpus report --training-log``: realized vs target per recipe phase, from the log of a real (short,
one-process) ``examples/train.py`` run under a recipe, checked against the run's own per-step dump."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from snapshot_factory import flags, recipe_toml

from corpus.report.training_log import parse_training_log, realized_vs_target
from corpus.select.recipe import parse_recipe
from loader import load_manifest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def trained(recipe_snapshot: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    """A whole recipe trained in one process, the online counter every 4 steps: (log, dump dir, recipe)."""
    tmp = tmp_path_factory.mktemp("train-log")
    text = recipe_toml(load_manifest(recipe_snapshot)[0].snapshot_id)
    (tmp / "recipe.toml").write_text(text)
    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")
    }
    recipe = flags(
        snapshot=recipe_snapshot, recipe=tmp / "recipe.toml", batch_size=2, run_len=3, chunk_tokens=24
    )
    run = flags(ckpt=tmp / "ckpt", steps=1000, save_every=100000, count_every=4, dump_tokens=tmp / "dump")
    proc = subprocess.run(
        [sys.executable, "examples/train.py", *recipe, *run],
        cwd=ROOT,
        env={**env, "MASTER_PORT": str(free_port())},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (tmp / "train.log").write_text(proc.stdout)
    return tmp / "train.log", tmp / "dump", parse_recipe(text)


def dumped_per_phase(dump: Path, before: int | None = None) -> dict[str, dict[str, int]]:
    """Tokens per phase and bucket in the run's dump of every step (steps < ``before``)."""
    out: dict[str, dict[str, int]] = {}
    for line in (dump / "steps-run-rank0.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if before is None or rec["step"] < before:
            for b, n in rec["tokens"].items():
                out.setdefault(rec["phase"], {}).setdefault(b, 0)
                out[rec["phase"]][b] += n
    return out


@pytest.mark.parametrize("with_dump", [False, True])
def test_the_card_shows_each_phases_realized_share_against_its_target(
    trained, recipe_snapshot, tmp_path, with_dump
):
    log, dump, recipe = trained
    logs = [log, dump / "steps-run-rank0.jsonl"] if with_dump else [log]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "report",
            str(recipe_snapshot),
            "--html",
            str(tmp_path / "card.html"),
            *(x for f in logs for x in ("--training-log", str(f))),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    card = json.loads((tmp_path / "card.json").read_text())["training_log"]
    assert [ph["phase"] for ph in card["phases"]] == [p.name for p in recipe.phases]
    for ph, phase in zip(card["phases"], recipe.phases, strict=True):
        if with_dump:  # the whole phase, from every step
            assert ph["source"].endswith("dumped steps")
            delivered = dumped_per_phase(dump)[phase.name]
        else:  # up to the phase's last counter report (the counter's steps are steps done)
            assert ph["source"] == f"counter report at step {ph['last_step']}"
            delivered = dumped_per_phase(dump, before=ph["last_step"])[phase.name]
        total = sum(phase.weights.values())
        for row in ph["buckets"]:
            assert row["target"] == pytest.approx(phase.weights.get(row["bucket"], 0.0) / total, abs=1e-4)
            assert row["realized"] == pytest.approx(
                delivered.get(row["bucket"], 0) / sum(delivered.values()), abs=1e-4
            )
            assert row["diff"] == pytest.approx(row["realized"] - row["target"])
    html = (tmp_path / "card.html").read_text()
    assert "realized vs target per phase" in html and 'alt="realized share per bucket over steps"' in html
    # what reading cost the rank: its last loader metrics line, the one train.py prints as it ends
    (loader,) = card["loader"]
    last = max(r["step"] for r in json_lines(dump / "steps-run-rank0.jsonl"))
    assert (
        loader["rank"] == 0
        and loader["step"] == last + 1
        and loader["reads"] > 0
        and loader["bytes_read"] > 0
    )
    assert loader["steps"] == last + 1 and "Loader reads per rank" in html


def json_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_without_counter_reports_the_logged_steps_give_the_realized_share(trained):
    _, dump, recipe = trained
    phases = realized_vs_target(parse_training_log([dump / "steps-run-rank0.jsonl"]))
    assert [ph["phase"] for ph in phases] == [p.name for p in recipe.phases]
    for ph in phases:
        tokens = {r["bucket"]: r["logged_tokens"] for r in ph["buckets"]}
        assert all(r["target"] is None and r["diff"] is None for r in ph["buckets"])
        assert all(
            r["realized"] == pytest.approx(tokens[r["bucket"]] / sum(tokens.values())) for r in ph["buckets"]
        )
    assert sum(r["logged_tokens"] for r in phases[0]["buckets"]) > 0


def test_a_log_without_a_mixture_line_is_refused(tmp_path):
    (tmp_path / "x.log").write_text("hello\n")
    from corpus.model.errors import UserError

    with pytest.raises(UserError, match="no mixture reports or step lines"):
        parse_training_log([tmp_path / "x.log"])
