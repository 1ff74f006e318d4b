"""The ``--snapshot ID [--root DIR]`` pair every command that opens a snapshot takes."""

from __future__ import annotations

import argparse


def add_snapshot_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--snapshot",
        required=True,
        metavar="ID",
        help="snapshot id (sha256:… or a hex prefix) or a snapshot / build directory",
    )
    p.add_argument(
        "--root", default=None, metavar="DIR", help="where snapshots live (default $CORPUS_SNAPSHOTS)"
    )
