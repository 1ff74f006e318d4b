"""A tiny data-parallel training run on a snapshot, on CPU: the loader as a training job uses it.

Launch it with torchrun or srun (the rank and world size come from the launcher)::

    torchrun --nproc-per-node 4 examples/train.py --snapshot BUILD/snapshot --ckpt runs/ckpt --steps 200
    srun -n 4 python examples/train.py --snapshot BUILD/snapshot --ckpt runs/ckpt --steps 200

Every ``--save-every`` steps it checkpoints model, optimizer and loader state together
(``torch.distributed.checkpoint``); started again with ``--resume`` it continues from the checkpoint on
however many ranks it now has. Gradients are averaged with an all-reduce over gloo; a rank whose data
has run out (every bucket at its epoch cap) contributes zero gradients until all ranks are done.

With ``--recipe RECIPE.toml`` the loader runs the recipe (``SnapshotLoader.from_recipe``): phases change
weights, caps and sequence length at their global token boundaries, and the run ends with the last phase.
Every logged step says its phase and the tokens this rank took from each bucket. With ``--count-every K``
the online mixture counter (:mod:`loader.counter`) logs the phase's realized mixture every K steps; its
counts are checkpointed with the rest, so after a resume they still cover the phase since its start.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # the checkout's packages, however it is launched

from loader import SnapshotLoader, World  # noqa: E402
from loader.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint  # noqa: E402
from loader.counter import MixtureCounter  # noqa: E402
from loader.faults import DEFAULT_MAX_SKIP_FRACTION  # noqa: E402


class TinyLM(torch.nn.Module):
    """Embedding, one causal-free mixing layer and a tied head: enough to have real gradients."""

    def __init__(self, vocab: int, dim: int = 32) -> None:
        super().__init__()
        self.vocab = vocab
        self.embed = torch.nn.Embedding(vocab, dim)
        self.mix = torch.nn.Linear(dim, dim)

    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens % self.vocab)
        h = h + 0.01 * position_ids.unsqueeze(-1).float()
        return torch.tanh(self.mix(h)) @ self.embed.weight.T


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--snapshot", required=True, type=Path, help="snapshot directory (holds manifest.json)")
    ap.add_argument(
        "--ckpt",
        required=True,
        type=Path,
        help="checkpoint root: one step-N directory per save and a `latest` pointer",
    )
    ap.add_argument(
        "--steps", type=int, default=100, help="stop after this many steps (or when the data ends)"
    )
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--save-at", type=int, default=None, help="save once at this step")
    ap.add_argument("--stop-after-save", action="store_true", help="exit right after the first save")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest complete checkpoint in --ckpt (there must be one)",
    )
    ap.add_argument(
        "--auto-resume",
        action="store_true",
        help="continue from the newest complete checkpoint in --ckpt when there is one, else start at step 0",
    )
    ap.add_argument("--allow-missing-loader-state", action="store_true")
    ap.add_argument(
        "--recipe",
        type=Path,
        default=None,
        help="a recipe (TOML): its phases set mixture, caps, seed and seq_len (those options are ignored)",
    )
    ap.add_argument(
        "--allow-recipe-mismatch",
        action="store_true",
        help="resume a checkpoint taken under another recipe (noted in the loader's record)",
    )
    ap.add_argument(
        "--count-every",
        type=int,
        default=0,
        help="every K steps, sum the ranks' per-bucket tokens of the phase (one all-reduce) and log "
        "realized vs target (0: never)",
    )
    ap.add_argument(
        "--mixture-tolerance",
        type=float,
        default=0.05,
        help="largest |realized - target| share before --on-drift applies",
    )
    ap.add_argument("--on-drift", choices=("warn", "raise"), default="warn")
    ap.add_argument("--mixture", type=json.loads, default=None, help='JSON {"bucket": weight}')
    ap.add_argument("--epoch-caps", type=json.loads, default=None, help='JSON {"bucket": epochs} or an int')
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--run-len", type=int, default=8)
    ap.add_argument("--chunk-tokens", type=int, default=1 << 20)
    ap.add_argument(
        "--shuffle-buffer",
        type=int,
        default=0,
        help="documents a shuffle window, 0: off (with --recipe: the recipe's shuffle_buffer)",
    )
    ap.add_argument(
        "--packing-window",
        type=int,
        default=0,
        help="documents a packing window, 0: off (best-fit packing, cu_seqlens per document; resumable)",
    )
    ap.add_argument(
        "--max-skip-fraction",
        type=float,
        default=DEFAULT_MAX_SKIP_FRACTION,
        help="share of the snapshot's shards that may be found corrupt (each read from a substitute "
        f"of its bucket) before the loader stops (default {DEFAULT_MAX_SKIP_FRACTION})",
    )
    ap.add_argument("--vocab", type=int, default=4096, help="embedding rows (token ids are taken modulo)")
    ap.add_argument(
        "--dump-tokens",
        type=Path,
        default=None,
        help="write the tokens this rank trained on to DIR/tokens-<tag>-rank<r>.npy, every step's "
        "whole batch (arrays tokens-<step>, mask-<step>) to DIR/batches-<tag>-rank<r>.npz, every "
        "step's (step, phase, seq_len, tokens per bucket) to DIR/steps-<tag>-rank<r>.jsonl and "
        "the loader's final record to DIR/record-<tag>.json (for tests)",
    )
    ap.add_argument("--tag", default="run")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    world = World.detect()
    dist.init_process_group(
        "gloo", init_method=world.init_method, rank=world.rank, world_size=world.world_size
    )
    torch.manual_seed(args.seed)  # the same initial model on every rank
    model = TinyLM(args.vocab)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if args.recipe is not None:
        loader = SnapshotLoader.from_recipe(
            args.recipe,
            args.snapshot,
            batch_size=args.batch_size,
            dp_rank=world.rank,
            dp_world=world.world_size,
            run_len=args.run_len,
            chunk_tokens=args.chunk_tokens,
            max_skip_fraction=args.max_skip_fraction,
            packing_window=args.packing_window,
        )
    else:
        loader = SnapshotLoader(
            args.snapshot,
            args.mixture,
            seed=args.seed,
            seq_len=args.seq_len,
            batch_size=args.batch_size,
            dp_rank=world.rank,
            dp_world=world.world_size,
            epoch_caps=args.epoch_caps,
            run_len=args.run_len,
            chunk_tokens=args.chunk_tokens,
            max_skip_fraction=args.max_skip_fraction,
            shuffle_buffer=args.shuffle_buffer,
            packing_window=args.packing_window,
        )
    counter = (
        MixtureCounter(sorted(loader.layout.buckets), args.count_every, args.mixture_tolerance, args.on_drift)
        if args.count_every > 0
        else None
    )
    step = 0
    ckpt = find_checkpoint(args.ckpt) if args.resume or args.auto_resume else None
    if args.resume and ckpt is None:
        raise SystemExit(f"--resume: no complete checkpoint under {args.ckpt}")
    if ckpt is not None:
        step = load_checkpoint(
            ckpt,
            model,
            optimizer,
            loader,
            allow_missing_loader_state=args.allow_missing_loader_state,
            allow_recipe_mismatch=args.allow_recipe_mismatch,
            counter=counter,
        )

    def log(msg: str) -> None:
        print(f"[rank {world.rank}/{world.world_size}] {msg}", flush=True)

    log(f"{world.launcher}: starting at step {step}, loader step {loader.step}")
    mixture_log: list[str] = []
    dump = args.dump_tokens is not None  # the tests' record of what was delivered, held until the end
    seen: list[np.ndarray] = []
    batches: dict[str, np.ndarray] = {}  # every step's whole batch, for --dump-tokens
    steps_log: list[str] = []
    t0 = time.perf_counter()
    while step < args.steps:
        phase, weights = loader.phase, dict(loader.mixture)
        batch = loader.next_batch()
        # a rank may have nothing to read in one phase and more in the next: stop only when none will
        going = torch.tensor([0 if batch is None else 1, 0 if loader.finished else 1])
        dist.all_reduce(going)
        if int(going[0]) == 0 and int(going[1]) == 0:
            log(f"every rank's data is exhausted at step {step}")
            break
        per_bucket: dict[str, int] = {}
        if batch is not None:
            for bucket, mask in zip(batch.buckets, batch.loss_mask, strict=True):
                per_bucket[bucket] = per_bucket.get(bucket, 0) + int(mask.sum())
        if dump:
            steps_log.append(
                json.dumps(
                    {
                        "step": step,
                        "phase": phase,
                        "seq_len": None if batch is None else batch.tokens.shape[1],
                        "tokens": dict(sorted(per_bucket.items())),
                    }
                )
            )
        optimizer.zero_grad()
        if batch is not None:
            logits = model(batch.tokens, batch.position_ids)
            # next-token loss inside each document: no target across a boundary or into padding
            target_ok = batch.loss_mask[:, 1:] & (batch.position_ids[:, 1:] != 0)
            loss = (
                torch.nn.functional.cross_entropy(
                    logits[:, :-1][target_ok], (batch.tokens[:, 1:] % args.vocab)[target_ok]
                )
                if target_ok.any()
                else logits.sum() * 0
            )
            loss.backward()
            if dump:
                seen.append(batch.tokens[batch.loss_mask].numpy())
                batches[f"tokens-{step}"], batches[f"mask-{step}"] = (
                    batch.tokens.numpy(),
                    batch.loss_mask.numpy(),
                )
        for p in model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
            p.grad /= world.world_size
        optimizer.step()
        step += 1
        if counter is not None:
            counter.add(batch, phase, weights)
            if counter.due(step):  # every rank at the same step: one all-reduce
                report = counter.reduce(step)
                mixture_log.append(json.dumps(report, sort_keys=True))
                if world.rank == 0:
                    log(
                        f"mixture at step {step}, phase {phase}: realized "
                        f"{json.dumps({b: round(x, 4) for b, x in report['realized'].items()})} target "
                        f"{json.dumps({b: round(x, 4) for b, x in report['target'].items()})}"
                    )
        if step % 10 == 0 and batch is not None:
            log(
                f"step {step} phase {phase} loss {loss.item():.3f} tokens {json.dumps(dict(sorted(per_bucket.items())))}"
            )
        if step == args.save_at or (args.save_at is None and step % args.save_every == 0):
            saved = save_checkpoint(args.ckpt, step, model, optimizer, loader, counter=counter)
            log(f"checkpoint at step {step} -> {saved}")
            print(loader.metrics_line(), flush=True)  # read latency, bytes, stalls: the data card's table
            if args.stop_after_save:
                break
    if dump:
        args.dump_tokens.mkdir(parents=True, exist_ok=True)
        out = np.concatenate(seen) if seen else np.zeros(0, dtype=np.int64)
        np.save(args.dump_tokens / f"tokens-{args.tag}-rank{world.rank}.npy", out)
        np.savez(args.dump_tokens / f"batches-{args.tag}-rank{world.rank}.npz", **batches)
        (args.dump_tokens / f"steps-{args.tag}-rank{world.rank}.jsonl").write_text(
            "".join(f"{x}\n" for x in steps_log)
        )
        record = loader.state_dict()["record"]  # a collective: every rank calls it
        if world.rank == 0:
            (args.dump_tokens / f"record-{args.tag}.json").write_text(record)
        (args.dump_tokens / f"mixture-{args.tag}-rank{world.rank}.jsonl").write_text(
            "".join(f"{x}\n" for x in mixture_log)
        )
    print(loader.metrics_line(), flush=True)
    log(f"done at step {step} in {time.perf_counter() - t0:.1f}s")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
