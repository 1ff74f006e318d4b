"""``corpus config defaults | validate FILE | explain KEY``: the build config, before a build.

``defaults`` prints every table with every key at its default (JSON: a config file that changes
nothing); ``validate`` checks a file as ``corpus build`` does before its first stage (unknown keys,
types, each stage's own checks, ``[policy]``, ``[alarms]``, ``[dedup_index]``) and says ``ok`` or the one
line that is wrong (exit 2); ``explain`` prints a key's type, default and what it is. The reference
of every key: docs/config.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from corpus.model.config import load_config_file
from corpus.model.errors import UserError
from orchestration.buildsteps import check_stage_tables
from orchestration.config_reference import defaults, keys, top_level_keys
from runtime.build import DEDUP_INDEX, IndexSettings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="print the defaults, check a config file, explain a key")
    what = p.add_subparsers(dest="what", required=True, metavar="WHAT", help="defaults, validate or explain")
    what.add_parser("defaults", help="every table with every key at its default, as JSON")
    v = what.add_parser("validate", help="check a config file as corpus build does before its first stage")
    v.add_argument("file", type=Path, metavar="FILE", help="a TOML or JSON build config")
    e = what.add_parser("explain", help="a key's type, default and what it is")
    e.add_argument("key", metavar="KEY", help="TABLE.KEY (minhash_dedup.num_perm), or a table name")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.what == "defaults":
        print(json.dumps(defaults(), indent=1, ensure_ascii=False))
    elif args.what == "validate":
        cfg = load_config_file(args.file)
        IndexSettings.of(cfg.pop(DEDUP_INDEX, None))
        check_stage_tables(cfg)
        print(f"{args.file}: ok")
    else:
        table, _, name = args.key.partition(".")
        found = [k for k in top_level_keys() if not name and k.name == table]
        found = found or [k for k in keys() if k.table == table and name in ("", k.name)]
        if not found:
            raise UserError(f"no config key {args.key}: see corpus config defaults, or docs/config.md")
        for k in found:
            where = f"[{k.table}] " if k.table else "(top level) "
            print(f"{where}{k.name}: {k.type}, default {k.default}" + (f"\n    {k.note}" if k.note else ""))
    return 0
