"""``corpus status BUILD [--json]``: each step of a build (prepare, the nine stages, finalize): done,
running (units done of units, its SLURM job), pending, failed (the last error line of its log), or not
started. SLURM is asked about the jobs ``corpus submit`` queued; a build made otherwise is read from its
directory alone. Exit 1 when a step failed. docs/guide/slurm.md."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from corpus.model.errors import UserError
from orchestration.build_status import build_status, status_table
from orchestration.chain import read_record
from orchestration.submit import LocalBackend


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="what state a build is in, step by step (and its SLURM jobs)")
    p.add_argument(
        "build", type=Path, metavar="BUILD", help="the build directory (corpus build/submit --out)"
    )
    p.add_argument(
        "--json", action="store_true", help="one JSON object: every step's state, job id and detail"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.build.is_dir():
        raise UserError(f"no build directory at {args.build}")
    jobs = read_record(args.build)
    status = build_status(args.build, jobs, LocalBackend().status)
    print(json.dumps(status, indent=1) if args.json else status_table(status))
    return 1 if status["failed"] else 0
