"""The version step as a job: ``corpus version`` for the DAGs, submitted like a stage.

    python -m hpc_jobs.version --in BUILD --out=DIR [--config=SELECTION.toml] [--select-inline=TOML]

It reads only the build's metadata table (corpus/version/) and runs as one process: the selection is
one DuckDB query over Parquet files, streamed (docs/versions.md says how it is partitioned across ranks
once the table no longer fits one machine). ``sbatch/stage.sbatch version …`` runs it under ``mpiexec``
like any stage, so the DAGs' submission, waiting, exit records and retries are the stages' own. The
last line of standard output is ``snapshot_id sha256:…``; a bad selection is a one-line error, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from corpus.model.errors import UserError
from corpus.select.selection import load_selection, parse_inline
from corpus.version.plan import kept_text, make_version


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="hpc_jobs.version", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--input",
        "--in",  # the old spelling, still accepted
        dest="build",
        nargs=1,
        required=True,
        type=Path,
        metavar="BUILD",
        help="the build, snapshot or version to select from",
    )
    ap.add_argument("--out", required=True, type=Path, metavar="DIR", help="the version directory to write")
    src = ap.add_mutually_exclusive_group(required=True)
    # --select as corpus version says it; --config, the old spelling, still accepted
    src.add_argument(
        "--select", "--config", dest="config", type=Path, metavar="SELECTION.toml", help="the selection file"
    )
    src.add_argument("--select-inline", metavar="TOML", help="the selection as TOML text")
    args = ap.parse_args(argv)
    try:
        selection = load_selection(args.config) if args.config else parse_inline(args.select_inline)
        planned = make_version(args.build[0], selection, args.out)
    except UserError as e:
        print(f"hpc_jobs.version: error: {e}", file=sys.stderr)
        return 2
    print(kept_text(planned.kept))
    print(f"snapshot_id {planned.manifest['snapshot_id']}", flush=True)
    return 0
