"""``corpus stage NAME``: one stage, locally under ``mpiexec -n N``."""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.commands import _log_json
from runtime.build import launch_stage
from runtime.launch import Interrupted


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stage", help="run one stage under mpiexec")
    p.add_argument("name", metavar="NAME", help="the stage (see `corpus report` for the order)")
    p.add_argument(
        "--input",
        "--in",  # deprecated: the stage programs' own spelling (python -m hpc_jobs.NAME --in)
        dest="inputs",
        nargs="+",
        required=True,
        type=Path,
        metavar="PATH",
        help="the previous stage's directory (raw input files for the first stage); --in is deprecated",
    )
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="the stage's directory")
    p.add_argument("--ranks", type=int, default=1, metavar="N", help="MPI ranks (default 1)")
    p.add_argument("--config", type=Path, default=None, metavar="FILE", help="build config (TOML)")
    _log_json.add_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    _log_json.use(args)
    try:
        m = launch_stage(args.name, args.inputs, args.out, args.ranks, args.config)
    except KeyboardInterrupt:  # a stage resumes from its checkpoints
        raise Interrupted() from None
    _log_json.say_result(f"stage {m.stage} manifest {m.digest}", stage=m.stage, manifest=m.digest)
    return 0
