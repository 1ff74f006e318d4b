"""``corpus config defaults | validate FILE [--kind K] | explain KEY | schema [K]``: configuration, checked
before it is used.

``defaults`` prints every table of the build config with every key at its default (JSON: a config file
that changes nothing); ``validate`` checks a file whole as the command that reads it would, and says
``ok`` or the one line that is wrong (exit 2): ``--kind build`` (the default) as ``corpus build`` does
before its first stage, ``selection`` as ``corpus version --select``, ``recipe`` as the loader and
``corpus recipe-audit``, ``deployment`` as the DAGs read ``CORPUS_DEPLOYMENT`` (a JSON object);
``explain`` prints a build key's type, default and what it is; ``schema`` prints the JSON Schema of a
kind, generated from the dataclasses that read it (the build DAGs' ``config`` Param uses the build's).
The reference of every key: docs/config.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from corpus.model.config import load_config_file
from corpus.model.errors import UserError
from corpus.select.recipe import load_recipe
from corpus.select.selection import load_selection
from orchestration.buildsteps import check_config_file
from orchestration.config_reference import defaults, keys, top_level_keys
from orchestration.config_schema import KINDS, schema_of
from orchestration.deployment import Deployment, DeploymentError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="print the defaults or a schema, check a config file, explain a key")
    what = p.add_subparsers(
        dest="what", required=True, metavar="WHAT", help="defaults, validate, explain or schema"
    )
    what.add_parser("defaults", help="every table with every key at its default, as JSON")
    v = what.add_parser("validate", help="check a file whole, as the command that reads it does")
    v.add_argument("file", type=Path, metavar="FILE", help="a TOML (or JSON) file of that kind")
    v.add_argument("--kind", choices=KINDS, default="build", help="what the file is (default: build)")
    e = what.add_parser("explain", help="a key's type, default and what it is")
    e.add_argument("key", metavar="KEY", help="TABLE.KEY (minhash_dedup.num_perm), or a table name")
    s = what.add_parser("schema", help="the JSON Schema of a kind of file, from the code that reads it")
    s.add_argument("kind", nargs="?", choices=KINDS, default="build", help="default: build")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.what == "defaults":
        print(json.dumps(defaults(), indent=1, ensure_ascii=False))
    elif args.what == "validate":
        VALIDATE[args.kind](args.file)
        print(f"{args.file}: ok")
    elif args.what == "schema":
        print(json.dumps(schema_of(args.kind), indent=1, ensure_ascii=False))
    else:
        explain(args.key)
    return 0


def validate_build(path: Path) -> None:
    check_config_file(path)


def validate_deployment(path: Path) -> None:
    raw = load_config_file(path)
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a deployment is an object of keys, got {type(raw).__name__}")
    try:
        Deployment.from_mapping(raw)
    except DeploymentError as e:
        raise UserError(f"{path}: {e}") from None


VALIDATE = {
    "build": validate_build,
    "selection": load_selection,
    "recipe": load_recipe,
    "deployment": validate_deployment,
}


def explain(key: str) -> None:
    table, _, name = key.partition(".")
    found = [k for k in top_level_keys() if not name and k.name == table]
    found = found or [k for k in keys() if k.table == table and name in ("", k.name)]
    if not found:
        raise UserError(f"no config key {key}: see corpus config defaults, or docs/config.md")
    for k in found:
        where = f"[{k.table}] " if k.table else "(top level) "
        print(f"{where}{k.name}: {k.type}, default {k.default}" + (f"\n    {k.note}" if k.note else ""))
