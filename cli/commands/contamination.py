"""``corpus contamination``: a snapshot's contamination report, or a benchmark checked against it.

Without ``--benchmark`` it prints the report the build made (per benchmark: documents and tokens
flagged, rates, longest run). With ``--benchmark FILE`` (repeatable) it checks a benchmark — one
published after the snapshot, or one of the build's own — against the per-document 8-gram index the
build kept, without reading the corpus, by the build's own rule (:mod:`corpus.decont.rule`): the same
items are contaminated in the same documents as the build's scan would have found. The index is the
snapshot's own (``decont/8gram_docs/``, :meth:`corpus.snapshot.lookup.Snapshot.doc_gram_index`), so a snapshot
copied away from its build is checked the same; its parts are memory-mapped, and a check reads the pages
its binary searches touch. With ``--record CKPT`` it answers, per benchmark, which flagged documents a
training run read by that checkpoint and at which step (:mod:`cli.commands._run_contamination`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cli.commands._run_contamination import flagged_by_benchmark, run_contamination, run_table
from cli.commands._snapshot_ref import add_snapshot_arguments
from corpus.decont.doc_grams import SAMPLED_MIN_HITS, SAMPLED_RULE, check_benchmark, doc_ids_of_keys
from corpus.decont.registry import RegistryError, load_benchmark
from corpus.decont.report import report_table
from corpus.model.errors import UserError
from corpus.snapshot.lookup import Snapshot
from corpus.version.open import is_version, open_version


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "contamination", help="a snapshot's contamination report; check a benchmark against it"
    )
    add_snapshot_arguments(p)
    p.add_argument(
        "--benchmark",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help='a benchmark JSONL ({"id", "text"[, "doc"]} per line) to check against the kept index',
    )
    p.add_argument(
        "--min-run",
        type=int,
        default=None,
        metavar="M",
        help="consecutive 8-grams of a passage that count as contaminated (default: the build's)",
    )
    p.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="CKPT",
        help="a training run's checkpoint root, step-N directory or JSON loader record: which flagged "
        "documents the run read by then, and at which step it first read each",
    )
    p.add_argument(
        "--recipe", type=Path, default=None, help="the run's recipe (needed when the run used one)"
    )
    p.add_argument(
        "--json", action="store_true", help="print JSON (with every contaminated item's documents)"
    )
    p.set_defaults(func=run)


def check(snap: Snapshot, benchmarks: list[Path], min_run: int | None = None) -> dict:
    """Every benchmark checked against the snapshot's per-document index, documents named by doc_id."""
    index, listing = snap.doc_gram_index()
    min_run = min_run or int(listing["min_run"])
    if min_run < 1:
        raise UserError(f"--min-run must be at least 1, got {min_run}")
    sample = int(listing.get("sample", 1))  # a sampled index is checked by the sampled rule
    results = []
    for path in benchmarks:
        try:
            results.append(
                check_benchmark(
                    load_benchmark(path), index, min_run, int(listing["min_item_words"]), sample=sample
                )
            )
        except RegistryError as e:
            raise UserError(str(e)) from e
    keys = {m["doc"] for r in results for found in r["matches"].values() for m in found}
    ids = doc_ids_of_keys(snap.doc_index(), keys) if keys else {}
    for r in results:
        for found in r["matches"].values():
            for m in found:
                m["doc_ids"] = ids.get(m["doc"], [])
    return {
        "snapshot_id": snap.snapshot_id,
        "rule": listing["rule"] if sample == 1 else SAMPLED_RULE,
        "sample": sample,
        "n": int(listing["n"]),
        "min_run": min_run,
        "min_item_words": int(listing["min_item_words"]),
        "index_rows": int(listing["rows"]),
        "benchmarks": results,
    }


def run(args: argparse.Namespace) -> int:
    if args.record is not None:
        return run_of_record(args)
    if args.recipe is not None:
        raise UserError("--recipe goes with --record: it is the recipe of the run the record is of")
    snap = Snapshot.open(args.snapshot, args.root)
    if not args.benchmark:
        report = snap.contamination_report()
        print(json.dumps(report, indent=1) if args.json else report_table(report))
        return 0
    out = check(snap, args.benchmark, args.min_run)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    rows = [("benchmark", "items", "checked", "flagged", "rate", "longest run")]
    for r in out["benchmarks"]:
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
    records = (
        f"checked against {out['index_rows']} (8-gram, document) records of snapshot {snap.snapshot_id[:19]}…"
    )
    if out["sample"] == 1:
        print(
            f"{records} by the build's rule ({out['rule']}: run >= {out['min_run']} 8-grams, or a whole passage)"
        )
    else:
        unsampled = sum(r["unsampled_items"] for r in out["benchmarks"])
        print(
            f"{records}, one 8-gram in {out['sample']} kept, by {out['rule']}: a document holding "
            f">= {SAMPLED_MIN_HITS} of a passage's sampled 8-grams (all of them where it has fewer); "
            f"{unsampled} checked item(s) have no sampled 8-gram and cannot be found"
        )
    return 0


def run_of_record(args: argparse.Namespace) -> int:
    """``--record``: the flagged documents (the build's, or ``--benchmark``'s) the run read, and when."""
    if is_version(Path(args.snapshot)):
        snap, loader_path = Snapshot(open_version(Path(args.snapshot)).base_dir), Path(args.snapshot)
    else:
        snap = Snapshot.open(args.snapshot, args.root)
        loader_path = snap.dir
    checked = check(snap, args.benchmark, args.min_run) if args.benchmark else None
    flagged = flagged_by_benchmark(snap.contamination_report(), checked)
    out = run_contamination(snap, loader_path, args.record, args.recipe, flagged)
    print(json.dumps(out, indent=1) if args.json else run_table(out))
    return 0
