"""``corpus train-quality``: train the fastText quality classifier from a build's documents.

    corpus train-quality --from BUILD/stages/extract --out models/quality.ftz

Labels follow the default recipe in ``corpus.filters.quality`` (positives: passages of curated/books
documents; negatives: web documents the Gopher/C4 signals call low quality). Writes the model and,
beside it, ``MODEL.json`` with its sha256, the recipe, the parameters and the example counts.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from corpus.docshard import atomic_write_json, iter_docs
from corpus.errors import UserError
from corpus.filters.quality import TrainParams, label_documents, train_model, train_params_dict
from corpus.manifests import NotCompleted, require_stage_manifest


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-quality", help="train the fastText quality classifier from stage outputs")
    p.add_argument(
        "--from",
        dest="stage_dirs",
        nargs="+",
        required=True,
        type=Path,
        metavar="DIR",
        help="completed stage directories with extracted text (extract, annotate or policy)",
    )
    p.add_argument("--out", required=True, type=Path, metavar="MODEL", help="the model file to write (.ftz)")
    for f in fields(TrainParams):
        p.add_argument(
            f"--{f.name.replace('_', '-')}",
            type=type(f.default),
            default=f.default,
            help=f"fastText {f.name} (default {f.default})",
        )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    params = TrainParams(**{f.name: getattr(args, f.name) for f in fields(TrainParams)})
    docs = []
    for d in args.stage_dirs:
        try:
            manifest = require_stage_manifest(d)
        except NotCompleted as e:
            raise UserError(str(e)) from e
        for out in manifest.outputs:
            docs.extend(
                (doc.source_tier, doc.text) for doc in iter_docs(d / out.path) if doc.content_type != "text/html"
            )
    try:
        lines, counts = label_documents(docs, seed=params.seed)
    except ValueError as e:
        raise UserError(str(e)) from e
    digest = train_model(lines, args.out, params)
    atomic_write_json(
        args.out.with_name(args.out.name + ".json"),
        {
            "sha256": digest,
            "recipe": "corpus.filters.quality default recipe",
            "params": train_params_dict(params),
            "examples": counts,
            "trained_from": [str(d) for d in args.stage_dirs],
        },
    )
    print(
        f"quality model {args.out} ({args.out.stat().st_size} bytes, {counts['per_class']} examples per class)"
    )
    print(f"model_hash {digest}")
    return 0
