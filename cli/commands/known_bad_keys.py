"""``corpus known-bad-keys FILE... [--jsonl] [--near]``: the entries of a known-bad list of texts.

An operator holding texts that must never be stored (or a partner's tool run on them) makes the list
extract removes them by (``[extract] known_bad_keys``, :mod:`corpus.text.known_bad`); the texts stay
where they are, only their entries are printed, one a line, sorted, without duplicates: each text's
exact key, and with ``--near`` its MinHash signature too (which matches copies with some words changed).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from corpus.model.errors import UserError
from corpus.text.known_bad import spelt_key, spelt_near
from hpc_jobs.extract.known_bad import NEAR_PARAMS
from mpi_kernels.minhash import MinHasher, is_empty


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("known-bad-keys", help="the known-bad list entries (exact keys) of texts")
    p.add_argument("files", type=Path, nargs="+", metavar="FILE", help="a text each (UTF-8)")
    p.add_argument(
        "--jsonl", action="store_true", help="each FILE is JSON lines, a text per line in its 'text' field"
    )
    p.add_argument("--near", action="store_true", help="also each text's near entry (its MinHash signature)")
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
    every = [t for path in args.files for t in texts(path, args.jsonl)]
    entries = {spelt_key(t) for t in every}
    if args.near and every:
        sigs = MinHasher(NEAR_PARAMS).signatures(every)
        entries |= {spelt_near(s) for s in sigs[~is_empty(sigs)]}
    print("\n".join(sorted(entries)))
    return 0
