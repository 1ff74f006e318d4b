"""What a build costs per GB of HTML, on each extraction path, side by side (issue 29).

    python bench/bench_cost.py [--ranks 2] [--paths trafilatura,two_pass,resiliparse] [--out DIR]

Why: the seeds' plan reads 5 PB of raw crawl in two weeks on 2,000 cores, which leaves about 480
CPU-seconds per GB of HTML for everything. Each path builds the shared crawls (``../shared/data/warc``)
on the same ranks, every stage alone as bench/bench_shape.py runs them, and once more a one-page crawl:
a stage's marginal cost is the first minus the second (MPI and model start-ups aside). Printed: per
stage CPU-s per GB of its input, the whole build's marginal CPU-s per GB of HTML (ingest's output
bytes) and its ratio to the trafilatura-only path, the seeds' 5 PB on 2,000 cores in days, and the
quality side: of the pages the trafilatura path's default version selects, how many each path selects
too and how many of those with identical stored text. Also the first pass alone, in this process, in
MB of HTML per CPU-second, against trafilatura on the same pages. Results: docs/scale.md ("Cost").
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_shape import StageCost, run_build  # noqa: E402

CRAWLS = ROOT.parent / "shared" / "data" / "warc"
#: the seeds' sizing: raw crawl read, cores, days
SEED_PB, SEED_CORES, SEED_DAYS = 5, 2_000, 14
#: a gate that keeps one language: the lever for a build that wants only it
ONE_LANGUAGE = "words >= 20 AND lang = 'en'"


def _path_config(path: str) -> dict:
    if path == "two_pass_en":
        return {"extract": {"extractor": "two_pass", "gate": ONE_LANGUAGE}}
    return {"extract": {"extractor": path}}


def _tiny_crawl(out: Path) -> Path:
    """One real English page as a WARC (every path's gate passes it): the build whose cost is the
    start-ups alone."""
    from tests.stages.warc_fixtures import real_pages, warc_bytes

    d = out / "tiny"
    d.mkdir(parents=True, exist_ok=True)
    (d / "one.warc.gz").write_bytes(warc_bytes(real_pages(CRAWLS.parent, 1, host_prefix="python3")))
    return d


def _totals(build: Path, stage: str) -> dict:
    from corpus.model.layout import manifest_path, stage_dir

    return json.loads(manifest_path(stage_dir(build, stage)).read_text())["totals"]


def _selected(build: Path) -> dict[str, str]:
    """url -> stored text digest of every document the build's default version selects."""
    from corpus.version.open import open_version
    from corpus.version.query import connect

    con = connect(open_version(build / "snapshot"))
    return dict(con.execute("SELECT url, min(text_digest) FROM docs WHERE selected GROUP BY url").fetchall())


def extraction_rates(limit: int) -> dict[str, tuple[float, int]]:
    """Per path: MB of HTML per CPU-second of extraction alone (the extract worker's function), and the
    pages the gate passed, on the crawls' first ``limit`` pages. Each page goes through every path in
    turn, in this process, so a busy machine slows them alike."""
    from corpus.select.gate import parse_gate
    from corpus.text.extract import PageExtractor
    from corpus.text.warc import RawRecord, decode_html, iter_warc
    from hpc_jobs.extract.stage import DEFAULT_GATE

    pages = []
    for f in sorted(CRAWLS.glob("*.warc.gz")):
        pages += [decode_html(r.payload, r.content_type)[0] for r in iter_warc(f) if isinstance(r, RawRecord)]
    pages = pages[:: max(len(pages) // limit, 1)][:limit]  # from every file, not the first one's only
    mb = sum(len(p.encode()) for p in pages) / 1e6
    extractors = {
        "trafilatura": PageExtractor("trafilatura", parse_gate("")),
        "two_pass": PageExtractor("two_pass", parse_gate(DEFAULT_GATE)),
        "resiliparse": PageExtractor("resiliparse", parse_gate(DEFAULT_GATE)),
        "two_pass_en": PageExtractor("two_pass", parse_gate(ONE_LANGUAGE)),
    }
    cpu = dict.fromkeys(extractors, 0.0)
    passed = dict.fromkeys(extractors, 0)
    for e in extractors.values():
        e((pages[0], True))  # models and imports loaded before the clock
    for p in pages:
        for name, e in extractors.items():
            t0 = time.process_time()
            out = e((p, True))
            cpu[name] += time.process_time() - t0
            passed[name] += out.gate_failure is None
    return {name: (mb / cpu[name], passed[name]) for name in extractors} | {"pages": (mb, len(pages))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--paths", default="trafilatura,two_pass,resiliparse,two_pass_en")
    ap.add_argument("--pages", type=int, default=1_000, help="pages of the in-process first-pass timing")
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench_cost"))
    args = ap.parse_args(argv)
    paths = args.paths.split(",")
    if paths[0] != "trafilatura":
        ap.error("the first path must be trafilatura: the others are compared with it")
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    tiny = _tiny_crawl(args.out)
    print(format_rates(extraction_rates(args.pages)), flush=True)
    rows, selected = {}, {}
    for path in paths:
        cost = {}
        for kind, in_dir in (("full", CRAWLS), ("tiny", tiny)):
            print(f"{path}, {kind} crawl, {args.ranks} ranks:", flush=True)
            build = args.out / f"{path}-{kind}"
            cost[kind], snap = run_build(in_dir, build, args.ranks, _path_config(path), args.out / "log.txt")
            if not snap:
                print(f"{path}: the {kind} build failed; see {args.out / 'log.txt'}")
                return 1
        build = args.out / f"{path}-full"
        html_gb = (
            _totals(build, "ingest")["bytes_out"] - _totals(args.out / f"{path}-tiny", "ingest")["bytes_out"]
        ) / 1e9
        rows[path] = (cost["full"], cost["tiny"], build, html_gb)
        selected[path] = _selected(build)
    print()
    print(format_stages(rows))
    print()
    print(format_paths(rows, selected))
    return 0


def format_rates(rates: dict[str, tuple[float, int]]) -> str:
    mb, n = rates.pop("pages")
    base = rates["trafilatura"][0]
    lines = [
        f"Extraction alone, in this process, {n:,} pages, {mb:.1f} MB of HTML (resiliparse: the first pass)",
        "| path | MB of HTML per CPU-s | CPU vs trafilatura | pages the gate passed |",
        "|---|---:|---:|---:|",
    ]
    for name, (rate, passed) in rates.items():
        lines.append(f"| {name} | {rate:.2f} | {base / rate:.2f} | {passed:,} ({passed / n:.1%}) |")
    return "\n".join(lines) + "\n"


def _marginal(full: list[StageCost], tiny: list[StageCost]) -> list[tuple[str, float]]:
    return [(f.stage, max(f.cpu_s - t.cpu_s, 0.0)) for f, t in zip(full, tiny, strict=True)]


def format_stages(rows: dict) -> str:
    """Per stage and path: marginal CPU s and CPU-s per GB of the stage's input."""
    head = " | ".join(f"{p}: CPU s, per GB in" for p in rows)
    lines = [f"| stage | {head} |", "|---|" + "---:|" * len(rows)]
    first = next(iter(rows.values()))
    for i, (stage, _) in enumerate(_marginal(first[0], first[1])):
        cells = []
        for full, tiny, build, _gb in rows.values():
            cpu = _marginal(full, tiny)[i][1]
            gb_in = _totals(build, stage)["bytes_in"] / 1e9
            cells.append(f"{cpu:.1f}, {cpu / gb_in:,.0f}" if gb_in else f"{cpu:.1f}, -")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_paths(rows: dict, selected: dict) -> str:
    """Per path: the whole build per GB of HTML, the ratio to trafilatura, the seeds' job in days, and
    the default version's selection against trafilatura's."""
    base_sel = selected["trafilatura"]
    lines = [
        "| path | CPU-s per GB of HTML | vs trafilatura | 5 PB on 2,000 cores | selected | "
        "of trafilatura's also selected | of those, identical text |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    base = None
    for path, (full, tiny, _build, gb) in rows.items():
        per_gb = sum(c for _, c in _marginal(full, tiny)) / gb
        base = base or per_gb
        days = per_gb * SEED_PB * 1e6 / SEED_CORES / 86_400
        sel = selected[path]
        both = [u for u in base_sel if u in sel]
        same = sum(1 for u in both if sel[u] == base_sel[u])
        lines.append(
            f"| {path} | {per_gb:,.0f} | {per_gb / base:.2f} | {days:.0f} days | {len(sel):,} | "
            f"{len(both):,} ({len(both) / len(base_sel):.1%}) | {same:,} ({same / max(len(both), 1):.1%}) |"
        )
    lines.append(
        f"\nThe seeds' budget: {SEED_DAYS} days, {SEED_DAYS * 86_400 * SEED_CORES / (SEED_PB * 1e6):.0f} CPU-s per GB."
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
