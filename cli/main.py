"""``corpus``: the command line. Each subcommand lives in its own module under ``cli.commands``
and registers itself with ``register(subparsers)``; this file only discovers and dispatches them."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import cli.commands
from corpus.model.config import ConfigError
from corpus.model.errors import UserError


def command_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(cli.commands.__path__) if not m.name.startswith("_"))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand, or with ``only`` that one: a command imports just its own
    module, so ``corpus version`` does not pay for the torch, Airflow-facing and report imports of
    the others (a tenth of a second of the version step's half second)."""
    ap = argparse.ArgumentParser(prog="corpus", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [only] if only else command_names():
        importlib.import_module(f"cli.commands.{name}").register(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    module = argv[0].replace("-", "_") if argv else None
    named = module if module in command_names() else None
    args = build_parser(named).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UserError, ConfigError) as e:
        print(f"corpus {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"corpus {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
