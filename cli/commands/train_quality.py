"""``corpus train-quality``: train the fastText quality classifier, and evaluate it on a held-out split.

    corpus train-quality --labelled labels.jsonl --out models/quality.ftz
    corpus train-quality --positive curated.jsonl --negative spam.jsonl.gz --out models/quality.ftz
    corpus train-quality --from BUILD/stages/extract --out models/quality.ftz

Examples from any mix of labelled JSONL, positives and negatives by source, and stage directories
labelled by tier; split by a hash of their group; the model scores only the languages with enough
examples of both classes in both splits, and its card holds their held-out numbers. See
docs/ingest-and-filters.md ("The quality classifier and `corpus train-quality`").
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

from corpus.formats.docshard import iter_docs
from corpus.model.digest import file_sha256
from corpus.model.errors import UserError
from corpus.model.manifest import NotCompleted, require_stage_manifest
from corpus.signals import quality as q


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train-quality", help="train the fastText quality classifier and evaluate it on held-out data"
    )
    src = p.add_argument_group("examples (at least one)")
    src.add_argument(
        "--labelled",
        nargs="+",
        default=[],
        type=Path,
        metavar="JSONL",
        help='labelled examples, a line {"text": ..., "label": "hq"|"lq"} (.gz too)',
    )
    src.add_argument(
        "--positive",
        nargs="+",
        default=[],
        type=Path,
        metavar="JSONL",
        help='files whose every line {"text": ...} is a positive (hq) example',
    )
    src.add_argument(
        "--negative",
        nargs="+",
        default=[],
        type=Path,
        metavar="JSONL",
        help='files whose every line {"text": ...} is a negative (lq) example',
    )
    src.add_argument(
        "--from",
        dest="stage_dirs",
        nargs="+",
        default=[],
        type=Path,
        metavar="DIR",
        help="completed stage directories with extracted text (extract, annotate), labelled by tier",
    )
    p.add_argument("--out", required=True, type=Path, metavar="MODEL", help="the model file to write (.ftz)")
    p.add_argument(
        "--labels-rule",
        default="",
        metavar="TEXT",
        help="how the labels were made, in words: recorded on the card",
    )
    ev = p.add_argument_group("split and evaluation")
    ev.add_argument(
        "--test-percent",
        type=int,
        default=q.TEST_PERCENT,
        help=f"share of split groups held out (default {q.TEST_PERCENT})",
    )
    ev.add_argument(
        "--min-train",
        type=int,
        default=q.MIN_TRAIN,
        help=f"a language is scored with this many training examples per class (default {q.MIN_TRAIN})",
    )
    ev.add_argument(
        "--min-test",
        type=int,
        default=q.MIN_TEST,
        help=f"... and this many held-out examples per class (default {q.MIN_TEST})",
    )
    ev.add_argument(
        "--threshold",
        type=float,
        default=q.THRESHOLD,
        help=f"precision and recall of hq at score >= this (default {q.THRESHOLD})",
    )
    ev.add_argument(
        "--keep-heldout",
        action="store_true",
        help="also write the held-out examples beside the model (MODEL.heldout.jsonl.gz)",
    )
    ft = p.add_argument_group("fastText")
    for f in fields(q.TrainParams):
        ft.add_argument(
            f"--{f.name.replace('_', '-')}",
            type=type(f.default),
            default=f.default,
            help=f"fastText {f.name} (default {f.default})",
        )
    p.set_defaults(func=run)


def tier_examples(stage_dirs: list[Path]) -> Iterator[q.Example]:
    for d in stage_dirs:
        try:
            manifest = require_stage_manifest(d)
        except NotCompleted as e:
            raise UserError(str(e)) from e
        for out in manifest.outputs:
            for doc in iter_docs(d / out.path):
                if doc.content_type == "text/html":
                    continue
                label = q.tier_label(doc.source_tier, doc.text, doc.lang or None)
                if label is not None:
                    ex = q.make_example(
                        doc.text, label, doc.lang or None, url=doc.url, source=f"tier {doc.source_tier}"
                    )
                    if ex is not None:
                        yield ex


def run(args: argparse.Namespace) -> int:
    params = q.TrainParams(**{f.name: getattr(args, f.name) for f in fields(q.TrainParams)})
    if not (args.labelled or args.positive or args.negative or args.stage_dirs):
        raise UserError("train-quality needs examples: --labelled, --positive / --negative or --from")
    if not 0 < args.test_percent < 100:
        raise UserError(f"--test-percent must be between 1 and 99, not {args.test_percent}")
    if args.min_train < 1 or args.min_test < 1:
        raise UserError("--min-train and --min-test must be at least 1: a scored language needs both classes")
    for path in [*args.labelled, *args.positive, *args.negative]:
        if not path.is_file():
            raise UserError(f"no such file: {path}")
    examples: list[q.Example] = []
    rules: dict[str, list[str]] = {"hq": [], "lq": []}
    try:
        for path in args.labelled:
            examples.extend(q.read_labelled_jsonl(path))
            rules["hq"].append(f"labelled in {path.name}")
            rules["lq"].append(f"labelled in {path.name}")
        for path in args.positive:
            examples.extend(q.read_labelled_jsonl(path, label="hq"))
            rules["hq"].append(f"every text of {path.name}")
        for path in args.negative:
            examples.extend(q.read_labelled_jsonl(path, label="lq"))
            rules["lq"].append(f"every text of {path.name}")
    except ValueError as e:
        raise UserError(str(e)) from e
    if args.stage_dirs:
        examples.extend(tier_examples(args.stage_dirs))
        rules["hq"].append(f"documents of tiers {', '.join(q.POSITIVE_TIERS)} (--from)")
        rules["lq"].append(
            "web documents the Gopher/C4 signals call low quality (--from, is_low_quality_web)"
        )
    labels = {k: "; ".join(v) for k, v in rules.items()}
    if args.labels_rule:
        labels["rule"] = args.labels_rule
    try:
        card = q.train_and_evaluate(
            examples,
            args.out,
            params,
            test_percent=args.test_percent,
            min_train=args.min_train,
            min_test=args.min_test,
            threshold=args.threshold,
            labels=labels,
            trained_from=[
                {"path": str(p), "sha256": "sha256:" + file_sha256(p)}
                for p in [*args.labelled, *args.positive, *args.negative]
            ]
            + [{"path": str(d)} for d in args.stage_dirs],
            keep_heldout=args.keep_heldout,
        )
    except ValueError as e:
        raise UserError(str(e)) from e
    ev = card["evaluation"]
    print(
        f"quality model {args.out} ({args.out.stat().st_size} bytes), scores {', '.join(card['languages'])}"
    )
    print(
        f"held out, hq at score >= {ev['threshold']}:\n"
        "   lang  train hq/lq  held-out hq/lq  precision  recall  lq below  auc"
    )
    for lang, m in [*ev["by_lang"].items(), ("all", ev["all"])]:
        tr = card["examples"]["train"].get(lang) or {
            c: sum(v[c] for v in card["examples"]["train"].values()) for c in q.CLASSES
        }
        print(
            f"  {lang:>5}  {tr['hq']:>6}/{tr['lq']:<5} {m['hq']:>8}/{m['lq']:<5} "
            f"{_f(m['precision']):>10}  {_f(m['recall']):>6}  {_f(m['lq_recall']):>8}  {_f(m['auc']):>5}"
        )
    if card["examples"]["left_out"]:
        left = ", ".join(f"{k} {v}" for k, v in card["examples"]["left_out"].items())
        print(f"left out (too few examples of a class; these languages get no score): {left}")
    print(f"model_hash {card['sha256']}")
    return 0


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"
