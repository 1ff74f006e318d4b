"""``--log-json`` of ``corpus build`` and ``corpus stage``: every line a JSON object (runtime.logline)."""

from __future__ import annotations

import argparse
import os
import sys

from runtime.logline import LOG_JSON_ENV, LogRecord, emit

HELP = (
    "print every log line as one JSON object (ts, level, event, stage, rank, message and the event's "
    f"numbers); sets {LOG_JSON_ENV}=1, which every rank reads"
)


def add_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-json", action="store_true", help=HELP)


def use(args: argparse.Namespace) -> None:
    """``--log-json`` given: the environment variable every line's formatter (and every rank) reads."""
    if args.log_json:
        os.environ[LOG_JSON_ENV] = "1"


def say_result(message: str, **fields: str) -> None:
    """One line of the command's result on stdout (``snapshot_id sha256:…``), or its JSON object."""
    emit(LogRecord(message=message, event="result", fields=fields), sys.stdout)
