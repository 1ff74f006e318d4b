"""``corpus known-bad-keys FILE... [--jsonl]``: the entries of a known-bad list, one per text.

An operator holding texts that must never be stored (or a partner's tool run on them) makes the list
extract removes them by (``[extract] known_bad_keys``, :mod:`corpus.text.known_bad`); the texts stay
where they are, only their keys are printed, one a line, sorted, without duplicates.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from corpus.model.errors import UserError
from corpus.text.known_bad import spelt_key


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("known-bad-keys", help="the known-bad list entries (exact keys) of texts")
    p.add_argument("files", type=Path, nargs="+", metavar="FILE", help="a text each (UTF-8)")
    p.add_argument(
        "--jsonl", action="store_true", help="each FILE is JSON lines, a text per line in its 'text' field"
    )
    p.set_defaults(func=run)


def texts(path: Path, jsonl: bool) -> list[str]:
    try:
        data = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8") from None
    if not jsonl:
        return [data]
    out = []
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            text = json.loads(line).get("text")
        except (json.JSONDecodeError, AttributeError):
            text = None
        if not isinstance(text, str):
            raise UserError(f"{path} line {n}: not a JSON object with a 'text' string")
        out.append(text)
    return out


def run(args: argparse.Namespace) -> int:
    keys = {spelt_key(t) for path in args.files for t in texts(path, args.jsonl)}
    print("\n".join(sorted(keys)))
    return 0
