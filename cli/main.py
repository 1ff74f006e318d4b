"""``corpus``: the command line. Each subcommand lives in its own module under ``cli.commands``
and registers itself with ``register(subparsers)``; this file only discovers and dispatches them."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import cli.commands
from corpus.config import ConfigError
from corpus.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="corpus", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mod in sorted(pkgutil.iter_modules(cli.commands.__path__), key=lambda m: m.name):
        if not mod.name.startswith("_"):
            importlib.import_module(f"cli.commands.{mod.name}").register(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
