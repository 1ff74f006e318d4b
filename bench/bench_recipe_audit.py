"""``corpus recipe-audit`` on a three-phase recipe: 64 ranks, 10^5 steps per phase, realized vs target.

    python bench/bench_recipe_audit.py [--world 64] [--steps-per-phase 100000] [--seed 3]

Writes the five-bucket id snapshot of the loader docs (``tests/loader/snapshot_factory.py``,
``doc_len=(50, 400), docs_per_shard=(20, 60)``) and a recipe of three phases, each exactly
``--steps-per-phase`` steps long at ``--world`` ranks of 16 sequences: main (seq_len 4096, the docs'
five-bucket weights), long context (seq_len 32768, runs of 4) and anneal (seq_len 4096). Buckets are not
capped: a snapshot this small would run out at once at these token counts, and a cap that bites stops
the schedule's bound from applying anyway. Prints, per phase, the worst relative error of a bucket's
token share and the largest deviation at any run end in slots (with the bound), and the CPU time of the
replay (in process) and of the whole command (a fresh process, imports included).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "loader"))

PHASES = (  # name, seq_len, run_len, weights
    ("main", 4096, None, {"books": 0.05, "code": 0.15, "math": 0.013, "web": 0.637, "wiki": 0.15}),
    ("long-context", 32768, 4, {"books": 0.3, "web": 0.5, "wiki": 0.2}),
    ("anneal", 4096, None, {"books": 0.2, "code": 0.3, "math": 0.1, "wiki": 0.4}),
)


def recipe_text(snapshot_id: str, tokenizer: str, seed: int, world: int, batch: int, steps: int) -> str:
    lines = [
        'recipe_id = "bench-3-phase"',
        f'snapshot_id = "{snapshot_id}"',
        f'tokenizer_sha256 = "{tokenizer}"',
        f"seed = {seed}",
    ]
    for name, seq_len, run_len, weights in PHASES:
        lines += [
            "",
            "[[phases]]",
            f'name = "{name}"',
            f"tokens = {steps * world * batch * seq_len}",
            f"seq_len = {seq_len}",
            "weights = { " + ", ".join(f"{b} = {w}" for b, w in weights.items()) + " }",
        ]
        if run_len:
            lines.append(f"run_len = {run_len}")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, default=64)
    ap.add_argument("--steps-per-phase", type=int, default=100_000)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()

    from snapshot_factory import RECIPE_TOKENIZER, corpus_cli, flags, write_id_snapshot

    from cli.commands.recipe_audit import audit_recipe, format_table
    from corpus.select.recipe import parse_recipe

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "snapshot"
        manifest = write_id_snapshot(
            root,
            {"books": 4, "code": 6, "math": 3, "web": 12, "wiki": 6},
            doc_len=(50, 400),
            docs_per_shard=(20, 60),
            tokenizer={"sha256": RECIPE_TOKENIZER},
        )
        text = recipe_text(
            manifest.snapshot_id,
            RECIPE_TOKENIZER,
            args.seed,
            args.world,
            args.batch_size,
            args.steps_per_phase,
        )
        path = Path(tmp) / "recipe.toml"
        path.write_text(text)
        recipe = parse_recipe(text)
        audit_recipe(recipe, root, args.world, args.batch_size)  # warm: run_step's search per world size
        t0 = time.process_time()
        report = audit_recipe(recipe, root, args.world, args.batch_size)
        replay_cpu = time.process_time() - t0
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        audit = flags(snapshot=root, world=args.world, batch_size=args.batch_size, json=True)
        proc = corpus_cli("recipe-audit", path, *audit)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        command_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        assert json.loads(proc.stdout)["buckets"] == report["buckets"]
    print(format_table(report))
    print()
    print(f"{'phase':<14} {'steps':>9} {'seq_len':>8} {'worst rel. error':>17} {'max dev':>8} {'bound':>6}")
    for ph in report["phases"]:
        print(
            f"{ph['phase']:<14} {ph['steps_replayed']:>9,} {ph['seq_len']:>8} {ph['max_rel_error']:>17.2e} "
            f"{ph['max_dev_slots']:>8.2f} {ph['bound_slots'] or '-':>6}"
        )
    print(
        f"replay CPU {replay_cpu:.2f} s (in process, {args.world} ranks x {3 * args.steps_per_phase:,} steps); "
        f"the whole command {command_cpu:.2f} s CPU (imports included)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
