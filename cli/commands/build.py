"""``corpus build``: every stage, locally under ``mpiexec -n N``, then the candidates and the default version;
with ``--base BUILD`` only the new inputs, deduplicated against the base's persistent index
(docs/incremental.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.commands import _log_json
from corpus.model.layout import candidates_dir, manifest_path, snapshot_dir
from orchestration.buildsteps import check_config_file
from runtime.build import build
from runtime.launch import Interrupted


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="run every stage on WARC / JSONL inputs and write a snapshot")
    p.add_argument(
        "--input",
        nargs="+",
        required=True,
        type=Path,
        metavar="PATH",
        help="WARC/ARC, JSONL or text files, repository archives (.tar.gz, .tgz, .zip) or directories",
    )
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="build directory")
    p.add_argument("--ranks", type=int, default=2, metavar="N", help="MPI ranks per stage (default 2)")
    p.add_argument("--config", type=Path, default=None, metavar="FILE", help="build config (TOML)")
    p.add_argument(
        "--seed", type=int, default=None, metavar="S", help="shuffle seed (overrides the config's)"
    )
    p.add_argument(
        "--base",
        type=Path,
        default=None,
        metavar="BUILD",
        help="a complete build to build against: its inputs are skipped, its documents keep their dedup decisions",
    )
    _log_json.add_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    _log_json.use(args)
    check_config_file(args.config)  # the whole file, now, once, before any stage runs
    try:
        snapshot_id = build(args.input, args.out, args.ranks, args.config, args.seed, base=args.base)
    except KeyboardInterrupt:  # anywhere in a build: it resumes
        raise Interrupted() from None
    candidates, snapshot = manifest_path(candidates_dir(args.out)), manifest_path(snapshot_dir(args.out))
    _log_json.say_result(f"candidates manifest {candidates}", candidates_manifest=str(candidates))
    _log_json.say_result(f"snapshot manifest {snapshot}", snapshot_manifest=str(snapshot))
    _log_json.say_result(f"snapshot_id {snapshot_id}", snapshot_id=snapshot_id)
    return 0
