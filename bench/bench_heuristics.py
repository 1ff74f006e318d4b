"""Benchmark: the Gopher/C4 signals of the annotate stage, CPU time per MB of text, before and after a
change, and the whole of ``annotate_document`` with each.

    python bench/bench_heuristics.py [--data ../shared/data] [--pages 600] [--perl 60] [--baseline REV] [--repeat 3]
    python bench/bench_heuristics.py --languages [--cache /tmp/benchcache]

The text is real: pages of the shared crawl extracted as the extract stage does (trafilatura, invisible
characters stripped, normalized) and the Perl manuals of the curated tier. ``--baseline REV`` loads
``corpus/signals/heuristics.py`` as it was at the git revision REV (e.g. HEAD before a change is
committed) and times it on the same texts.

Times are process CPU seconds (less sensitive to other jobs on a shared machine than wall time), the
best of ``--repeat`` runs. The signals keep a cache of tokenized whitespace-separated spans: "cold" is
the first pass over the texts with an empty cache (what a rank sees at the start of a shard), "warm" a
second pass.

``--languages`` measures the words of every language instead (docs/ingest-and-filters.md, "Every
language"): over every page of the first crawl, grouped by lid.176's language, the words per 1,000
characters by the English rules and by the language's segmenter, the mean word length, the stop-word
counts and how many pages would fail each word check; the same for a real Thai text (the RSS feeds of
chardet's TIS-620 test files, in the shared code archives); and each segmenter's load cost (wall
seconds and resident MB, each in a fresh process).
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_pii import web_texts  # noqa: E402
from corpus.signals import heuristics  # noqa: E402
from corpus.text.extract import normalize_text, strip_invisible  # noqa: E402

THAI_ARCHIVE = "code/chardet-5.2.0.tar.gz"
THAI_FEED = "chardet-5.2.0/tests/TIS-620/pharmacy.kku.ac.th.healthinfo-ne.xml"


def perl_texts(data: Path, n: int) -> list[str]:
    with gzip.open(data / "curated" / "perl-doc.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f][:n]


def load_baseline(rev: str):
    """corpus/signals/heuristics.py (corpus/filters/ before the re-layout) at git revision ``rev``, as a
    module."""
    for where in ("signals", "filters"):
        shown = subprocess.run(
            ["git", "show", f"{rev}:corpus/{where}/heuristics.py"], cwd=ROOT, capture_output=True
        )
        if shown.returncode == 0:
            break
    shown.check_returncode()
    src = shown.stdout
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


def thai_text(data: Path, feed: str = THAI_FEED) -> str:
    """The item descriptions of a Thai RSS feed of chardet's test files (TIS-620, read as its superset
    windows-874), markup removed, one paragraph each: real Thai prose, the only Thai of the shared data."""
    import html
    import re
    import tarfile

    with tarfile.open(data / THAI_ARCHIVE) as tar:
        xml = tar.extractfile(feed).read().decode("cp874")
    items = []
    for d in re.findall(r"<description>(.*?)</description>", xml, re.S):
        d = html.unescape(
            re.sub(r"<[^>]+>", "", html.unescape(d.replace("<![CDATA[", "").replace("]]>", "")))
        )
        items.append(normalize_text(d))
    return "\n\n".join(d for d in items if d)


def segmenter_costs() -> list[tuple[str, float, float]]:
    """(language, wall seconds, resident MB) of loading each segmenter and cutting one line, in a fresh
    process each (after corpus.signals.words is imported)."""
    code = (
        "import time, sys; sys.path.insert(0, {root!r}); from corpus.signals import words\n"
        "rss = lambda: int(open('/proc/self/statm').read().split()[1]) * 4096 / 1e6\n"
        "m, t = rss(), time.perf_counter(); words.segment('a b', {lang!r})\n"
        "print(time.perf_counter() - t, rss() - m)"
    )
    out = []
    for lang in ("zh", "ja", "th", "km", "lo", "my"):
        r = subprocess.run(
            [sys.executable, "-c", code.format(root=str(ROOT), lang=lang)],
            capture_output=True,
            text=True,
            check=True,
        )
        secs, mb = map(float, r.stdout.split()[-2:])
        out.append((lang, secs, mb))
    return out


def language_table(args) -> None:
    import statistics

    from bench.bench_scale import WEB_WARCS, extracted_pages
    from corpus.select.policy import PolicyConfig
    from corpus.signals.langid import identify_language
    from corpus.signals.words import stop_words

    cfg = PolicyConfig()
    pages = extracted_pages([args.data / p for p in WEB_WARCS], args.cache, "web-pool")
    by_lang: dict[str, list[str]] = {}
    for _, text in pages:
        text = normalize_text(strip_invisible(text)[0])
        if text:
            by_lang.setdefault(identify_language(text).lang, []).append(text)
    by_lang["th (feed)"] = [thai_text(args.data)]
    print(
        "lang        pages  w/kc before  w/kc after  mean len  stop med  <1 stop  <2 stop  <3 stop  "
        "len fail  alpha fail  (fails: of pages with >= min_words words)"
    )
    for lang, texts in sorted(by_lang.items(), key=lambda kv: -len(kv[1])):
        code = lang.split()[0]
        chars = sum(map(len, texts))
        before = [heuristics.heuristic_signals(t) for t in texts]
        after = [heuristics.heuristic_signals(t, code) for t in texts]
        wk = [1000 * sum(s["word_count"] for s in ss) / chars for ss in (before, after)]
        judged = [s for s in after if s["word_count"] >= cfg.min_words] or after
        mwl = statistics.fmean(s["mean_word_length"] for s in judged)
        has_stop = stop_words(code) is not None
        stop = [s["stop_word_count"] for s in judged] if has_stop else []
        fails = [f"{sum(v < k for v in stop):8d}" if has_stop else f"{'-':>8s}" for k in (1, 2, 3)]
        len_fail = sum(
            not cfg.min_mean_word_length <= s["mean_word_length"] <= cfg.max_mean_word_length for s in judged
        )
        alpha_fail = sum(s["alpha_word_fraction"] < cfg.min_alpha_word_fraction for s in judged)
        med = f"{statistics.median(stop):8.0f}" if has_stop else f"{'absent':>8s}"
        print(
            f"{lang:10s} {len(texts):6d} {wk[0]:12.1f} {wk[1]:11.1f} {mwl:9.2f}  {med} {' '.join(fails)} "
            f"{len_fail:9d} {alpha_fail:11d}  of {len(judged)}"
        )
    print(f"\n{'segmenter':10s} {'load s':>7s} {'RSS MB':>7s}")
    for lang, secs, mb in segmenter_costs():
        print(f"{lang:10s} {secs:7.2f} {mb:7.0f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--pages", type=int, default=600)
    ap.add_argument("--perl", type=int, default=60)
    ap.add_argument("--baseline", default="")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--languages", action="store_true", help="measure the words of every language")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/benchcache"), help="extracted-page cache")
    args = ap.parse_args()
    if args.languages:
        language_table(args)
        return

    pages, manuals = web_texts(args.data, args.pages, per_site_share=20), perl_texts(args.data, args.perl)
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

    from corpus.signals.langid import identify_language
    from corpus.signals.quality import load_quality_model, resolve_model_path
    from hpc_jobs.annotate import stage as annotate
    from tests.documents import make_doc

    quality = load_quality_model(str(resolve_model_path("")))
    identify_language("warm up")
    docs = [make_doc(x, source="bench", url=f"https://bench.example/{i}") for i, x in enumerate(texts)]

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
