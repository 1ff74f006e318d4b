"""``corpus mixture-audit SNAPSHOT``: replay the loader's sampler with no I/O; realized vs target weights.

The sampler is a pure function of the manifest's shard sizes, the mixture, the seed, the epoch caps
and the topology, so every rank's bucket choices and cursor moves for any number of steps can be
replayed from the manifest alone, before a run starts or after it diverged.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from corpus.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mixture-audit", help="replay the loader's mixture sampler (no reads) and report weights")
    p.add_argument("snapshot", type=Path,
                   help="snapshot or version directory (holds manifest.json), or a snapshot's manifest itself")
    p.add_argument("--mixture", default=None,
                   help='weights as JSON ({"web": 0.7, "code": 0.3}) or a JSON file; default: by token count')
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--world", type=int, default=8, help="data-parallel ranks")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--run-len", type=int, default=8, help="steps a rank stays on one bucket")
    p.add_argument("--chunk-tokens", type=int, default=1 << 20)
    p.add_argument("--epoch-caps", default=None, help='JSON {"bucket": epochs} or one int for all buckets')
    p.add_argument("--append-eos", choices=("auto", "yes", "no"), default="auto",
                   help="whether the loader appends EOS after documents (auto: unless the manifest says "
                        "documents already end with EOS)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def _json_arg(value: str | None, what: str):
    if value is None:
        return None
    try:
        path = Path(value)
        return json.loads(path.read_text() if path.is_file() else value)
    except (json.JSONDecodeError, OSError) as e:
        raise UserError(f"--{what}: not JSON or a JSON file: {e}") from e


def audit(snapshot: Path, mixture: dict | None, seed: int, world: int, steps: int, seq_len: int, batch_size: int,
          run_len: int, chunk_tokens: int, epoch_caps, append_eos: bool | None = None) -> dict:
    """Tokens each bucket would deliver over ``steps`` steps on ``world`` ranks, against the target weights."""
    from loader.dataset import default_append_eos, load_manifest, natural_mixture_of
    from loader.sampler import SAMPLER_VERSION
    from loader.state import Plan, RankCursor, stream_layout
    from loader.versions import LoaderVersion

    # a version's streams are its selected documents (their sizes are in the version's manifest)
    version = LoaderVersion.open(snapshot) if Path(snapshot).is_dir() else None
    manifest = version.manifest if version is not None else load_manifest(snapshot)[0]
    streams = version.stream_shards if version is not None else manifest.shards
    snapshot_id = version.snapshot_id if version is not None else manifest.snapshot_id
    buckets = sorted({s.bucket for s in manifest.shards})
    weights = dict(natural_mixture_of(streams) if mixture is None else mixture)
    unknown = sorted(set(weights) - set(buckets))
    if unknown:
        raise UserError(f"mixture names buckets the snapshot does not have: {unknown} (it has {buckets})")
    if world < 1 or steps < 0 or seq_len < 1 or batch_size < 1 or run_len < 1 or chunk_tokens < 1:
        raise UserError("world, seq-len, batch-size, run-len and chunk-tokens must be positive, steps >= 0")
    caps = {b: epoch_caps for b in buckets} if isinstance(epoch_caps, int) or epoch_caps is None else \
        {b: epoch_caps.get(b) for b in buckets}
    if append_eos is None:
        append_eos = default_append_eos(manifest)
    layout = stream_layout(streams, seed, chunk_tokens, caps, append_eos, world)
    plan = Plan.fresh(world)
    tokens = dict.fromkeys(buckets, 0)
    sequences = dict.fromkeys(buckets, 0)
    exhausted_at: dict[str, list[int]] = {b: [] for b in buckets}
    last_step = 0
    for rank in range(world):
        cursor = RankCursor(layout, plan, rank)
        for _ in range(steps):
            before = set(cursor.active)
            seqs = cursor.next_batch(weights, seed, run_len, seq_len, batch_size, collect=False)
            if seqs is None:
                break
            for sp in seqs:
                tokens[sp.bucket] += seq_len - sp.pad
                sequences[sp.bucket] += 1
            for b in before - cursor.active:
                exhausted_at[b].append(cursor.step - 1)
        last_step = max(last_step, cursor.step)
        if rank == 0:
            epochs = {b: _epochs_reached(cursor, b) for b in buckets}
    total_w = sum(weights.get(b, 0.0) for b in buckets)
    total_t = sum(tokens.values())
    rows = []
    for b in buckets:
        target = weights.get(b, 0.0) / total_w
        realized = tokens[b] / total_t if total_t else 0.0
        rows.append({"bucket": b, "target": target, "realized": realized, "diff": realized - target,
                     "tokens": tokens[b], "sequences": sequences[b], "epoch_cap": caps[b],
                     "ranks_exhausted": len(exhausted_at[b]),
                     "first_exhausted_step": min(exhausted_at[b]) if exhausted_at[b] else None,
                     "rank0_epoch": epochs[b], "chunks_per_epoch": layout.chunks_per_epoch(b),
                     "cut": b in layout.cuts})
    return {"snapshot_id": snapshot_id, "sampler_version": SAMPLER_VERSION, "seed": seed, "world": world,
            "steps": steps, "steps_delivered": last_step, "seq_len": seq_len, "batch_size": batch_size,
            "run_len": run_len, "tokens": total_t, "buckets": rows,
            "max_abs_diff": max((abs(r["diff"]) for r in rows), default=0.0)}


def _epochs_reached(cursor, bucket: str) -> int | None:
    """The epoch rank 0 is in for ``bucket`` at the end of the replay (None once its cap is reached)."""
    k, _ = cursor.cursors[bucket]
    piece = cursor.queues[bucket].piece(k)
    return None if piece is None else piece.epoch


def format_table(report: dict) -> str:
    lines = [f"snapshot {report['snapshot_id']}  seed {report['seed']}  world {report['world']}  "
             f"steps {report['steps_delivered']}/{report['steps']}  {report['tokens']:,} tokens",
             f"{'bucket':<16} {'target':>8} {'realized':>9} {'diff':>8} {'tokens':>14} {'cap':>5} {'exhausted':>10} "
             f"{'chunks':>8}"]
    for r in report["buckets"]:
        cap = "-" if r["epoch_cap"] is None else str(r["epoch_cap"])
        ex = "-" if r["first_exhausted_step"] is None else f"@{r['first_exhausted_step']}"
        chunks = f"{r['chunks_per_epoch']}{'*' if r['cut'] else ''}"
        lines.append(f"{r['bucket']:<16} {r['target']:>8.4f} {r['realized']:>9.4f} {r['diff']:>+8.4f} "
                     f"{r['tokens']:>14,} {cap:>5} {ex:>10} {chunks:>8}")
    if any(r["cut"] for r in report["buckets"]):
        lines.append(f"* fewer chunks than ranks: cut into pieces so each of the {report['world']} ranks reads a share")
    lines.append(f"max |realized - target| = {report['max_abs_diff']:.4f}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = audit(args.snapshot, _json_arg(args.mixture, "mixture"), args.seed, args.world, args.steps,
                   args.seq_len, args.batch_size, args.run_len, args.chunk_tokens,
                   _json_arg(args.epoch_caps, "epoch-caps"), {"auto": None, "yes": True, "no": False}[args.append_eos])
    print(json.dumps(report, indent=1) if args.json else format_table(report))
    return 0
