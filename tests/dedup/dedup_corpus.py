"""Test corpora for the dedup stages, made from real text, written as a completed stage directory.

The text is Perl's documentation (``../shared/data/curated/perl-doc.jsonl.gz``): whole POD files, or
their ``=head`` sections when a test needs thousands of documents.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

from corpus.formats.docshard import SUFFIX, write_shard
from corpus.model import Document, ShardRef, StageManifest

PERL_DOC = "curated/perl-doc.jsonl.gz"


def perl_pods(shared_data: Path) -> list[dict]:
    with gzip.open(shared_data / PERL_DOC, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def perl_sections(shared_data: Path, min_words: int = 40) -> list[str]:
    """Every ``=head`` section of every POD with at least ``min_words`` words, in file order."""
    out = []
    for pod in perl_pods(shared_data):
        for part in re.split(r"\n(?==head\d)", pod["text"]):
            if len(part.split()) >= min_words:
                out.append(part.strip())
    return out


def make_doc(
    text: str,
    n: int,
    *,
    source: str = "web-crawl",
    tier: str = "web",
    crawl_date: str = "2026-03-01",
    quality: float | None = None,
) -> Document:
    scores = {} if quality is None else {"quality": quality}
    return Document.create(
        text=text,
        source=source,
        source_tier=tier,
        url=f"https://{source}.example.org/{n}",
        crawl_date=crawl_date,
        raw_digest=f"{n:064x}",
        lang="en",
        lang_confidence=1.0,
        scores=scores,
    )


def write_stage_dir(stage_dir: Path, docs: list[Document], shards: int = 4) -> Path:
    """Deal ``docs`` round-robin into ``shards`` document shards and write a completed stage's manifest."""
    outputs = []
    for s in range(shards):
        name = f"part-{s:03d}"
        sc = write_shard(
            stage_dir / "shards" / f"{name}{SUFFIX}", (d.to_json_bytes() for d in docs[s::shards])
        )
        outputs.append(ShardRef(path=f"shards/{name}{SUFFIX}", sha256=sc["sha256"], records=sc["records"]))
    m = StageManifest(
        stage="fixture",
        stage_version="test",
        config={},
        config_hash="",
        inputs=(),
        outputs=tuple(outputs),
        side_outputs=(),
        shard_counts={},
        totals={},
    )
    (stage_dir / "manifest.json").write_text(json.dumps(m.to_dict()))
    return stage_dir


def planted_pair(
    rnd: random.Random, n_words: int, target: float, shingle_set: Callable[[str], set]
) -> tuple[str, str, float]:
    """A document of unique words and a copy with the fewest positions replaced that bring the shingle
    Jaccard (of ``shingle_set``) down to ``target`` (binary search: more replacements never raise it);
    returns both texts and the exact Jaccard."""
    base = [f"w{rnd.randrange(10**12)}" for _ in range(n_words)]
    fresh = [f"x{rnd.randrange(10**12)}" for _ in range(n_words)]
    order = rnd.sample(range(n_words), n_words)
    sa = shingle_set(" ".join(base))

    def replaced(k: int) -> tuple[str, float]:
        copy = list(base)
        for i in order[:k]:
            copy[i] = fresh[i]
        sb = shingle_set(" ".join(copy))
        return " ".join(copy), len(sa & sb) / len(sa | sb)

    lo, hi = 0, n_words
    while lo < hi:
        mid = (lo + hi) // 2
        if replaced(mid)[1] <= target:
            hi = mid
        else:
            lo = mid + 1
    text, j = replaced(lo)
    return " ".join(base), text, j
