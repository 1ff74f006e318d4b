"""Labelled pages for the default quality model, from a crawl's ingest (HTML) and extract (text) stages.

    corpus stage ingest  --in /work/shared/data/warc --out /tmp/q/ingest --ranks 2
    corpus stage extract --in /tmp/q/ingest --out /tmp/q/extract --ranks 2
    python bench/quality_labels.py --ingest /tmp/q/ingest --extract /tmp/q/extract --out /tmp/q/labels.jsonl
    corpus train-quality --labelled /tmp/q/labels.jsonl \
        --positive /work/shared/data/curated/perl-doc.jsonl.gz \
        --keep-heldout --out corpus/signals/models/quality-default.ftz

The rule (``corpus.signals.quality.structure_label``) reads a page's markup, never a model and never
the features the classifier sees: ``lq`` when at least half the page's visible text is link text
(tables of contents, indexes, navigation pages), ``hq`` when under a fifth is and extraction found at
least 100 words; other pages get no label. ``--first-crawl-only`` (the default) keeps the pages of
WARC files named ``crawl-2026-03-*``: the later crawl is identical recrawls and installation-guide-arm64,
near copies of the amd64 guide (the split would keep them together anyway, see ``split_group``).

Writes one JSON line per labelled page: ``{"text", "label", "url", "source"}`` (the language is left to
train-quality, which asks lid.176 as annotate does), in the order of the extract stage's shards, and
prints the counts per label.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus.formats.docshard import iter_docs  # noqa: E402
from corpus.model.manifest import require_stage_manifest  # noqa: E402
from corpus.signals.quality import structure_label  # noqa: E402


def stage_docs(stage_dir: Path):
    for out in require_stage_manifest(stage_dir).outputs:
        yield out.path, iter_docs(stage_dir / out.path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ingest", required=True, type=Path, help="a completed ingest stage (the HTML)")
    ap.add_argument("--extract", required=True, type=Path, help="its completed extract stage (the text)")
    ap.add_argument("--out", required=True, type=Path, help="the labelled JSONL to write")
    ap.add_argument("--all-crawls", action="store_true", help="also label pages of later crawls")
    args = ap.parse_args()

    html: dict[str, str] = {}
    for shard, docs in stage_docs(args.ingest):
        if not args.all_crawls and not Path(shard).name.startswith("crawl-2026-03"):
            continue
        for d in docs:
            if d.content_type == "text/html":
                html[d.raw_digest] = d.text
    counts: Counter = Counter()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for _, docs in stage_docs(args.extract):
            for d in docs:
                page = html.get(d.raw_digest)
                if page is None or d.source_tier != "web":
                    continue
                label = structure_label(page, d.text)
                counts[label or "unlabelled"] += 1
                if label:
                    rec = {"text": d.text, "label": label, "url": d.url, "source": d.source}
                    f.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")
    print(json.dumps(dict(sorted(counts.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
