"""Memory per rank and wall time of every stage at N and 4N documents, side by side (issue 11).

    python bench/bench_scale.py [--n 10000] [--ranks 2] [--budget-mb 64] [--out DIR] [--keep]
    python bench/bench_scale.py --ranks-check [--n 10000]      # the snapshot id on 1, 2 and 4 ranks

Why: the pipeline is meant for 10^9 documents on thousands of ranks, so what a rank holds must not grow
with the corpus. A 4x larger corpus, built on the same ranks with the same ``memory_budget_mb``, should
cost every stage the same peak resident memory per rank (target: within 1.15x at N >= 10,000), and only
proportionally more time.

The corpus (:func:`generate`) is made from real text: windows of real pages (the text trafilatura finds
in the March crawl of ``../shared/data/warc``, extracted once with the project's own
:func:`corpus.text.extract.extract_text` and cached in the work directory) and of Perl's POD documentation
(curated tier). Planted in known proportions: exact copies, near-duplicates with a few words edited
(their originals chosen by a power law, so a few clusters are large and grow with N, as templates do on
the web) and boilerplate lines shared by many documents (also power-law: one line is in about a tenth of
the documents). Inputs are JSONL shards of a fixed number of documents, so 4N means 4x as many shards of
the same size, as a larger crawl would be.

Each stage runs alone (``corpus stage NAME``, i.e. ``mpiexec -n RANKS python -m hpc_jobs.NAME``) so its
wall time is its own; its peak per rank is the VmHWM each rank recorded in the stage manifest's
``run_info.peak_rss_mb_by_rank`` (the table shows the largest rank). The snapshot assembly, which
``corpus build`` runs in the driver, runs here in a child process that reports its own VmHWM.

The exit status is 0 even when a ratio misses its target (this is a benchmark, not a test); it is 1 only
when a stage or the assembly could not run.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import hashlib
import io
import itertools
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared" / "data"
#: the first crawl only: the second is mostly recrawls and arm64 twins of these pages, which would add
#: duplicates the generator did not plant (and so could not count)
WEB_WARCS = tuple(f"warc/crawl-2026-03-part{i}.warc.gz" for i in range(4))
PERL_DOC = "curated/perl-doc.jsonl.gz"
PERL_LICENSE = "Artistic-1.0-Perl OR GPL-1.0-or-later"
#: the memory target of issue 11: a stage's peak per rank at 4N within this factor of its peak at N
TARGET_RATIO = 1.15
_WORD = re.compile(r"\S+")
#: the dedup stages' own counts (manifest ``extra``) shown beside the yields: the work each one had
FOUND_KEYS = ("frequent_lines", "distinct_lines", "clusters", "largest_cluster", "docs_in_clusters")


# --- the text pool: real pages, one list of lines each ---------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One real page's text as lines (paragraphs, headings, table rows: what extraction keeps)."""

    source: str  # "web" or "perl-doc"
    url: str
    lines: tuple[str, ...]
    license: str = ""

    @property
    def words(self) -> int:
        return sum(len(line.split()) for line in self.lines)


def page_lines(text: str) -> tuple[str, ...]:
    """The non-blank lines of a text, stripped: the unit windows and boilerplate are made of."""
    return tuple(s for line in text.splitlines() if (s := line.strip()))


def perl_pages(shared: Path = SHARED) -> list[Page]:
    """Every POD of Perl's documentation as a page (curated tier, its license carried over)."""
    with gzip.open(shared / PERL_DOC, "rt", encoding="utf-8") as f:
        recs = [json.loads(line) for line in f]
    return [Page("perl-doc", r["url"], page_lines(r["text"]), r.get("license") or PERL_LICENSE) for r in recs]


def _extract_record(item: tuple[str, bytes, str]) -> tuple[str, str]:
    """(url, text) of one HTML response, extracted as the ``extract`` stage does (module-level: picklable)."""
    from corpus.text.extract import extract_text, normalize_text
    from corpus.text.warc import decode_html

    url, payload, content_type = item
    html, _ = decode_html(payload, content_type)
    return url, normalize_text(extract_text(html))


def _warc_records(paths: Sequence[Path]) -> Iterator[tuple[str, bytes, str]]:
    from corpus.text.warc import RawRecord, iter_warc

    for path in paths:
        for item in iter_warc(path):
            if isinstance(item, RawRecord):
                yield item.url, item.payload, item.content_type


def extracted_pages(
    paths: Sequence[Path], cache_dir: Path, prefix: str, workers: int = 2
) -> list[tuple[str, str]]:
    """(url, text) of every HTML page of ``paths``, extracted as the extract stage does, cached:
    trafilatura does ~24 pages/s per core, so a crawl costs a minute or two once. The cache is named by
    the WARCs' bytes and the extraction options, so a changed input or option extracts again."""
    from corpus.text.extract import TRAFILATURA_OPTIONS

    key = hashlib.sha256()
    for p in paths:
        key.update(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}\n".encode())
    key.update(json.dumps(TRAFILATURA_OPTIONS, sort_keys=True).encode())
    cache = cache_dir / f"{prefix}-{key.hexdigest()[:16]}.jsonl.gz"
    if not cache.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        with ProcessPoolExecutor(max_workers=workers) as ex:
            pages = list(ex.map(_extract_record, _warc_records(paths), chunksize=16))
        tmp = cache.with_suffix(".tmp")
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            for url, text in pages:
                f.write(json.dumps({"url": url, "text": text}, ensure_ascii=False) + "\n")
        tmp.rename(cache)
    with gzip.open(cache, "rt", encoding="utf-8") as f:
        return [(r["url"], r["text"]) for r in map(json.loads, f)]


def web_pages(shared: Path, cache_dir: Path, min_words: int, workers: int = 2) -> list[Page]:
    """The extracted text of every page of the March crawl with at least ``min_words`` words."""
    pages = (
        Page("web", url, page_lines(text))
        for url, text in extracted_pages([shared / p for p in WEB_WARCS], cache_dir, "web-pool", workers)
    )
    return [page for page in pages if page.words >= min_words]


# --- the generator (pure: a function of the pool, N, the seed and the mix) ------------------------------


@dataclass(frozen=True)
class Mix:
    """What the generated corpus plants, as fractions of N (exact counts: ``round(fraction * n)``)."""

    exact_copy: float = 0.10  # byte-identical copies of an original (another URL)
    near_duplicate: float = 0.15  # copies with a few words replaced
    edit_fraction: float = 0.02  # of a near-duplicate's words replaced (at least one): 5-gram Jaccard ~0.8
    boilerplate: float = 0.5  # originals that carry 1-3 shared boilerplate lines (copies inherit them)
    boilerplate_lines: int = 64  # distinct boilerplate lines, chosen by a power law
    perl: float = 0.15  # originals windowed from Perl's docs (curated) instead of the crawl (web)
    min_words: int = 80  # window length in words, uniform in [min_words, max_words]
    max_words: int = 600
    cluster_exponent: float = 1.0  # originals are copied with weight 1 / (rank + 1) ** exponent
    docs_per_shard: int = 1000  # input shard size: 4N is 4x the shards, not 4x the shard


@dataclass(frozen=True)
class GenDoc:
    """A generated document and what was planted in it (``of``: the original it copies, else -1)."""

    index: int
    source: str
    url: str
    text: str
    kind: str  # "original", "exact_copy" or "near_duplicate"
    of: int = -1
    boilerplate: tuple[int, ...] = field(default_factory=tuple)  # indices into the boilerplate lines
    license: str = ""


def window(
    lines: Sequence[str],
    rnd: random.Random,
    min_words: int,
    max_words: int,
    counts: Sequence[int] | None = None,
) -> list[str]:
    """Consecutive lines of a page from a random start, until about ``target`` words (a real excerpt:
    its lines keep their order and their neighbours, as a shorter page of the same site would).
    ``counts``: each line's word count, when the caller windows the same page many times."""
    target = rnd.randint(min_words, max_words)
    if counts is None:
        counts = [len(line.split()) for line in lines]
    total = sum(counts)
    # the last start that still leaves the target (or the whole page, when it is shorter)
    suffix, last = 0, 0
    for i in range(len(lines) - 1, -1, -1):
        suffix += counts[i]
        if suffix >= min(target, total):
            last = i
            break
    start = rnd.randint(0, last)
    out, words = [], 0
    for line, c in zip(lines[start:], counts[start:], strict=True):
        out.append(line)
        words += c
        if words >= target:
            break
    return out


def edit_words(text: str, rnd: random.Random, fraction: float) -> str:
    """The text with ``max(1, fraction * words)`` words each replaced by another word of the same text
    (real words of the same language, so only the shingles around each edit change)."""
    spans = [m.span() for m in _WORD.finditer(text)]
    if len(spans) < 2:
        return text + " edited"
    k = max(1, round(fraction * len(spans)))
    chosen = sorted(rnd.sample(range(len(spans)), min(k, len(spans))))
    parts, pos = [], 0
    for i in chosen:
        a, b = spans[i]
        word = text[a:b]
        j = rnd.randrange(len(spans))
        other = text[spans[j][0] : spans[j][1]]
        replacement = other if other != word else word + "s"
        parts += [text[pos:a], replacement]
        pos = b
    parts.append(text[pos:])
    return "".join(parts)


def boilerplate_pool(pages: Sequence[Page], k: int, rnd: random.Random) -> list[str]:
    """``k`` distinct real lines of 6-20 words from distinct pages of the crawl (a site's notice, a
    navigation sentence): real text, so language ID and quality see what they would on the web."""
    web = [p for p in pages if p.source == "web"] or list(pages)
    order = list(range(len(web)))
    rnd.shuffle(order)
    out: list[str] = []
    seen: set[str] = set()
    for i in order:
        fits = [s for s in web[i].lines if 6 <= len(s.split()) <= 20 and s not in seen]
        if fits:
            line = rnd.choice(fits)
            out.append(line)
            seen.add(line)
            if len(out) == k:
                break
    return out


def _with_boilerplate(body: str, planted: tuple[int, ...], boiler: Sequence[str]) -> str:
    """The first planted line above the body (a site header), the others below it (a footer)."""
    head = [boiler[b] for b in planted[:1]]
    tail = [boiler[b] for b in planted[1:]]
    return "\n".join([*head, body, *tail])


def _power_law_cum(n: int, exponent: float) -> list[float]:
    cum, s = [], 0.0
    for r in range(n):
        s += 1.0 / (r + 1) ** exponent
        cum.append(s)
    return cum


def _pick(rnd: random.Random, cum: list[float]) -> int:
    return min(bisect.bisect_left(cum, rnd.random() * cum[-1]), len(cum) - 1)


def generate(pages: Sequence[Page], n: int, seed: int, mix: Mix = Mix()) -> tuple[list[GenDoc], list[str]]:
    """N documents in a shuffled order, and the boilerplate lines planted in them.

    Deterministic: one ``random.Random`` seeded by ``seed`` draws everything, in a fixed order.
    """
    rnd = random.Random(f"bench_scale/{seed}")
    n_exact = round(n * mix.exact_copy)
    n_near = round(n * mix.near_duplicate)
    n_orig = n - n_exact - n_near
    if n_orig < 1:
        raise ValueError(f"the mix leaves no originals for n={n}")
    web = [p for p in pages if p.source == "web"]
    perl = [p for p in pages if p.source != "web"]
    # a page is drawn by its length, so windows spread evenly over the pool's words: drawing pages
    # uniformly would window a short page again and again, making copies nobody planted
    web_cum = list(itertools.accumulate(p.words for p in web))
    perl_cum = list(itertools.accumulate(p.words for p in perl))
    boiler = boilerplate_pool(pages, mix.boilerplate_lines, rnd)
    boiler_cum = _power_law_cum(len(boiler), 1.0)

    counts: dict[int, list[int]] = {}  # word counts per line of the pages windowed so far
    originals: list[GenDoc] = []
    bodies: list[str] = []  # each original's window, without its boilerplate
    for i in range(n_orig):
        pool, cum = (perl, perl_cum) if perl and (not web or rnd.random() < mix.perl) else (web, web_cum)
        page = pool[_pick(rnd, cum)]
        if id(page) not in counts:
            counts[id(page)] = [len(line.split()) for line in page.lines]
        page_counts = counts[id(page)]
        body = window(page.lines, rnd, mix.min_words, mix.max_words, page_counts)
        planted: tuple[int, ...] = ()
        if boiler and rnd.random() < mix.boilerplate:
            planted = tuple(sorted({_pick(rnd, boiler_cum) for _ in range(rnd.randint(1, 3))}))
        bodies.append("\n".join(body))
        text = _with_boilerplate(bodies[-1], planted, boiler)
        originals.append(GenDoc(i, page.source, page.url, text, "original", -1, planted, page.license))

    copy_cum = _power_law_cum(n_orig, mix.cluster_exponent)
    docs = list(originals)
    for kind, count in (("exact_copy", n_exact), ("near_duplicate", n_near)):
        for _ in range(count):
            o = originals[_pick(rnd, copy_cum)]
            if kind == "exact_copy":
                text = o.text
            else:  # the page's own words edited, its template (boilerplate) as it was
                text = _with_boilerplate(
                    edit_words(bodies[o.index], rnd, mix.edit_fraction), o.boilerplate, boiler
                )
            docs.append(GenDoc(len(docs), o.source, o.url, text, kind, o.index, o.boilerplate, o.license))
    order = list(range(n))
    rnd.shuffle(order)
    position = {i: pos for pos, i in enumerate(order)}
    # every document gets a URL of its own: a copy under the same URL would be a recrawl, which ingest
    # collapses before dedup ever sees it
    out = []
    for pos, i in enumerate(order):
        d = docs[i]
        sep = "&" if "?" in d.url else "?"
        of = position[d.of] if d.of >= 0 else -1
        url = f"{d.url}{sep}scale={seed}-{pos}"
        out.append(GenDoc(pos, d.source, url, d.text, d.kind, of, d.boilerplate, d.license))
    return out, boiler


# --- writing the corpus as input files ------------------------------------------------------------------


def _gzip_jsonl(path: Path, records: Sequence[dict]) -> None:
    """A JSONL.gz file whose bytes depend only on the records (no timestamp in the gzip header)."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as g:
        for r in records:
            g.write((json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.rename(path)


def write_inputs(docs: Sequence[GenDoc], in_dir: Path, docs_per_shard: int) -> list[Path]:
    """``web-NNNNN.jsonl.gz`` and ``perl-doc-NNNNN.jsonl.gz`` shards of ``docs_per_shard`` documents
    (``{"id", "url", "text", "license"}``, the curated format ingest reads)."""
    in_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for source in sorted({d.source for d in docs}):
        mine = [d for d in docs if d.source == source]
        for k in range(0, len(mine), docs_per_shard):
            recs = [
                {"id": f"scale-{d.index}", "url": d.url, "text": d.text, "license": d.license}
                for d in mine[k : k + docs_per_shard]
            ]
            path = in_dir / f"{source}-{k // docs_per_shard:05d}.jsonl.gz"
            _gzip_jsonl(path, recs)
            paths.append(path)
    return paths


def build_config(budget_mb: int, seed: int) -> dict:
    """The build config: the budget for every stage, and the shards' sources (crawl windows are tier
    ``web``, so every filter applies to them; Perl's docs are ``curated``, as in a real build)."""
    return {
        "seed": seed,
        "memory_budget_mb": budget_mb,
        "ingest": {
            "sources": [
                {"match": "web-*.jsonl.gz", "name": "web", "tier": "web"},
                {
                    "match": "perl-doc-*.jsonl.gz",
                    "name": "perl-doc",
                    "tier": "curated",
                    "license": PERL_LICENSE,
                },
            ]
        },
    }


def planted_summary(docs: Sequence[GenDoc]) -> dict[str, int]:
    """What the corpus holds, counted from the documents themselves."""
    cluster: dict[int, int] = {}
    for d in docs:
        if d.of >= 0:
            cluster[d.of] = cluster.get(d.of, 0) + 1
    return {
        "documents": len(docs),
        "originals": sum(d.kind == "original" for d in docs),
        "exact_copies": sum(d.kind == "exact_copy" for d in docs),
        "near_duplicates": sum(d.kind == "near_duplicate" for d in docs),
        "with_boilerplate": sum(bool(d.boilerplate) for d in docs),
        "largest_cluster": 1 + max(cluster.values(), default=0),
        # originals that happen to be the same text (two windows of one short page): unplanned copies
        "unplanned_exact": sum(d.kind == "original" for d in docs)
        - len({d.text for d in docs if d.kind == "original"}),
        "perl_doc": sum(d.source == "perl-doc" for d in docs),
        "bytes": sum(len(d.text.encode("utf-8")) for d in docs),
    }


# --- running and measuring ------------------------------------------------------------------------------


@dataclass
class StageRun:
    """One stage (or the snapshot assembly) of one build: how long, how much memory, how many documents."""

    stage: str
    ok: bool
    wall_s: float = 0.0
    peak_mb_by_rank: dict[str, float] = field(default_factory=dict)
    budget_mb: int | None = None
    docs_in: int = 0
    docs_out: int = 0
    filtered: dict[str, int] = field(default_factory=dict)
    snapshot_id: str = ""
    found: dict[str, int] = field(default_factory=dict)  # what a dedup stage found (its manifest's extra)

    @property
    def peak_mb(self) -> float:
        """The largest rank's VmHWM: the one a per-rank budget has to hold."""
        return max(self.peak_mb_by_rank.values(), default=0.0)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


def run_stages(in_dir: Path, build_dir: Path, ranks: int, config: dict, log: Path) -> list[StageRun]:
    """Every stage in pipeline order, each alone under ``mpiexec -n RANKS``, then the snapshot assembly;
    stops at the first that fails (the later ones would have no input)."""
    from corpus.model.layout import manifest_path, stage_dir
    from corpus.model.stages import PIPELINE
    from runtime.build import write_build_config

    build_dir.mkdir(parents=True, exist_ok=True)
    user_cfg = build_dir.parent / f"{build_dir.name}-config.json"
    user_cfg.write_text(json.dumps(config, indent=1))
    cfg_path = write_build_config(build_dir, user_cfg, None)
    runs: list[StageRun] = []
    prev = [in_dir]
    with open(log, "a") as logf:
        for name in PIPELINE:
            out = stage_dir(build_dir, name)
            cmd = [
                sys.executable,
                "-m",
                "cli",
                "stage",
                name,
                "--in",
                *map(str, prev),
                "--out",
                str(out),
                "--ranks",
                str(ranks),
                "--config",
                str(cfg_path),
            ]
            logf.write(f"\n$ {' '.join(cmd)}\n")
            logf.flush()
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, env=_env(), stdout=logf, stderr=subprocess.STDOUT)
            wall = time.perf_counter() - t0
            if proc.returncode != 0 or not manifest_path(out).exists():
                runs.append(StageRun(name, False, wall))
                _progress(runs[-1])
                return runs
            runs.append(stage_run(name, manifest_path(out), wall))
            _progress(runs[-1])
            prev = [out]
        runs.append(run_assembly(build_dir, logf))
        _progress(runs[-1])
    return runs


def _progress(r: StageRun) -> None:
    """One line per stage as it finishes, so a long run that is cut short still says what it measured."""
    state = "ok" if r.ok else "FAILED"
    print(
        f"  {r.stage:14s} {state:6s} {r.wall_s:7.1f} s  peak/rank {json.dumps(r.peak_mb_by_rank)}", flush=True
    )


def stage_run(name: str, manifest: Path, wall_s: float) -> StageRun:
    """A completed stage as the table needs it, from its manifest."""
    m = json.loads(manifest.read_text())
    info, totals = m.get("run_info", {}), m["totals"]
    return StageRun(
        name,
        True,
        wall_s,
        {r: float(v) for r, v in info.get("peak_rss_mb_by_rank", {}).items()},
        info.get("memory_budget_mb"),
        totals["in"],
        totals["out"],
        totals.get("filtered", {}),
        found={k: v for k, v in m.get("extra", {}).items() if k in FOUND_KEYS},
    )


def run_assembly(build_dir: Path, logf) -> StageRun:
    """The snapshot assembly in a child process (``corpus build`` runs it in its driver), which reports
    its own VmHWM: the memory the driver needs on top of the stages."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--assemble", str(build_dir)]
    logf.write(f"\n$ {' '.join(cmd)}\n")
    logf.flush()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=logf, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return StageRun("snapshot", False, wall)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    return StageRun("snapshot", True, wall, {"driver": res["peak_rss_mb"]}, snapshot_id=res["snapshot_id"])


def assemble_main(build_dir: Path) -> int:
    """What ``corpus build`` does after its last stage: assemble and write the snapshot manifest."""
    from runtime.build import finish_build, read_stage_manifests
    from runtime.runner import peak_rss_mb

    snapshot_id = finish_build(build_dir, read_stage_manifests(build_dir))
    print(json.dumps({"snapshot_id": snapshot_id, "peak_rss_mb": peak_rss_mb()}))
    return 0


def _ratio(a: float, b: float) -> str:
    return f"{b / a:.2f}" if a > 0 else "-"


def format_table(n: int, small: list[StageRun], large: list[StageRun], ranks: int, budget: int) -> str:
    """stage | peak MB/rank at N | at 4N | ratio | target | wall s at N | at 4N | ratio (markdown)."""
    big = {r.stage: r for r in large}
    head = (
        f"| stage | peak MB/rank at {n:,} | at {4 * n:,} | ratio | ≤ {TARGET_RATIO} | "
        f"wall s at {n:,} | at {4 * n:,} | ratio |"
    )
    lines = [head, "|" + " --- |" * 8]
    for a in small:
        b = big.get(a.stage)
        if not a.ok or b is None or not b.ok:
            lines.append(
                f"| {a.stage} | {'FAILED' if not a.ok else f'{a.peak_mb:.0f}'} | "
                f"{'not run' if b is None else 'FAILED' if not b.ok else f'{b.peak_mb:.0f}'} | - | - | "
                f"{a.wall_s:.1f} | {'-' if b is None else f'{b.wall_s:.1f}'} | - |"
            )
            continue
        ratio = b.peak_mb / a.peak_mb if a.peak_mb > 0 else float("inf")
        verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
        lines.append(
            f"| {a.stage} | {a.peak_mb:.0f} | {b.peak_mb:.0f} | {ratio:.3f} | {verdict} | "
            f"{a.wall_s:.1f} | {b.wall_s:.1f} | {_ratio(a.wall_s, b.wall_s)} |"
        )
    for b in large:  # a stage that ran only at 4N (the N build stopped earlier)
        if b.stage not in {a.stage for a in small}:
            lines.append(f"| {b.stage} | not run | {b.peak_mb:.0f} | - | - | - | {b.wall_s:.1f} | - |")
    lines.append(
        f"\n{ranks} ranks, memory_budget_mb = {budget}; peak = the largest rank's VmHWM "
        "(snapshot: the assembling process's own)."
    )
    other = sorted({r.stage for r in small + large if r.ok and r.budget_mb not in (None, budget)})
    if other:
        lines.append(f"Stages whose manifest records another budget than {budget} MB: {', '.join(other)}.")
    return "\n".join(lines)


def format_yield(n: int, small: list[StageRun], large: list[StageRun]) -> str:
    """Documents in and out of every stage, and why the rest were dropped (so a run with no real work
    in some stage is visible)."""
    big = {r.stage: r for r in large}
    lines = [
        f"| stage | in → out at {n:,} | dropped by reason | in → out at {4 * n:,} | dropped by reason |",
        "|" + " --- |" * 5,
    ]
    for a in small:
        b = big.get(a.stage)
        if a.stage == "snapshot" or not a.ok:
            continue

        def cell(r: StageRun) -> tuple[str, str]:
            why = [f"{k} {v:,}" for k, v in sorted(r.filtered.items())]
            why += [f"({k} {v:,})" for k, v in r.found.items()]
            return f"{r.docs_in:,} → {r.docs_out:,}", ", ".join(why)

        a_io, a_f = cell(a)
        b_io, b_f = cell(b) if b is not None and b.ok else ("-", "-")
        lines.append(f"| {a.stage} | {a_io} | {a_f} | {b_io} | {b_f} |")
    return "\n".join(lines)


def slopes(n: int, small: list[StageRun], large: list[StageRun]) -> str:
    """Memory and time per 1,000 more documents, from the two points (N, 4N): the marginal cost that a
    projection to 10^9 documents scales up (a flat stage shows ~0 MB per 1k docs)."""
    big = {r.stage: r for r in large}
    lines = ["| stage | MB/rank per 1k docs | s per 1k docs |", "| --- | --- | --- |"]
    dk = 3 * n / 1000
    for a in small:
        b = big.get(a.stage)
        if a.ok and b is not None and b.ok:
            lines.append(
                f"| {a.stage} | {(b.peak_mb - a.peak_mb) / dk:+.2f} | {(b.wall_s - a.wall_s) / dk:.3f} |"
            )
    return "\n".join(lines)


def make_corpus(pages: Sequence[Page], n: int, seed: int, mix: Mix, in_dir: Path) -> dict[str, float]:
    """Generate and write the corpus; what it holds, with ``pool_coverage``: the originals' words over
    the pool's. Above ~1 windows of one page start to overlap, and some become near-duplicates (and
    their lines frequent lines) that nobody planted, so 4N is then not quite N four times over."""
    docs, _ = generate(pages, n, seed, mix)
    if in_dir.exists():
        shutil.rmtree(in_dir)
    write_inputs(docs, in_dir, mix.docs_per_shard)
    used = sum(len(d.text.split()) for d in docs if d.kind == "original")
    return {**planted_summary(docs), "pool_coverage": round(used / max(1, sum(p.words for p in pages)), 2)}


def load_pool(work: Path, mix: Mix) -> list[Page]:
    t0 = time.perf_counter()
    pages = web_pages(SHARED, work / "cache", mix.min_words) + perl_pages(SHARED)
    words = sum(p.words for p in pages)
    print(f"pool: {len(pages):,} real pages, {words:,} words ({time.perf_counter() - t0:.0f} s)", flush=True)
    return pages


def scale_main(args: argparse.Namespace) -> int:
    mix = Mix()
    work = args.out
    work.mkdir(parents=True, exist_ok=True)
    pages = load_pool(work, mix)
    config = build_config(args.budget_mb, args.seed)
    results: dict[int, list[StageRun]] = {}
    for n in (args.n, 4 * args.n):
        in_dir, build_dir, log = work / f"input-{n}", work / f"build-{n}", work / f"build-{n}.log"
        for p in (build_dir, log):
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
        planted = make_corpus(pages, n, args.seed, mix, in_dir)
        print(f"N={n:,}: {json.dumps(planted)}", flush=True)
        results[n] = run_stages(in_dir, build_dir, args.ranks, config, log)
        if not results[n][-1].ok:
            print(f"  {results[n][-1].stage} failed; its log: {log}", flush=True)
        if not args.keep:
            shutil.rmtree(in_dir, ignore_errors=True)
            shutil.rmtree(build_dir, ignore_errors=True)
    small, large = results[args.n], results[4 * args.n]
    print(
        f"\n## Peak memory per rank and wall time at N and 4N ({time.strftime('%Y-%m-%d', time.gmtime())})\n"
    )
    print(format_table(args.n, small, large, args.ranks, args.budget_mb))
    print("\n## Documents through each stage\n")
    print(format_yield(args.n, small, large))
    print("\n## Marginal cost (from N to 4N)\n")
    print(slopes(args.n, small, large))
    return 0 if all(r.ok for r in small + large) else 1


def ranks_check_main(args: argparse.Namespace) -> int:
    """The same corpus built with ``corpus build`` on 1, 2 and 4 ranks: one snapshot id, or a bug (the
    builds are then kept for ``corpus diff``)."""
    from bench.bench_incremental import build_args

    mix = Mix()
    work = args.out
    work.mkdir(parents=True, exist_ok=True)
    pages = load_pool(work, mix)
    in_dir = work / f"input-{args.n}"
    make_corpus(pages, args.n, args.seed, mix, in_dir)
    cfg = work / "ranks-check-config.json"
    cfg.write_text(json.dumps(build_config(args.budget_mb, args.seed), indent=1))
    ids: dict[int, str] = {}
    builds = {ranks: work / f"ranks-{ranks}" for ranks in args.rank_counts}
    for ranks in args.rank_counts:
        build_dir, log = work / f"ranks-{ranks}", work / f"ranks-{ranks}.log"
        shutil.rmtree(build_dir, ignore_errors=True)
        t0 = time.perf_counter()
        with open(log, "w") as logf:
            proc = subprocess.run(
                [sys.executable, "-m", "cli", *build_args([in_dir], build_dir, ranks, config=cfg)],
                cwd=ROOT,
                env=_env(),
                stdout=subprocess.PIPE,
                stderr=logf,
                text=True,
            )
        last = (proc.stdout.strip().splitlines() or [""])[-1]
        ids[ranks] = last.split()[-1] if proc.returncode == 0 and last.startswith("snapshot_id") else "FAILED"
        print(f"{ranks} rank(s): {ids[ranks]}  ({time.perf_counter() - t0:.0f} s; log {log})", flush=True)
    built = {r: i for r, i in ids.items() if i != "FAILED"}
    agree = len(set(built.values())) == 1 and len(built) == len(ids)
    verdict = (
        "AGREE" if agree else "DIFFER" if len(set(built.values())) > 1 else "INCOMPLETE (a build failed)"
    )
    print(f"N={args.n:,}, memory_budget_mb = {args.budget_mb}: snapshot ids {verdict}")
    if not agree:  # the builds are the evidence: keep them, and say how to see what differs
        first, *rest = list(built) or [0]
        for r in rest:
            if built[r] != built[first]:
                print(f"  corpus diff {builds[first]} {builds[r]}")
    elif not args.keep:
        for build_dir in builds.values():
            shutil.rmtree(build_dir, ignore_errors=True)
        shutil.rmtree(in_dir, ignore_errors=True)
    return 0 if "FAILED" not in ids.values() else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000, help="documents in the small corpus (the large is 4N)")
    ap.add_argument("--ranks", type=int, default=2, help="MPI ranks of every stage")
    ap.add_argument("--budget-mb", type=int, default=64, help="the build's memory_budget_mb")
    ap.add_argument("--seed", type=int, default=0, help="seeds the generator and the build")
    ap.add_argument(
        "--out",
        type=Path,
        default=Path("/tmp/bench_scale"),
        help="work directory (the extracted text pool is cached here)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the generated inputs and build directories")
    ap.add_argument(
        "--ranks-check", action="store_true", help="build N on 1, 2 and 4 ranks; compare snapshot ids"
    )
    ap.add_argument(
        "--rank-counts",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[1, 2, 4],
        help="rank counts of --ranks-check (comma-separated; default 1,2,4)",
    )
    # the child process of run_assembly
    ap.add_argument("--assemble", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.assemble is not None:
        return assemble_main(args.assemble)
    return ranks_check_main(args) if args.ranks_check else scale_main(args)


if __name__ == "__main__":
    sys.exit(main())
