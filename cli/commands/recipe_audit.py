"""``corpus recipe-audit RECIPE --snapshot DIR --world W``: replay a recipe with no I/O, phase by phase.

The gate a recipe (or a change to one) passes before a run uses it: the loader is a pure function of
(manifest, recipe, step, rank, world), so every rank's bucket choices and cursor moves of the whole run
can be replayed from the manifest's shard sizes alone. Each phase is one ``corpus mixture-audit`` replay
(the same vectorized machinery, :class:`cli.commands.mixture_audit.Replay`) on the phase's weights,
sequence length and run length, with each rank's queue of every bucket continuing where the previous phase
left it and the phase's cumulative epoch caps; the phase boundaries come from the loader's own clock
(:class:`loader.phases.PhaseClock`). A bucket that runs out inside a phase it has weight in is reported
with the step, and the command then fails (one line on stderr after the report).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from cli.commands.mixture_audit import (
    APPEND_EOS,
    CHUNK_TOKENS_HELP,
    Replay,
    add_replay_output_arguments,
    capacities,
)
from corpus.model.errors import UserError
from corpus.select.recipe import Recipe, load_recipe


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "recipe-audit", help="replay a training recipe (no reads): realized vs target per phase"
    )
    p.add_argument("recipe", type=Path, help="the recipe (TOML)")
    p.add_argument(
        "--snapshot",
        type=Path,
        required=True,
        help="snapshot or version directory the recipe is pinned to (holds manifest.json)",
    )
    p.add_argument("--world", type=int, required=True, help="data-parallel ranks")
    p.add_argument(
        "--steps", type=int, default=None, help="replay only the first N steps (default: the whole recipe)"
    )
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank per step")
    p.add_argument(
        "--run-len", type=int, default=8, help="steps a rank stays on one bucket, for phases without one"
    )
    p.add_argument("--chunk-tokens", type=int, default=1 << 20, help=CHUNK_TOKENS_HELP)
    add_replay_output_arguments(p)
    p.set_defaults(func=run)


def audit_recipe(
    recipe: Recipe,
    snapshot: Path,
    world: int,
    batch_size: int = 8,
    steps: int | None = None,
    run_len: int = 8,
    chunk_tokens: int = 1 << 20,
    append_eos: bool | None = None,
) -> dict:
    """Per phase and bucket: target and realized token share, tokens, epochs used (cumulative, all ranks),
    where the bucket ran out; per phase: its steps. Refuses what the loader refuses, except caps that
    cannot supply a phase: those are what the replay is for."""
    from loader.dataset import default_append_eos, load_manifest
    from loader.phases import PhaseClock
    from loader.sampler import SAMPLER_VERSION, run_points, schedule_bound
    from loader.state import stream_layout
    from loader.versions import LoaderVersion

    version = LoaderVersion.open(snapshot) if Path(snapshot).is_dir() else None
    manifest = version.manifest if version is not None else load_manifest(snapshot)[0]
    streams = version.stream_shards if version is not None else manifest.shards
    snapshot_id = version.snapshot_id if version is not None else manifest.snapshot_id
    buckets = sorted({s.bucket for s in streams})  # a version's buckets by predicate, when it defines them
    recipe.check_pinned(snapshot_id, manifest.tokenizer.get("sha256"))
    recipe.check_buckets(buckets)
    if world < 1 or batch_size < 1 or run_len < 1 or chunk_tokens < 1 or (steps is not None and steps < 0):
        raise UserError("world, batch-size, run-len and chunk-tokens must be positive, steps >= 0")
    if append_eos is None:
        append_eos = default_append_eos(manifest)
    clock = PhaseClock(recipe, world, batch_size)
    limit = clock.end_step if steps is None else min(steps, clock.end_step)
    base = stream_layout(streams, recipe.seed, chunk_tokens, {}, append_eos, world)
    epoch_len = {b: sum(s[2] for s in shards) for b, shards in base.buckets.items()}
    consumed = [dict.fromkeys(buckets, 0) for _ in range(world)]  # each rank's positions per bucket so far
    phases, rows = [], []
    for span in clock.spans:
        if span.start >= limit:
            break
        phase = span.phase
        n_steps = min(span.end, limit) - span.start
        p_run_len = phase.run_len or run_len
        caps = {b: phase.max_epochs.get(b) for b in buckets}
        layout = stream_layout(streams, recipe.seed, chunk_tokens, caps, append_eos, world)
        capacity = capacities(layout, world, buckets)
        weights = dict(phase.weights)
        replay = Replay(buckets, weights, recipe.seed, world, n_steps, phase.seq_len, batch_size, p_run_len)
        stratum, place = run_points(
            recipe.seed, world, 0, replay.runs
        )  # runs count from the phase's first step
        empty = dict.fromkeys(buckets, 0)  # ranks on which a bucket is used up before the phase starts
        for r in range(world):
            left = {b: None if capacity[r][b] is None else capacity[r][b] - consumed[r][b] for b in buckets}
            for b in buckets:
                empty[b] += left[b] == 0
            for b, n in replay.rank(r, left, stratum, place).items():
                consumed[r][b] += n
        total = sum(replay.tokens.values())
        shares = phase.shares()
        slot = p_run_len * batch_size * phase.seq_len
        cum = np.cumsum(replay.run_tokens, axis=1)
        for i, b in enumerate(buckets):
            if b not in shares and not replay.tokens[b]:
                continue
            target = shares.get(b, 0.0)
            realized = replay.tokens[b] / total if total else 0.0
            ex = [0] * empty[b] + replay.exhausted_at[b]  # steps relative to the phase's first
            dev = np.abs(cum[i] - target * cum.sum(axis=0)) / slot if replay.runs else np.zeros(1)
            rows.append(
                {
                    "phase": phase.name,
                    "bucket": b,
                    "target": target,
                    "realized": realized,
                    "rel_error": (realized - target) / target if target else None,
                    "max_dev_slots": float(dev.max()),
                    "tokens": replay.tokens[b],
                    "epochs_used": sum(c[b] for c in consumed) / epoch_len[b] if epoch_len[b] else 0.0,
                    "epoch_cap": caps[b],
                    "ranks_exhausted": len(ex),
                    "runs_out_at_step": span.start + min(ex) if ex else None,
                }
            )
        mine = [r for r in rows if r["phase"] == phase.name]
        uniform = replay.uniform and not any(r["ranks_exhausted"] for r in mine)
        phases.append(
            {
                "phase": phase.name,
                "index": span.index,
                "start_step": span.start,
                "end_step": span.end,
                "steps_replayed": n_steps,
                "seq_len": phase.seq_len,
                "run_len": p_run_len,
                "tokens_target": phase.tokens,
                "tokens_nominal": n_steps * world * batch_size * phase.seq_len,
                "tokens": total,
                "max_rel_error": max(
                    (abs(r["rel_error"]) for r in mine if r["rel_error"] is not None), default=0.0
                ),
                "max_dev_slots": max((r["max_dev_slots"] for r in mine), default=0.0),
                "bound_slots": schedule_bound(replay.runs) if uniform and replay.runs else None,
            }
        )
    runs_out = [r for r in rows if r["runs_out_at_step"] is not None and r["target"] > 0]
    return {
        "recipe_id": recipe.recipe_id,
        "recipe_hash": recipe.recipe_hash,
        "snapshot_id": snapshot_id,
        "sampler_version": SAMPLER_VERSION,
        "seed": recipe.seed,
        "world": world,
        "batch_size": batch_size,
        "steps": limit,
        "end_step": clock.end_step,
        "phases": phases,
        "buckets": rows,
        "runs_out": [
            {
                "phase": r["phase"],
                "bucket": r["bucket"],
                "step": r["runs_out_at_step"],
                "ranks": r["ranks_exhausted"],
            }
            for r in runs_out
        ],
    }


def format_table(report: dict) -> str:
    lines = [
        f"recipe {report['recipe_id']} ({report['recipe_hash']})  snapshot {report['snapshot_id']}",
        f"world {report['world']}  batch {report['batch_size']} per rank  steps {report['steps']}"
        f"/{report['end_step']}",
    ]
    for ph in report["phases"]:
        lines.append("")
        lines.append(
            f"phase {ph['phase']}: steps {ph['start_step']}..{ph['end_step'] - 1} (boundary at step "
            f"{ph['end_step']}), seq_len {ph['seq_len']}, run_len {ph['run_len']}, "
            f"{ph['tokens_nominal']:,} of {ph['tokens_target']:,} target tokens replayed"
        )
        lines.append(
            f"  {'bucket':<16} {'target':>8} {'realized':>9} {'rel.err':>9} {'max dev':>8} {'tokens':>14} "
            f"{'epochs':>8} {'cap':>5} {'runs out':>10}"
        )
        for r in report["buckets"]:
            if r["phase"] != ph["phase"]:
                continue
            rel = "-" if r["rel_error"] is None else f"{r['rel_error']:+.2e}"
            cap = "-" if r["epoch_cap"] is None else str(r["epoch_cap"])
            out = "-" if r["runs_out_at_step"] is None else f"@{r['runs_out_at_step']}"
            lines.append(
                f"  {r['bucket']:<16} {r['target']:>8.4f} {r['realized']:>9.4f} {rel:>9} "
                f"{r['max_dev_slots']:>8.2f} {r['tokens']:>14,} {r['epochs_used']:>8.3f} {cap:>5} {out:>10}"
            )
        bound = ph["bound_slots"]
        lines.append(
            f"  max |relative error| = {ph['max_rel_error']:.2e}   max dev {ph['max_dev_slots']:.2f} slots"
            + (f" (bound {bound})" if bound is not None else " (a bucket ran out: no bound)")
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    recipe = load_recipe(args.recipe)
    report = audit_recipe(
        recipe,
        args.snapshot,
        args.world,
        args.batch_size,
        args.steps,
        args.run_len,
        args.chunk_tokens,
        APPEND_EOS[args.append_eos],
    )
    print(json.dumps(report, indent=1) if args.json else format_table(report))
    if report["runs_out"]:
        first = min(report["runs_out"], key=lambda r: r["step"])
        raise UserError(
            f"recipe {recipe.recipe_id}: bucket {first['bucket']!r} runs out in phase {first['phase']!r} "
            f"at step {first['step']} (on {first['ranks']} of {report['world']} ranks; "
            f"{len(report['runs_out'])} phase/bucket pairs run out in all)"
        )
    return 0
