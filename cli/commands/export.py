"""``corpus export VERSION --format megatron|parquet|jsonl --out DIR [--ranks N]``: a version's selected
documents in the formats trainers and tools read (docs/export.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from corpus.export.export import FORMATS
from hpc_jobs.export.job import export_command, export_id_of, parse_weights
from runtime.launch import launch


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write a version's selected documents as Megatron shards, Parquet or Dolma JSONL",
        description="Only the documents the version selects are written (the candidates' shards hold "
        "every stored document, rejected ones included). The same version gives the same bytes on any "
        "--ranks; a rerun into the same DIR resumes. The last line of standard output is "
        "'export_id sha256:...'.",
    )
    p.add_argument("version", type=Path, metavar="VERSION", help="a build (its default version) or a version")
    p.add_argument("--format", required=True, choices=FORMATS, help="what to write (docs/export.md)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="a new or empty directory")
    p.add_argument("--ranks", type=int, default=1, metavar="N", help="MPI ranks on this machine (default 1)")
    p.add_argument("--added", metavar="DATE", help="jsonl: the records' `added` field (default: null)")
    p.add_argument(
        "--weights",
        metavar="B=W,...",
        help="megatron: bucket weights of the blend, e.g. web=0.7,curated=0.3 (default: by tokens)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    parse_weights(args.weights)  # a malformed value is one line here, before any rank starts
    command = export_command(args.version, args.format, args.out, args.added, args.weights)
    launch(command, args.ranks, f"export of {args.version}")
    print(f"export_id {export_id_of(args.out)}")
    return 0
