"""Benchmark: the Gopher/C4 signals of the annotate stage, CPU time per MB of text, before and after a
change, and the whole of ``annotate_document`` with each.

    python bench/bench_heuristics.py [--data ../shared/data] [--pages 600] [--perl 60] [--baseline REV] [--repeat 3]

The text is real: pages of the shared crawl extracted as the extract stage does (trafilatura, invisible
characters stripped, normalized) and the Perl manuals of the curated tier. ``--baseline REV`` loads
``corpus/filters/heuristics.py`` as it was at the git revision REV (e.g. HEAD before a change is
committed) and times it on the same texts.

Times are process CPU seconds (less sensitive to other jobs on a shared machine than wall time), the
best of ``--repeat`` runs. The signals keep a cache of tokenized whitespace-separated spans: "cold" is
the first pass over the texts with an empty cache (what a rank sees at the start of a shard), "warm" a
second pass.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.extract import extract_text, normalize_text, strip_invisible  # noqa: E402
from corpus.filters import heuristics  # noqa: E402
from corpus.ingest.warc import RawRecord, decode_page, iter_warc  # noqa: E402


def web_texts(data: Path, n: int) -> list[str]:
    """``n`` pages of the first crawl, extracted as the extract stage does, a few per site."""
    per_site: Counter = Counter()
    out = []
    for part in sorted((data / "warc").glob("crawl-2026-03-part*.warc.gz")):
        for rec in iter_warc(part):
            if not isinstance(rec, RawRecord):
                continue
            site = rec.url.split("/")[2]
            if per_site[site] >= max(2, n // 20):
                continue
            html = decode_page(rec.payload, rec.content_type).text
            text = normalize_text(strip_invisible(extract_text(html))[0])
            if text:
                per_site[site] += 1
                out.append(text)
            if len(out) == n:
                return out
    return out


def perl_texts(data: Path, n: int) -> list[str]:
    with gzip.open(data / "curated" / "perl-doc.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f][:n]


def load_baseline(rev: str):
    """corpus/filters/heuristics.py at git revision ``rev``, as a module."""
    src = subprocess.run(
        ["git", "show", f"{rev}:corpus/filters/heuristics.py"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "heuristics_baseline.py"
    path.write_bytes(src)
    spec = importlib.util.spec_from_file_location("heuristics_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cpu(fn: Callable[[], None], repeat: int, before: Callable[[], None] = lambda: None) -> float:
    best = float("inf")
    for _ in range(repeat):
        before()
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--pages", type=int, default=600)
    ap.add_argument("--perl", type=int, default=60)
    ap.add_argument("--baseline", default="")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    pages, manuals = web_texts(args.data, args.pages), perl_texts(args.data, args.perl)
    texts = pages + manuals
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(f"{len(texts)} documents ({len(pages)} pages, {len(manuals)} Perl manuals), {mb:.2f} MB")

    t = time.perf_counter()
    heuristics.word_tokenizer()
    print(f"word tokenizer load ({heuristics.tokenizer_id()}): {time.perf_counter() - t:.2f} s wall")

    def run(fn) -> Callable[[], None]:
        return lambda: [fn(x) for x in texts]

    rows = []
    if args.baseline:
        base = load_baseline(args.baseline)
        rows.append((f"heuristic_signals at {args.baseline}", cpu(run(base.heuristic_signals), args.repeat)))
    cold = cpu(run(heuristics.heuristic_signals), args.repeat, before=heuristics.clear_span_cache)
    warm = cpu(run(heuristics.heuristic_signals), args.repeat)
    rows += [("heuristic_signals, cold span cache", cold), ("heuristic_signals, warm span cache", warm)]

    from corpus.filters.langid import identify_language
    from corpus.filters.quality import load_quality_model, resolve_model_path
    from corpus.model import Document
    from hpc_jobs import annotate

    quality = load_quality_model(str(resolve_model_path("")))
    identify_language("warm up")
    docs = [
        Document.create(
            text=x,
            source="bench",
            source_tier="web",
            url=f"https://bench.example/{i}",
            crawl_date="2026-03-01",
            raw_digest="0" * 64,
        )
        for i, x in enumerate(texts)
    ]

    def annotate_all() -> None:
        for d in docs:
            annotate.annotate_document(d, quality.score)

    current = annotate.heuristic_signals
    if args.baseline:
        annotate.heuristic_signals = base.heuristic_signals
        rows.append((f"annotate_document with {args.baseline}'s signals", cpu(annotate_all, args.repeat)))
        annotate.heuristic_signals = current
    rows.append(
        (
            "annotate_document, cold span cache",
            cpu(annotate_all, args.repeat, before=heuristics.clear_span_cache),
        )
    )
    print(f"\n{'':52s} {'CPU s':>8s} {'ms/MB':>8s}")
    for name, secs in rows:
        print(f"{name:52s} {secs:8.2f} {secs / mb * 1000:8.0f}")


if __name__ == "__main__":
    main()
