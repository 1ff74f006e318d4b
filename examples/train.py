"""A tiny data-parallel training run on a snapshot, on CPU: the loader as a training job uses it.

Launch it with torchrun or srun (the rank and world size come from the launcher)::

    torchrun --nproc-per-node 4 examples/train.py --snapshot BUILD/snapshot --ckpt runs/ckpt --steps 200
    srun -n 4 python examples/train.py --snapshot BUILD/snapshot --ckpt runs/ckpt --steps 200

Every ``--save-every`` steps it checkpoints model, optimizer and loader state together
(``torch.distributed.checkpoint``); started again with ``--resume`` it continues from the checkpoint on
however many ranks it now has. Gradients are averaged with an all-reduce over gloo; a rank whose data
has run out (every bucket at its epoch cap) contributes zero gradients until all ranks are done.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's packages, however it is launched

from loader import SnapshotLoader, World  # noqa: E402
from loader.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint  # noqa: E402


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
    ap.add_argument("--ckpt", required=True, type=Path,
                    help="checkpoint root: one step-N directory per save and a `latest` pointer")
    ap.add_argument("--steps", type=int, default=100, help="stop after this many steps (or when the data ends)")
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--save-at", type=int, default=None, help="save once at this step")
    ap.add_argument("--stop-after-save", action="store_true", help="exit right after the first save")
    ap.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint in --ckpt "
                    "(there must be one)")
    ap.add_argument("--auto-resume", action="store_true", help="continue from the newest complete checkpoint in "
                    "--ckpt when there is one, else start at step 0")
    ap.add_argument("--allow-missing-loader-state", action="store_true")
    ap.add_argument("--mixture", type=json.loads, default=None, help='JSON {"bucket": weight}')
    ap.add_argument("--epoch-caps", type=json.loads, default=None, help='JSON {"bucket": epochs} or an int')
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--run-len", type=int, default=8)
    ap.add_argument("--chunk-tokens", type=int, default=1 << 20)
    ap.add_argument("--vocab", type=int, default=4096, help="embedding rows (token ids are taken modulo)")
    ap.add_argument("--dump-tokens", type=Path, default=None,
                    help="write the tokens this rank trained on to DIR/tokens-<tag>-rank<r>.npy (for tests)")
    ap.add_argument("--tag", default="run")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    world = World.detect()
    dist.init_process_group("gloo", init_method=world.init_method, rank=world.rank, world_size=world.world_size)
    torch.manual_seed(args.seed)  # the same initial model on every rank
    model = TinyLM(args.vocab)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = SnapshotLoader(args.snapshot, args.mixture, seed=args.seed, seq_len=args.seq_len,
                            batch_size=args.batch_size, dp_rank=world.rank, dp_world=world.world_size,
                            epoch_caps=args.epoch_caps, run_len=args.run_len, chunk_tokens=args.chunk_tokens)
    step = 0
    ckpt = find_checkpoint(args.ckpt) if args.resume or args.auto_resume else None
    if args.resume and ckpt is None:
        raise SystemExit(f"--resume: no complete checkpoint under {args.ckpt}")
    if ckpt is not None:
        step = load_checkpoint(ckpt, model, optimizer, loader,
                               allow_missing_loader_state=args.allow_missing_loader_state)

    def log(msg: str) -> None:
        print(f"[rank {world.rank}/{world.world_size}] {msg}", flush=True)

    log(f"{world.launcher}: starting at step {step}, loader step {loader.step}")
    seen: list[np.ndarray] = []
    t0 = time.perf_counter()
    while step < args.steps:
        batch = loader.next_batch()
        has_data = torch.tensor([0 if batch is None else 1])
        dist.all_reduce(has_data)
        if int(has_data) == 0:
            log(f"every rank's data is exhausted at step {step}")
            break
        optimizer.zero_grad()
        if batch is not None:
            logits = model(batch.tokens, batch.position_ids)
            # next-token loss inside each document: no target across a boundary or into padding
            target_ok = batch.loss_mask[:, 1:] & (batch.position_ids[:, 1:] != 0)
            loss = torch.nn.functional.cross_entropy(logits[:, :-1][target_ok], (batch.tokens[:, 1:] % args.vocab)
                                                     [target_ok]) if target_ok.any() else logits.sum() * 0
            loss.backward()
            seen.append(batch.tokens[batch.loss_mask].numpy())
        for p in model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
            p.grad /= world.world_size
        optimizer.step()
        step += 1
        if step % 10 == 0 and batch is not None:
            log(f"step {step} loss {loss.item():.3f} buckets {','.join(sorted(set(batch.buckets)))}")
        if step == args.save_at or (args.save_at is None and step % args.save_every == 0):
            saved = save_checkpoint(args.ckpt, step, model, optimizer, loader)
            log(f"checkpoint at step {step} -> {saved}")
            if args.stop_after_save:
                break
    if args.dump_tokens is not None:
        args.dump_tokens.mkdir(parents=True, exist_ok=True)
        out = np.concatenate(seen) if seen else np.zeros(0, dtype=np.int64)
        np.save(args.dump_tokens / f"tokens-{args.tag}-rank{world.rank}.npy", out)
    log(f"done at step {step} in {time.perf_counter() - t0:.1f}s")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
