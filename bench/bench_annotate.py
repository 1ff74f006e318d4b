"""Benchmark: the annotate stage's CPU-s per GB of extracted text, per component, old code and new.

    python bench/bench_annotate.py [--data ../shared/data] [--every 5 --take 3] [--baseline HEAD] [--repeat 2]
    python bench/bench_annotate.py --gate "lang = 'en' AND words >= 50"     (no gate against this gate)

The text is real: the pages of the shared first crawl, extracted as the extract stage does (cached in
``--cache`` by bench_scale.extracted_pages), 3 of every 5 (~2,000 documents, ~18 MB). The signal
modules (heuristics, pii, langid, toxicity, badwords) as they were at git revision ``--baseline`` are loaded beside the
current ones, and ``annotate_document`` runs over every document with each, in one process, after a
warm-up that loads every model and segmenter (fixed costs, excluded); the word cache is emptied before
each timed pass. Times are process CPU seconds (the best of ``--repeat``), split by component; both
passes' documents must come out identical.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_scale import WEB_WARCS, extracted_pages  # noqa: E402
from corpus.model.annotations import SIGNALS_SKIPPED  # noqa: E402
from corpus.select.gate import parse_gate  # noqa: E402
from corpus.signals import badwords, heuristics, langid, pii, toxicity  # noqa: E402
from corpus.text.extract import normalize_text, strip_invisible  # noqa: E402
from hpc_jobs.annotate import stage  # noqa: E402

#: the functions annotate_document calls, by component: (stage global, module, function name)
COMPONENTS = (
    ("pii", "scrub_pii", "pii", "scrub_pii"),
    ("language ID", "identify_language", "langid", "identify_language"),
    ("heuristics", "heuristic_signals", "heuristics", "heuristic_signals"),
    ("script_fraction", "script_fraction", "langid", "script_fraction"),
    ("toxicity", "toxicity_signals", "toxicity", "toxicity_signals"),
    ("word lists", "badword_signals", "badwords", "badword_signals"),
)


def baseline_module(rev: str, name: str):
    """corpus/signals/``name``.py at git revision ``rev``, as a module of its own."""
    src = subprocess.run(
        ["git", "show", f"{rev}:corpus/signals/{name}.py"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / f"{name}_baseline.py"
    path.write_bytes(src)
    spec = importlib.util.spec_from_file_location(f"{name}_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def timed_pass(docs, modules: dict, quality, gate=None) -> tuple[dict[str, float], list]:
    """annotate_document over ``docs`` with the functions of ``modules`` (and an ``[annotate] gate``): CPU
    s per component, outputs."""
    spent = dict.fromkeys([c[0] for c in COMPONENTS] + ["quality", "total"], 0.0)
    clock = time.process_time

    def timer(label, fn):
        def wrapped(*a, **k):
            t = clock()
            out = fn(*a, **k)
            spent[label] += clock() - t
            return out

        return wrapped

    saved = {g: getattr(stage, g) for _, g, _, _ in COMPONENTS}
    for label, g, mod, fn in COMPONENTS:
        setattr(stage, g, timer(label, getattr(modules[mod], fn)))
    score = timer("quality", quality.score)
    modules["heuristics"].clear_span_cache()
    try:
        t = clock()
        out = [stage.annotate_document(d, score, gate=gate) for d in docs]
        spent["total"] = clock() - t
    finally:
        for g, f in saved.items():
            setattr(stage, g, f)
    spent["other"] = spent["total"] - sum(v for k, v in spent.items() if k != "total")
    return spent, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/benchcache"), help="extracted-page cache")
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--take", type=int, default=3, help="documents taken of every --every")
    ap.add_argument("--baseline", default="HEAD")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument(
        "--gate",
        default=None,
        help="compare the current code without and with this [annotate] gate, instead of --baseline and now",
    )
    args = ap.parse_args()

    from corpus.signals.quality import load_quality_model, resolve_model_path
    from tests.documents import make_doc

    pages = extracted_pages([args.data / p for p in WEB_WARCS], args.cache, "web-pool")
    texts = [
        normalize_text(strip_invisible(t)[0]) for i, (_, t) in enumerate(pages) if i % args.every < args.take
    ]
    docs = [make_doc(t, source="bench", url=f"https://bench.example/{i}") for i, t in enumerate(texts) if t]
    gb = sum(len(d.text.encode()) for d in docs) / 1e9
    print(f"{len(docs)} documents, {gb * 1e3:.1f} MB of text")

    quality = load_quality_model(str(resolve_model_path("")))
    new = {"heuristics": heuristics, "pii": pii, "langid": langid, "toxicity": toxicity, "badwords": badwords}
    if args.gate is None:
        old, gates, header = (
            {name: baseline_module(args.baseline, name) for name in new},
            (None, None),
            args.baseline,
        )
    else:
        old, gates, header = new, (None, parse_gate(args.gate, "--gate")), "no gate"
    for modules in (old, new):  # warm-up: models, tokenizer, segmenters
        timed_pass(docs[:: max(1, len(docs) // 200)], modules, quality)
    best: dict[str, dict[str, float]] = {"old": {}, "new": {}}
    outputs = {}
    for _ in range(args.repeat):
        for name, modules, gate in (("old", old, gates[0]), ("new", new, gates[1])):
            spent, outputs[name] = timed_pass(docs, modules, quality, gate)
            if not best[name] or spent["total"] < best[name]["total"]:
                best[name] = spent
    skipped = [SIGNALS_SKIPPED.name in d.scores for d in outputs["new"]]
    differ = [
        i
        for i, (a, b, s) in enumerate(zip(outputs["old"], outputs["new"], skipped, strict=True))
        if a != b and not s
    ]
    print(f"documents the gate did not pass: {sum(skipped)} of {len(docs)}")
    print(f"documents that differ (but for the gate's): {len(differ)} {differ[:5]}")

    print(f"\n| component | {header} CPU-s/GB | now CPU-s/GB | old / new |")
    print("|---|---:|---:|---:|")
    for label in best["new"]:
        o, n = best["old"][label] / gb, best["new"][label] / gb
        print(f"| {label} | {o:,.0f} | {n:,.0f} | {o / n if n else float('inf'):.2f} |")


if __name__ == "__main__":
    main()
