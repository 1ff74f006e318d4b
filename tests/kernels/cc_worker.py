"""Run connected_components on this rank's share of a fixed random graph; write the labels as JSON.
With ``--checkpoint DIR`` the rounds are kept there; ``--kill-after-round R`` makes rank 1 kill itself
(SIGKILL) once round R is committed."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
from pathlib import Path

import numpy as np
from mpi4py import MPI

from mpi_kernels.union_find import RoundCheckpoint, connected_components, pair_dtype

WIDTH = 9


def node(i: int) -> bytes:
    return i.to_bytes(4, "big") + b"-node"


def graph(seed: int, n: int) -> list[tuple[bytes, bytes]]:
    """A long path in shuffled node order, a star, a clique, random sparse pairs, duplicates and loops."""
    rnd = random.Random(seed)
    perm = rnd.sample(range(n), n)
    edges = [(perm[i], perm[i + 1]) for i in range(0, n // 3)]  # a path through 1/3 of the nodes
    hub = perm[n // 3]
    edges += [(hub, perm[i]) for i in range(n // 3 + 1, n // 2)]  # a star
    clique = perm[n // 2 : n // 2 + 12]
    edges += [(a, b) for a in clique for b in clique if a < b]
    rest = perm[n // 2 + 12 :]
    edges += [(rnd.choice(rest), rnd.choice(rest)) for _ in range(len(rest) // 3)]  # includes self-loops
    edges += edges[:50] + [(b, a) for a, b in edges[50:100]]
    rnd.shuffle(edges)
    return [(node(a), node(b)) for a, b in edges]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nodes", type=int, default=3000)
    ap.add_argument("--budget", type=int, default=256 << 20)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--checkpoint", type=Path)
    ap.add_argument("--kill-after-round", type=int, default=-1)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD

    def after_round(r: int) -> None:
        if r == a.kill_after_round and comm.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)

    checkpoint = RoundCheckpoint(a.checkpoint, after_round) if a.checkpoint else None
    mine = graph(a.seed, a.nodes)[comm.rank :: comm.size]
    rows = np.frombuffer(b"".join(u + v for u, v in mine), dtype=pair_dtype(WIDTH))
    batches = [rows[i : i + 97] for i in range(0, len(rows), 97)]  # several batches per rank
    comps = connected_components(
        comm,
        batches,
        width=WIDTH,
        memory_budget_bytes=a.budget,
        spill_dir=a.out / "spill",
        checkpoint=checkpoint,
    )
    labels = comps.labels
    res = {
        "labels": [
            (u.tobytes().hex(), lab.tobytes().hex()) for u, lab in zip(labels["u"], labels["v"], strict=True)
        ],
        "rounds": comps.rounds,
        "resumed_after": comps.resumed_after,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"rank{comm.rank}.json").write_text(json.dumps(res))


if __name__ == "__main__":
    main()
