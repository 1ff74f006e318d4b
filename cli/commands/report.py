"""``corpus report DIR``: the data card of a build or snapshot (HTML + JSON), or its counts as JSON.

DIR is a build directory, a snapshot or version directory or a snapshot manifest; see
:mod:`corpus.report.build_view`. Without ``--json`` the funnel is printed and the card written to
``<build>/report/card.html`` (and ``card.json`` beside it; another version's under its id) unless
``--html`` names another place.
With ``--record`` the build is also recorded in the yield history, and a yield alarm exits with status 3
(for sbatch scripts and shell tasks; Python callers use :func:`corpus.report.alarms.enforce`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from corpus.model.errors import UserError
from corpus.model.layout import SNAPSHOT_DIR
from corpus.report.alarms import BuildAlarmError, enforce
from corpus.report.build_view import BuildView, open_build
from corpus.report.counts import funnel_table, stage_counts


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="the data card of a build or snapshot (HTML + JSON), or its counts")
    p.add_argument(
        "dir",
        type=Path,
        metavar="DIR",
        help="build directory, snapshot directory or snapshot manifest, or a snapshot id (with --root)",
    )
    p.add_argument(
        "--root",
        type=Path,
        metavar="DIR",
        help="where snapshots named by id live (default $CORPUS_SNAPSHOTS)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print per-stage counts as JSON ({stage: {in, out, filtered, quarantined, ...}}) and "
        "write no card unless --html is given",
    )
    p.add_argument(
        "--html",
        type=Path,
        default=None,
        metavar="OUT",
        help="write the HTML card here (the JSON card goes beside it as OUT with .json); "
        "default <build>/report/card.html (a version other than the build's default: "
        "<build>/report/<its id, 16 hex>/card.html)",
    )
    p.add_argument(
        "--history",
        type=Path,
        default=None,
        metavar="FILE",
        help="yield history to compare with (default <builds-root>/yield-history.jsonl)",
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="record this build in the yield history and exit 3 on a yield alarm "
        '(unless the build config says [alarms] on_alarm = "warn")',
    )
    p.add_argument(
        "--training-log",
        type=Path,
        action="append",
        default=None,
        metavar="FILE",
        help="a training log of examples/train.py (its stdout, or --dump-tokens' steps-*.jsonl; repeat for "
        "several): adds realized vs target per recipe phase to the card",
    )
    p.set_defaults(func=run)


def default_card(view: BuildView) -> Path:
    """``<build>/report/card.html`` for the build and its default version; another version's card goes
    to ``<build>/report/<its id, 16 hex>/card.html``, never over the build's."""
    assert view.build_dir is not None
    v = view.version
    default = view.build_dir / SNAPSHOT_DIR
    if v is None or v.dir is None or v.dir.resolve() == default.resolve():
        return view.build_dir / "report" / "card.html"
    return view.build_dir / "report" / v.snapshot_id.removeprefix("sha256:")[:16] / "card.html"


def run(args: argparse.Namespace) -> int:
    view = open_build(args.dir, args.root)
    if args.json:
        if not view.stages:
            raise UserError(
                f"{args.dir}: no stage manifests beside this snapshot; counts need the build directory"
            )
        print(json.dumps(stage_counts(view.stages), indent=1))
        if args.html is None and not args.record:
            return 0
    out = args.html
    if out is None:
        if view.build_dir is None:
            raise UserError(
                f"{args.dir} is a snapshot without its build: say where the card goes with --html OUT"
            )
        out = default_card(view)
    from corpus.report.card import alarm_lines, write_card  # matplotlib, only where a card is written

    failed = None
    if args.record:
        if view.build_dir is None:
            raise UserError(
                f"{args.dir}: --record needs the build directory, not a snapshot copied away from it"
            )
        try:
            enforce(view.build_dir, args.history)
        except BuildAlarmError as e:
            failed = e
    card = write_card(view, out, args.history, args.training_log)
    stream = sys.stderr if args.json else sys.stdout
    if not args.json and view.stages:
        print(funnel_table(view.stages))
    for line in alarm_lines(card):
        print(line, file=stream)
    print(f"report html {out}", file=stream)
    print(f"report json {out.with_suffix('.json')}", file=stream)
    return 3 if failed else 0
