"""``corpus mixture-audit --snapshot DIR``: replay the loader's sampler with no I/O; realized vs target weights.

The sampler is a pure function of the manifest's shard sizes, the mixture, the seed, the epoch caps
and the topology, so every rank's bucket choices and cursor moves for any number of steps can be
replayed from the manifest alone, before a run starts or after it diverged.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from corpus.model.errors import UserError

#: what ``--chunk-tokens`` is, in every replay of the sampler
CHUNK_TOKENS_HELP = "tokens the loader reads from a bucket at a time (its chunk_tokens, default 2^20)"
#: ``--append-eos`` as the loader's argument (None: as the manifest says)
APPEND_EOS = {"auto": None, "yes": True, "no": False}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mixture-audit", help="replay the loader's mixture sampler (no reads) and report weights"
    )
    p.add_argument(
        "--snapshot",
        type=Path,
        metavar="DIR",
        help="snapshot or version directory (holds manifest.json), or a snapshot's manifest itself",
    )
    p.add_argument(
        "old_snapshot", nargs="?", type=Path, metavar="SNAPSHOT", help="deprecated: say --snapshot DIR"
    )
    p.add_argument(
        "--mixture",
        default=None,
        help='weights as JSON ({"web": 0.7, "code": 0.3}) or a JSON file; default: by token count',
    )
    p.add_argument("--seed", type=int, default=0, help="the loader's seed (default 0)")
    p.add_argument("--world", type=int, default=8, help="data-parallel ranks")
    p.add_argument("--steps", type=int, default=1000, help="steps to replay (default 1000)")
    p.add_argument("--seq-len", type=int, default=2048, help="tokens per sequence (default 2048)")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--run-len", type=int, default=8, help="steps a rank stays on one bucket")
    p.add_argument("--chunk-tokens", type=int, default=1 << 20, help=CHUNK_TOKENS_HELP)
    p.add_argument("--epoch-caps", default=None, help='JSON {"bucket": epochs} or one int for all buckets')
    add_replay_output_arguments(p)
    p.set_defaults(func=run)


def add_replay_output_arguments(p: argparse.ArgumentParser) -> None:
    """``--append-eos`` and ``--json``, which every replay of the sampler takes."""
    p.add_argument(
        "--append-eos",
        choices=tuple(APPEND_EOS),
        default="auto",
        help="whether the loader appends EOS after documents (auto: unless the manifest says "
        "documents already end with EOS)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _json_arg(value: str | None, what: str):
    if value is None:
        return None
    try:
        path = Path(value)
        return json.loads(path.read_text() if path.is_file() else value)
    except (json.JSONDecodeError, OSError) as e:
        raise UserError(f"--{what}: not JSON or a JSON file: {e}") from e


def audit(
    snapshot: Path,
    mixture: dict | None,
    seed: int,
    world: int,
    steps: int,
    seq_len: int,
    batch_size: int,
    run_len: int,
    chunk_tokens: int,
    epoch_caps,
    append_eos: bool | None = None,
) -> dict:
    """Tokens each bucket would deliver over ``steps`` steps on ``world`` ranks, against the target weights.

    Vectorized over runs (numpy): each rank's bucket per run comes from :func:`loader.sampler.run_points`
    for as long as its active buckets stay the same; the step in which a bucket runs out on a rank is
    replayed as :meth:`loader.state.RankCursor.next_batch` does it, and the vectorized replay goes on
    from there with the buckets that are left.
    """
    from loader.dataset import default_append_eos, load_manifest, natural_mixture_of
    from loader.sampler import SAMPLER_VERSION, run_points, schedule_bound
    from loader.state import stream_layout
    from loader.versions import LoaderVersion

    # a version's streams are its selected documents (their sizes are in the version's manifest)
    version = LoaderVersion.open(snapshot) if Path(snapshot).is_dir() else None
    manifest = version.manifest if version is not None else load_manifest(snapshot)[0]
    streams = version.stream_shards if version is not None else manifest.shards
    snapshot_id = version.snapshot_id if version is not None else manifest.snapshot_id
    buckets = sorted({s.bucket for s in streams})  # a version's buckets by predicate, when it defines them
    weights = dict(natural_mixture_of(streams) if mixture is None else mixture)
    unknown = sorted(set(weights) - set(buckets))
    if unknown:
        raise UserError(f"mixture names buckets the snapshot does not have: {unknown} (it has {buckets})")
    if world < 1 or steps < 0 or seq_len < 1 or batch_size < 1 or run_len < 1 or chunk_tokens < 1:
        raise UserError("world, seq-len, batch-size, run-len and chunk-tokens must be positive, steps >= 0")
    caps = (
        {b: epoch_caps for b in buckets}
        if isinstance(epoch_caps, int) or epoch_caps is None
        else {b: epoch_caps.get(b) for b in buckets}
    )
    if append_eos is None:
        append_eos = default_append_eos(manifest)
    layout = stream_layout(streams, seed, chunk_tokens, caps, append_eos, world)
    capacity = capacities(layout, world, buckets)
    runs = -(-steps // run_len)
    stratum, place = run_points(seed, world, 0, runs)
    replay = Replay(buckets, weights, seed, world, steps, seq_len, batch_size, run_len)
    consumed0: dict[str, int] = {}
    for rank in range(world):
        consumed = replay.rank(rank, capacity[rank], stratum, place)
        if rank == 0:
            consumed0 = consumed
    epochs = {b: _epoch_at(layout, b, 0, world, consumed0[b], capacity[0][b]) for b in buckets}

    total_w = sum(weights.get(b, 0.0) for b in buckets)
    targets = np.array([weights.get(b, 0.0) / total_w for b in buckets])
    cum = np.cumsum(replay.run_tokens, axis=1)  # tokens of each bucket up to the end of each run
    slot = run_len * batch_size * seq_len  # the tokens of one (rank, run) slot
    dev = (
        np.abs(cum - targets[:, None] * cum.sum(axis=0)[None, :]) / slot
        if runs
        else np.zeros((len(buckets), 1))
    )
    total_t = sum(replay.tokens.values())
    rows = []
    for i, b in enumerate(buckets):
        target = float(targets[i])
        realized = replay.tokens[b] / total_t if total_t else 0.0
        ex = replay.exhausted_at[b]
        rows.append(
            {
                "bucket": b,
                "target": target,
                "realized": realized,
                "diff": realized - target,
                "rel_error": (realized - target) / target if target else None,
                "max_dev_slots": float(dev[i].max()),
                "tokens": replay.tokens[b],
                "sequences": replay.sequences[b],
                "epoch_cap": caps[b],
                "ranks_exhausted": len(ex),
                "first_exhausted_step": min(ex) if ex else None,
                "rank0_epoch": epochs[b][0],
                "rank0_epoch_estimated": epochs[b][1],
                "chunks_per_epoch": layout.chunks_per_epoch(b),
                "cut": b in layout.cuts,
            }
        )
    # the schedule's bound holds while every rank reads from the same buckets: all of the mixture's, all along
    uniform = replay.uniform and not any(r["ranks_exhausted"] for r in rows)
    return {
        "snapshot_id": snapshot_id,
        "sampler_version": SAMPLER_VERSION,
        "seed": seed,
        "world": world,
        "steps": steps,
        "steps_delivered": replay.last_step,
        "seq_len": seq_len,
        "batch_size": batch_size,
        "run_len": run_len,
        "tokens": total_t,
        "slot_tokens": slot,
        "runs": runs,
        "buckets": rows,
        "max_abs_diff": max((abs(r["diff"]) for r in rows), default=0.0),
        "max_rel_error": max((abs(r["rel_error"]) for r in rows if r["rel_error"] is not None), default=0.0),
        "max_dev_slots": max((r["max_dev_slots"] for r in rows), default=0.0),
        "bound_slots": schedule_bound(runs) if uniform and runs else None,
    }


class Replay:
    """Every rank's bucket choices and token counts, vectorized over runs between the steps where a bucket
    runs out on that rank (replayed one by one, exactly as the loader does)."""

    def __init__(
        self,
        buckets: list[str],
        weights: dict,
        seed: int,
        world: int,
        steps: int,
        seq_len: int,
        batch_size: int,
        run_len: int,
    ) -> None:
        self.buckets, self.weights, self.seed, self.world, self.steps = buckets, weights, seed, world, steps
        self.seq_len, self.batch_size, self.run_len = seq_len, batch_size, run_len
        self.index = {b: i for i, b in enumerate(buckets)}
        self.runs = -(-steps // run_len)
        self.run_tokens = np.zeros((len(buckets), self.runs), dtype=np.int64)  # all ranks, per bucket and run
        self.tokens = dict.fromkeys(buckets, 0)
        self.sequences = dict.fromkeys(buckets, 0)
        self.exhausted_at: dict[str, list[int]] = {b: [] for b in buckets}
        self.last_step = 0
        self.uniform = True  # every rank starts with every bucket of the mixture to read

    def rank(
        self, rank: int, capacity: dict[str, int | None], stratum: np.ndarray, place: np.ndarray
    ) -> dict[str, int]:
        """Replay one rank; the stream positions it consumed per bucket."""
        from loader.sampler import bucket_thresholds, choose_buckets

        left = dict(capacity)  # None: unbounded
        active = {b for b in self.buckets if left[b] is None or left[b] > 0}
        self.uniform &= all(b in active for b in self.buckets if self.weights.get(b, 0) > 0)
        consumed = dict.fromkeys(self.buckets, 0)
        per_step = self.batch_size * self.seq_len
        step = 0
        while step < self.steps:
            names, ts, tp = bucket_thresholds(self.weights, active, self.world)
            if not names:
                break
            u0 = step // self.run_len
            u = np.arange(u0, self.runs)
            choice = choose_buckets((stratum[u0:] + rank) % self.world, place[u0:], (ts, tp))
            first = np.maximum(u * self.run_len, step)
            n_steps = np.minimum((u + 1) * self.run_len, self.steps) - first
            stop = self.steps  # the first step in which a bounded bucket runs out
            for j, b in enumerate(names):
                if left[b] is None:
                    continue
                k = -(-left[b] // per_step)  # the k-th step on b empties it
                on_b = np.cumsum(np.where(choice == j, n_steps, 0))
                i = int(np.searchsorted(on_b, k))
                if i < len(on_b):
                    stop = min(stop, int(first[i] + k - (on_b[i] - n_steps[i]) - 1))
            full = np.clip(np.minimum(first + n_steps, stop) - first, 0, None)
            tok = full * per_step
            rows = np.array([self.index[b] for b in names])[choice]
            self.run_tokens[rows, u] += tok  # one bucket per run and rank: no index repeats
            for j, b in enumerate(names):
                mine = choice == j
                t = int(tok[mine].sum())
                self.tokens[b] += t
                self.sequences[b] += int(full[mine].sum()) * self.batch_size
                consumed[b] += t
                if left[b] is not None:
                    left[b] -= t
            step = stop
            if step >= self.steps:
                break
            if not self._one_step(rank, step, left, active, consumed):
                break  # nothing left to read: this rank's stream ended
            step += 1
        self.last_step = max(self.last_step, step)
        return consumed

    def _one_step(self, rank: int, step: int, left: dict, active: set, consumed: dict) -> bool:
        """One step as ``RankCursor.next_batch`` makes it (a bucket that runs out mid-batch pads its sequence
        and the rest of the batch is chosen among the others); False when no bucket is left."""
        from loader.sampler import choose_bucket, rank_point, run_of

        point = rank_point(self.seed, run_of(step, self.run_len), rank, self.world)
        made = 0
        while made < self.batch_size:
            b = choose_bucket(point, self.weights, active)
            if b is None:
                break
            take = self.seq_len if left[b] is None else min(self.seq_len, left[b])
            if left[b] is not None:
                left[b] -= take
                if left[b] == 0:
                    active.discard(b)
                    self.exhausted_at[b].append(step)
            self.tokens[b] += take
            self.sequences[b] += 1
            consumed[b] += take
            self.run_tokens[self.index[b], step // self.run_len] += take
            made += 1
        return made > 0


def capacities(layout, world: int, buckets: list[str]) -> list[dict[str, int | None]]:
    """Stream positions each rank's queue holds per bucket over all its capped epochs (None: unbounded)."""
    from loader.sampler import strided

    out: list[dict[str, int | None]] = [{} for _ in range(world)]
    for b in buckets:
        n = layout.chunks_per_epoch(b)
        cap = layout.cap(b)
        totals = np.zeros(world, dtype=np.int64)
        if cap is not None:
            for e in range(cap):
                lengths = np.array([p.length for p in layout.chunks(b, e)], dtype=np.int64)
                np.add.at(totals, np.arange(len(lengths)) % world, lengths)
        for r in range(world):
            out[r][b] = int(totals[r]) if cap is not None or not len(strided(n, r, world)) else None
    return out


#: ``rank0_epoch`` walks rank 0's epochs one by one (each needs the epoch's keyed order) up to this many;
#: beyond, it is estimated from the bucket's length (a small snapshot replayed for very many steps).
EPOCH_WALK = 1024


def _epoch_at(
    layout, bucket: str, rank: int, world: int, consumed: int, capacity: int | None
) -> tuple[int | None, bool]:
    """The epoch of the piece ``rank``'s cursor stands in after ``consumed`` positions (None: none left), and
    whether it is an estimate (more than :data:`EPOCH_WALK` epochs in)."""
    if capacity is not None and consumed >= capacity:
        return None, False
    total = 0
    for epoch in range(EPOCH_WALK):
        total += sum(p.length for p in layout.chunks(bucket, epoch)[rank::world])
        if total > consumed:
            return epoch, False
    return consumed * world // sum(s[2] for s in layout.buckets[bucket]), True


def format_table(report: dict) -> str:
    lines = [
        f"snapshot {report['snapshot_id']}  seed {report['seed']}  world {report['world']}  "
        f"steps {report['steps_delivered']}/{report['steps']}  {report['tokens']:,} tokens",
        f"{'bucket':<16} {'target':>8} {'realized':>9} {'diff':>8} {'rel.err':>9} {'max dev':>8} "
        f"{'tokens':>14} {'cap':>5} {'exhausted':>10} {'chunks':>8}",
    ]
    for r in report["buckets"]:
        cap = "-" if r["epoch_cap"] is None else str(r["epoch_cap"])
        ex = "-" if r["first_exhausted_step"] is None else f"@{r['first_exhausted_step']}"
        chunks = f"{r['chunks_per_epoch']}{'*' if r['cut'] else ''}"
        rel = "-" if r["rel_error"] is None else f"{r['rel_error']:+.2e}"
        lines.append(
            f"{r['bucket']:<16} {r['target']:>8.4f} {r['realized']:>9.4f} {r['diff']:>+8.4f} {rel:>9} "
            f"{r['max_dev_slots']:>8.2f} {r['tokens']:>14,} {cap:>5} {ex:>10} {chunks:>8}"
        )
    if any(r["cut"] for r in report["buckets"]):
        lines.append(
            f"* fewer chunks than ranks: cut into pieces so each of the {report['world']} ranks reads a share"
        )
    lines.append(
        f"max |realized - target| = {report['max_abs_diff']:.4f}   "
        f"max |relative error| = {report['max_rel_error']:.2e}"
    )
    bound = report["bound_slots"]
    lines.append(
        f"max dev = max over the replay of |tokens of a bucket - target share of all tokens|, in slots of "
        f"{report['slot_tokens']:,} tokens (one rank, one run): {report['max_dev_slots']:.2f}"
        + (f" (bound {bound})" if bound is not None else " (not every rank reads every bucket: no bound)")
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.old_snapshot is not None:
        print(
            "corpus mixture-audit: note: SNAPSHOT as a positional is deprecated, say --snapshot",
            file=sys.stderr,
        )
    snapshot = args.snapshot or args.old_snapshot
    if snapshot is None or (args.snapshot and args.old_snapshot):
        raise UserError("say which snapshot, once: --snapshot DIR")
    report = audit(
        snapshot,
        _json_arg(args.mixture, "mixture"),
        args.seed,
        args.world,
        args.steps,
        args.seq_len,
        args.batch_size,
        args.run_len,
        args.chunk_tokens,
        _json_arg(args.epoch_caps, "epoch-caps"),
        APPEND_EOS[args.append_eos],
    )
    print(json.dumps(report, indent=1) if args.json else format_table(report))
    return 0
