"""``corpus``: the command line. Each subcommand lives in its own module under ``cli.commands``
and registers itself with ``register(subparsers)``; this file only discovers and dispatches them."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import pkgutil
import signal
import sys
import traceback
from collections.abc import Sequence

import cli.commands
from corpus.model.config import ConfigError
from corpus.model.errors import UserError
from runtime.logline import command_line

DESCRIPTION = """\
Turn web crawls, code and curated text into deduplicated, decontaminated, versioned training
tokens, and inspect what was built."""

EPILOG = """\
first steps:
  corpus build --input sample --out /tmp/build       # every stage, on this machine
  corpus report /tmp/build --html /tmp/card.html     # the data card
  corpus version /tmp/build --select SEL.toml --out /tmp/build/versions/v1   # a selection, in seconds
  corpus config defaults | validate FILE | explain TABLE.KEY
  corpus submit --input /data/crawl --out /scratch/b1   # the same build as SLURM jobs
  corpus status /scratch/b1                           # where a build is, step by step

`corpus COMMAND --help` for a command's flags; README.md and docs/ for the rest."""

#: the top-level modules of the optional extras (pyproject.toml): a command that needs one says which
EXTRA_OF_MODULE = {"torch": "loader", "airflow": "airflow", "datatrove": "bench", "datasketch": "bench"}

#: (command, flag) spellings still accepted, with a note naming the one to use
DEPRECATED_FLAGS = {("stage", "--in"): "--input"}


def command_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(cli.commands.__path__) if not m.name.startswith("_"))


def package_version() -> str:
    try:
        return importlib.metadata.version("corpus-pipeline")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand, or with ``only`` that one: a command imports just its own
    module, so ``corpus version`` does not pay for the torch, Airflow-facing and report imports of
    the others (a tenth of a second of the version step's half second)."""
    ap = argparse.ArgumentParser(
        prog="corpus",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--version", action="version", version=f"corpus-pipeline {package_version()}")
    ap.add_argument("--debug", action="store_true", help="print the traceback of an error, not one line")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [only] if only else command_names():
        importlib.import_module(f"cli.commands.{name}").register(sub)
    return ap


def missing_extra(e: BaseException) -> str | None:
    """The one line for a command whose optional extra is not installed (None: another error)."""
    if not isinstance(e, ModuleNotFoundError) or not e.name:
        return None
    extra = EXTRA_OF_MODULE.get(e.name.split(".")[0])
    if extra is None:
        return None
    return f"needs the [{extra}] extra ({e.name} is not installed): pip install 'corpus-pipeline[{extra}]'"


def main(argv: Sequence[str] | None = None) -> int:
    # `corpus query … | head`: the command ends quietly when its reader does, as cat and grep do
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    argv = list(sys.argv[1:] if argv is None else argv)
    words = [a for a in argv if a != "--debug"]
    module = words[0].replace("-", "_") if words else None
    named = module if module in command_names() else None
    try:
        parser = build_parser(named)
    except ModuleNotFoundError as e:  # the command's module imports an extra this install lacks
        if (line := missing_extra(e)) is None:
            raise
        print(f"corpus{' ' + named if named else ''}: error: {line}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    for word in words[1:]:
        use = DEPRECATED_FLAGS.get((args.command, word.split("=", 1)[0]))
        if use:
            print(
                f"corpus {args.command}: note: {word.split('=', 1)[0]} is deprecated, say {use}",
                file=sys.stderr,
            )
    try:
        return int(args.func(args) or 0)
    except (UserError, ConfigError) as e:
        if args.debug:
            traceback.print_exc()
        print(command_line(args.command, str(e)), file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # a job's launcher says how to go on (runtime.launch.Interrupted)
        print(command_line(args.command, str(e) or "interrupted", "warning", "interrupted"), file=sys.stderr)
        return 130
    except Exception as e:  # a bug, or a failure the command did not foresee: one line unless --debug
        if args.debug:
            raise
        if (line := missing_extra(e)) is not None:
            print(f"corpus {args.command}: error: {line}", file=sys.stderr)
            return 2
        why = f"{type(e).__name__}: {e} (corpus --debug {args.command} ... prints the traceback)"
        print(command_line(args.command, why), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
