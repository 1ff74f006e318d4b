"""``corpus stage NAME``: one stage, locally under ``mpiexec -n N``."""

from __future__ import annotations

import argparse
from pathlib import Path

from runtime.build import launch_stage


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stage", help="run one stage under mpiexec")
    p.add_argument("name", metavar="NAME", help="the stage (see `corpus report` for the order)")
    p.add_argument(
        "--in",
        dest="inputs",
        nargs="+",
        required=True,
        type=Path,
        metavar="DIR",
        help="the previous stage's directory (raw input files for the first stage)",
    )
    p.add_argument("--out", required=True, type=Path, metavar="DIR")
    p.add_argument("--ranks", type=int, default=1, metavar="N")
    p.add_argument("--config", type=Path, default=None, metavar="FILE")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    m = launch_stage(args.name, args.inputs, args.out, args.ranks, args.config)
    print(f"stage {m.stage} manifest {m.digest}")
    return 0
