"""``corpus contamination``: a snapshot's contamination report, or a new benchmark checked against it.

Without ``--benchmark`` it prints the report the build made (per benchmark: documents and tokens
flagged, rates, longest run). With ``--benchmark FILE`` (repeatable) it checks a benchmark published
after the snapshot against the snapshot's retained 13-gram index, without reading the corpus: the
index's parts are memory-mapped one at a time, only those the benchmark's hashes fall in.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cli.commands._snapshot_ref import add_snapshot_arguments
from corpus.decont.corpus_index import check_benchmark
from corpus.decont.registry import RegistryError, load_benchmark
from corpus.decont.report import report_table
from corpus.errors import UserError
from corpus.snapshot import Snapshot


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "contamination", help="a snapshot's contamination report; check a new benchmark against it"
    )
    add_snapshot_arguments(p)
    p.add_argument(
        "--benchmark",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help='a benchmark JSONL ({"id", "text"} per line) to check against the retained index',
    )
    p.add_argument(
        "--min-run",
        type=int,
        default=None,
        metavar="M",
        help="consecutive 13-grams that count as contaminated (default: the snapshot's)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    snap = Snapshot.open(args.snapshot, args.root)
    if not args.benchmark:
        report = snap.contamination_report()
        print(json.dumps(report, indent=1) if args.json else report_table(report))
        return 0
    art = snap.manifest.extra["artifacts"]["ngram_index"]
    min_run = args.min_run or int(art.get("min_run", 10))
    if min_run < 1:
        raise UserError(f"--min-run must be at least 1, got {min_run}")
    index = snap.ngram_index()
    results = []
    for path in args.benchmark:
        try:
            results.append(check_benchmark(load_benchmark(path), index, min_run))
        except RegistryError as e:
            raise UserError(str(e)) from e
    out = {
        "snapshot_id": snap.snapshot_id,
        "min_run": min_run,
        "index_grams": int(art["grams"]),
        "benchmarks": results,
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    rows = [("benchmark", "items", "checked", "flagged", "rate", "longest run")]
    for r in results:
        rows.append(
            (
                r["benchmark"],
                str(r["items"]),
                str(r["checked_items"]),
                str(r["flagged_items"]),
                f"{100 * r['rate']:.2f}%",
                str(r["longest_run"]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(
                c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    print(
        f"checked against {out['index_grams']} corpus 13-grams of snapshot {snap.snapshot_id} (run >= {min_run})"
    )
    return 0
