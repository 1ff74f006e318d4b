"""The eval tables at the registry sizes a lab checks against (the rule's 8-grams, the fuzzy tier's
5-grams): what writing each costs, its bytes on disk, and what a scanning rank holds in memory and
scans per second with both tiers (and the rule's alone), against the in-memory table a rank built
before (the registry's items and every passage 8-gram as numpy rows, in each rank).

Synthetic registries of N items (default 10^5 and 10^6; ``--sizes 100000 1000000 10000000`` adds 10^7,
about an hour on one core and 13 GB of disk): item i is a real item of the shared eval sets
(round robin) with every fifth word replaced by a word of its own, so items share no 8-gram by chance
and have the real items' lengths. Each measurement runs in a process of its own: peak RSS (VmHWM) and,
for a scanning rank, its anonymous memory (the rank's own) and file-backed memory (the table's mapped
pages, which the page cache holds once per node and may drop) from /proc/self/smaps_rollup. The scan:
real crawl pages with three items of the registry (first, middle, last) planted, checked found.

``--filter-rows`` measures instead the Bloom filter's write alone at a number of distinct hashes (ascending
random ones, as the table's hash column holds them; 485,380,566 is the 10^7-item table's count): the
blocked filter the table writes, a batch at a time, against the unblocked one whose bits were filled in
memory before; each in a process of its own, its wall and CPU seconds and anonymous memory.

    python bench/bench_eval_table.py [--sizes 100000 1000000 [10000000]] [--filter-rows N ...] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_scale import extracted_pages  # noqa: E402
from corpus.decont.matcher import fuzzy_dir  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
#: the stage's rows per sorted run at the default memory budget (256 MB / 8 / 16 bytes a row)
RUN_ROWS = (256 << 20) // 8 // 16
#: the in-memory baseline is measured up to this size (at 10^7 items it needs tens of GB)
BASELINE_MAX = 1_000_000
PAGES = 2_000


def write_registry(path: Path, n: int) -> None:
    """N items made from the shared eval sets' items, every fifth word their own."""
    if path.exists():
        return
    base = [json.loads(line)["text"] for f in sorted((SHARED / "evals").glob("*.jsonl")) for line in open(f)]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as out:
        for i in range(n):
            words = base[i % len(base)].split()
            for k in range(0, len(words), 5):
                words[k] = f"q{i:x}z{k}"
            out.write(json.dumps({"id": f"synth-{i}", "text": " ".join(words)}) + "\n")
    tmp.rename(path)


def memory() -> dict[str, int]:
    """VmHWM, and the rollup's anonymous and file-backed resident bytes, in MB."""
    out = {}
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            out["peak_mb"] = int(line.split()[1]) // 1024
    roll = {}
    for line in open("/proc/self/smaps_rollup"):
        parts = line.split()
        if len(parts) >= 3 and parts[0].endswith(":"):
            roll[parts[0][:-1]] = int(parts[1]) // 1024
    out["anon_mb"] = roll.get("Anonymous", 0)
    out["file_mb"] = roll.get("Rss", 0) - roll.get("Anonymous", 0)
    return out


class AnonPeak:
    """The largest anonymous resident memory (RssAnon) seen by a thread sampling every 20 ms: VmHWM counts
    the mapped table's pages too, which are the page cache's, not the rank's."""

    def __init__(self) -> None:
        self.peak_kb = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self) -> None:
        while not self.stop.wait(0.02):
            for line in open("/proc/self/status"):
                if line.startswith("RssAnon:"):
                    self.peak_kb = max(self.peak_kb, int(line.split()[1]))

    def done(self) -> dict[str, int]:
        self.stop.set()
        self.thread.join()
        return {"anon_peak_mb": self.peak_kb // 1024}


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def planted_pages(pages: list[str], registry: Path, n: int) -> tuple[list[str], list[str]]:
    want = {0, n // 2, n - 1}
    texts = {}
    with open(registry) as f:
        for i, line in enumerate(f):
            if i in want:
                texts[i] = json.loads(line)["text"]
    docs = list(pages)
    for k, i in enumerate(sorted(texts)):
        cut = len(docs[k]) // 2
        docs[k] = f"{docs[k][:cut]}\n\n{texts[i]}\n\n{docs[k][cut:]}"
    return docs, [f"synth-{i}" for i in sorted(texts)]


def scan_rate(docs: list[str], match) -> tuple[float, set[str], list]:
    """Pages per second of ``match`` over the pages' n-grams and 8-gram sets (made before the clock
    starts), the item ids found, and the sets."""
    from corpus.decont.ngrams import Grams, normalize_words, word_hashes
    from corpus.decont.rule import doc_gram_set

    grams = [Grams(word_hashes(normalize_words(d))) for d in docs]
    sets = [doc_gram_set(g) for g in grams]
    t0 = time.perf_counter()
    found = {m.item_id for g, s in zip(grams, sets, strict=True) for m in match(g, s)}
    return len(docs) / (time.perf_counter() - t0), found, sets


def child_build(registry_dir: Path, table_dir: Path, n: int) -> dict:
    """The table of passage ``n``-grams (8: the rule's, 5: the fuzzy tier's)."""
    from corpus.decont.eval_table import build_eval_table

    shutil.rmtree(table_dir, ignore_errors=True)
    peak = AnonPeak()
    t0, c0 = time.perf_counter(), cpu()
    m = build_eval_table(registry_dir, 8, table_dir, RUN_ROWS, n=n)
    wall, cpu_s = time.perf_counter() - t0, cpu() - c0
    disk = sum(p.stat().st_size for p in table_dir.iterdir())
    facts = {k: m[k] for k in ("items", "passages", "rows", "distinct_grams")}
    return (
        {"wall_s": wall, "cpu_s": cpu_s, "disk_mb": disk / 1e6, **memory(), **peak.done()}
        | facts
        | {"bloom_mb": m["bloom"]["blocks"] * 64 / 1e6}
    )


def child_scan(table_dir: Path, registry: Path, n: int, pages_file: Path) -> dict:
    """Both tiers (the fuzzy tier's 5-gram table beside the rule's), and the rule's alone."""
    from corpus.decont.eval_table import EvalTable
    from corpus.decont.matcher import EvalIndex

    pages = json.loads(pages_file.read_text())
    docs, want = planted_pages(pages, registry, n)
    peak = AnonPeak()
    index = EvalIndex(EvalTable.open(table_dir), fuzzy_table=EvalTable.open(fuzzy_dir(table_dir)))
    exact_rate, _, _ = scan_rate(docs, lambda _, s: index.match_set(s))
    rate, found, sets = scan_rate(docs, lambda g, s: [m for ms in index.match_both(g, s) for m in ms])
    maybe = sum(int(index.table.bloom.might_contain(s).sum()) for s in sets)
    grams = sum(s.shape[0] for s in sets)
    facts = {
        "found": sorted(set(want) & found),
        "other": len(found - set(want)),
        "maybe": maybe,
        "grams": grams,
    }
    return {"pages_per_s": rate, "exact_pages_per_s": exact_rate, **facts} | memory() | peak.done()


def child_memory(registry_dir: Path, registry: Path, n: int, pages_file: Path) -> dict:
    """The baseline: the registry and its table in the rank's memory, as the stage held them before."""
    import numpy as np

    from corpus.decont.matcher import Match, PassageTable
    from corpus.decont.registry import EvalRegistry
    from corpus.decont.rule import DEFAULT_MIN_RUN, contaminated

    peak = AnonPeak()
    t0 = time.perf_counter()
    items = [i for b in EvalRegistry.load(registry_dir).benchmarks for i in b.items]
    table = PassageTable.build(items)
    load_s = time.perf_counter() - t0

    def match(_, doc_set):
        passage, position = table.rows_in(doc_set)
        _, hit, run = contaminated(
            np.zeros(passage.shape[0], np.int64), passage, position, table.passage_len, DEFAULT_MIN_RUN
        )
        return [
            Match(items[table.passage_item[p]].benchmark, items[table.passage_item[p]].item_id, r)
            for p, r in zip(hit, run, strict=True)
        ]

    docs, want = planted_pages(json.loads(pages_file.read_text()), registry, n)
    rate, found, _ = scan_rate(docs, match)
    return (
        {"load_s": load_s, "pages_per_s": rate, "found": sorted(set(want) & found)} | memory() | peak.done()
    )


def child_hashes(path: Path, n: int) -> dict:
    """``n`` ascending distinct uint64 hashes in a raw file, made from random gaps (mean 0.95 * 2^64 / n)
    a batch at a time, so no sort and no array of all of them."""
    import numpy as np

    rng = np.random.default_rng(n)
    top = (1 << 64) * 19 // (10 * n)
    last = np.uint64(0)
    with open(path, "wb") as f:
        for at in range(0, n, 1 << 24):
            h = np.cumsum(rng.integers(1, top, size=min(1 << 24, n - at), dtype=np.uint64), dtype=np.uint64)
            h += last
            h.tofile(f)
            last = h[-1]
    return {"hashes": n}


def child_filter(path: Path, n: int, kind: str) -> dict:
    """The filter of the ``n`` hashes in ``path``: ``blocked`` as the table writes it, ``unblocked``
    filled in memory as it was before (not written)."""
    import numpy as np

    from corpus.decont.eval_table import write_bloom
    from corpus.formats.bloom import BloomFilter, BloomSpec

    peak = AnonPeak()
    t0, c0 = time.perf_counter(), cpu()
    if kind == "blocked":
        blocks = write_bloom(path.with_suffix(".bbloom"), path, n, n)
        size = blocks * 64
    else:
        bloom = BloomFilter.for_keys(n, BloomSpec.from_fp_rate(0.01))
        for at in range(0, n, 1 << 20):
            bloom.add(np.fromfile(path, dtype="<u8", count=min(1 << 20, n - at), offset=at * 8))
        size = bloom.bits // 8
    return {"wall_s": time.perf_counter() - t0, "cpu_s": cpu() - c0, "filter_mb": size / 1e6} | peak.done()


def filter_rows(work: Path, sizes: list[int]) -> None:
    print("| distinct hashes | filter | size MB | write s (CPU s) | anon peak MB |")
    print("|---|---|---|---|---|")
    for n in sizes:
        hashes = work / f"hashes-{n}.u8"
        run_child("hashes", str(hashes), str(n))
        for kind in ("blocked", "unblocked"):
            r = run_child("filter", str(hashes), str(n), kind)
            print(
                f"| {n:,} | {kind} | {r['filter_mb']:,.1f} | {r['wall_s']:.0f} ({r['cpu_s']:.0f}) | "
                f"{r['anon_peak_mb']:,} |",
                flush=True,
            )
        hashes.unlink()
        hashes.with_suffix(".bbloom").unlink()


def run_child(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--work", type=Path, default=Path("/tmp/eval-table-bench"))
    ap.add_argument("--filter-rows", type=int, nargs="+", default=[])
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, *rest = args.child
        fn = {
            "build": child_build,
            "scan": child_scan,
            "memory": child_memory,
            "hashes": child_hashes,
            "filter": child_filter,
        }[kind]
        typed = [int(a) if a.isdigit() else a if a in ("blocked", "unblocked") else Path(a) for a in rest]
        print(json.dumps(fn(*typed)))
        return 0

    args.work.mkdir(parents=True, exist_ok=True)
    if args.filter_rows:
        filter_rows(args.work, args.filter_rows)
        return 0
    pages_file = args.work / "pages.json"
    if not pages_file.exists():
        pages = extracted_pages(
            [SHARED / "warc" / "crawl-2026-03-part0.warc.gz"], args.work / "cache", "part0"
        )
        pages_file.write_text(json.dumps([t for _, t in pages if len(t.split()) >= 100][:PAGES]))
    rows = []
    for n in args.sizes:
        d = args.work / f"n{n}"
        d.mkdir(exist_ok=True)
        registry = d / "registry" / "synth.jsonl"
        registry.parent.mkdir(exist_ok=True)
        write_registry(registry, n)
        b = run_child("build", str(registry.parent), str(d / "table"), "8")
        b5 = run_child("build", str(registry.parent), str(fuzzy_dir(d / "table")), "5")
        s = run_child("scan", str(d / "table"), str(registry), str(n), str(pages_file))
        m = (
            run_child("memory", str(registry.parent), str(registry), str(n), str(pages_file))
            if n <= BASELINE_MAX
            else None
        )
        rows.append((n, b, b5, s, m))
        print(json.dumps({"items": n, "build": b, "build_5": b5, "scan": s, "in_memory": m}), flush=True)
    print()
    print(
        "| items | rows | distinct | disk MB | Bloom MB | build s (CPU s) | build: anon peak MB (VmHWM) | "
        "5-grams: rows | disk MB | build s (CPU s) | anon peak MB | "
        "scan pages/s (8-gram rule alone) | scan: anon peak MB | scan: file-backed MB | Bloom pass | "
        "planted found | in memory: build s | pages/s | anon peak MB (VmHWM) |"
    )
    print("|" + "---|" * 19)
    for n, b, b5, s, m in rows:
        base = "- | - | -"
        if m:
            base = f"{m['load_s']:.0f} | {m['pages_per_s']:.0f} | {m['anon_peak_mb']:,} ({m['peak_mb']:,})"
        print(
            f"| {n:,} | {b['rows']:,} | {b['distinct_grams']:,} | {b['disk_mb']:,.0f} | {b['bloom_mb']:,.1f} | "
            f"{b['wall_s']:.0f} ({b['cpu_s']:.0f}) | {b['anon_peak_mb']:,} ({b['peak_mb']:,}) | "
            f"{b5['rows']:,} | {b5['disk_mb']:,.0f} | {b5['wall_s']:.0f} ({b5['cpu_s']:.0f}) | "
            f"{b5['anon_peak_mb']:,} | "
            f"{s['pages_per_s']:.0f} ({s['exact_pages_per_s']:.0f}) | {s['anon_peak_mb']:,} | {s['file_mb']:,} | "
            f"{s['maybe'] / max(1, s['grams']):.4f} | {len(s['found'])}/3 | {base} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
