"""Benchmark: recall and false positives of decontamination, in the build and after it, on the real crawl.

    python bench/bench_decont.py [--work /tmp/decont-bench] [--per-benchmark 200] [--seed 16] [--bits 4]

The corpus is every page of the shared crawl (``../shared/data/warc``, both crawls, extracted once with
the project's own :func:`corpus.text.extract.extract_text` as the extract stage does, and cached in
``--work``); the registry is the full shared eval sets (gsm8k 1,319, ARC-Easy 2,376, ARC-Challenge
1,172, LAMBADA 5,153, HumanEval 164 items). ``--per-benchmark`` items of each benchmark (seeded) are
pasted into as many distinct real pages (at a line break near the middle), in two corpora:

* **verbatim**: the item's ``text`` as the eval file gives it (template included);
* **reformatted**: the item's content written another way — no ``Question:`` / ``Answer:`` template;
  multiple-choice items with their choices shuffled and relabelled ``(a)``… and the answer named by its
  new label; GSM8K's answer without its ``<<…>>`` calculator notes — then every plant lightly edited
  all at once: case (upper, lower or title), every punctuation mark replaced by another mark or a space
  (never deleted, which would join two words), whitespace runs changed (spaces, tabs) and the text
  re-wrapped with line breaks every 4-12 words.

Both paths are the project's code: **in the build** is what the decontaminate stage runs on each
document (:meth:`corpus.decont.matcher.EvalIndex.match_set` on the document's 8-gram set); **after the
build** is what ``corpus contamination --benchmark`` runs (:func:`corpus.decont.doc_grams.check_benchmark`)
against the per-document 8-gram index of the same pages, written in ``2**bits`` parts by the stage's
record writer. A planted item counts as found when the path names that item in its host page. A false
positive is any (item, page) the path names that was not planted (on the clean crawl: every one),
except *siblings*: another item that the pasted text contains by itself (the eval sets hold items that
share a stem or most of their text, e.g. HumanEval/56 and /61), counted apart.
The two paths must name the same (item, page) pairs everywhere; the bench says whether they do.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_scale import extracted_pages  # noqa: E402
from corpus.decont.content import strip_template  # noqa: E402
from corpus.decont.doc_grams import DocGramIndex, check_benchmark, doc_rows, key_hex, write_parts  # noqa: E402
from corpus.decont.matcher import EvalIndex  # noqa: E402
from corpus.decont.registry import EvalRegistry  # noqa: E402
from corpus.decont.rule import text_gram_set  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
WARCS = tuple(sorted(p.name for p in (SHARED / "warc").glob("*.warc.gz")))
#: a host page needs this many words (so a plant sits inside real text)
MIN_HOST_WORDS = 100


# --- the crawl's text ----------------------------------------------------------------------------------
def crawl_pages(cache_dir: Path, workers: int = 2) -> list[tuple[str, str]]:
    """(url, text) of every HTML page of the shared crawl, extracted once (~2 min on 2 cores) and cached."""
    return extracted_pages([SHARED / "warc" / n for n in WARCS], cache_dir, "crawl-text", workers)


# --- plants --------------------------------------------------------------------------------------------
def records(path: Path) -> dict[str, dict]:
    with open(path, encoding="utf-8") as f:
        return {str(r["id"]): r for r in map(json.loads, f)}


def plant(host: str, text: str) -> str:
    """``text`` pasted into ``host`` at the line break nearest its middle."""
    cut = host.find("\n", len(host) // 2)
    cut = cut if cut > 0 else len(host) // 2
    return f"{host[:cut]}\n{text}\n{host[cut:]}"


_CALC = re.compile(r"<<[^<>]*>>")
_PUNCT = re.compile(r"[^\w\s]")
_MARKS = [" ", ",", ";", ".", ":", " - ", "!", "?", "/", "·"]


def content_form(rec: dict, rnd: random.Random) -> str:
    """The item written without its benchmark's template; multiple choice reordered and relabelled."""
    doc = rec.get("doc") or {}
    if {"query", "choices", "gold"} <= doc.keys():
        order = list(range(len(doc["choices"])))
        rnd.shuffle(order)
        labels = "abcdefgh"
        lines = [strip_template(doc["query"])]
        lines += [f"({labels[i]}) {doc['choices'][j]}" for i, j in enumerate(order)]
        lines.append(f"correct: ({labels[order.index(doc['gold'])]})")
        return "\n".join(lines)
    if {"question", "answer"} <= doc.keys():
        return f"{doc['question']}\n{_CALC.sub('', doc['answer'])}"
    return strip_template(rec["text"])


def light_edit(text: str, rnd: random.Random) -> str:
    """Case, punctuation, whitespace and line breaks changed at once (the words stay the words)."""
    case = rnd.choice([str.upper, str.lower, str.title])
    text = case(text)
    text = _PUNCT.sub(lambda _: rnd.choice(_MARKS), text)
    words = text.split()
    out, line = [], 0
    wrap = rnd.randint(4, 12)
    for w in words:
        out.append(w)
        line += 1
        if line >= wrap:
            out.append("\n")
            line, wrap = 0, rnd.randint(4, 12)
        else:
            out.append(rnd.choice([" ", "  ", "\t", " "]))
    return "".join(out).strip()


@dataclass(frozen=True)
class Plant:
    benchmark: str
    item_id: str
    page: int
    texts: tuple[tuple[str, str], ...]  # (corpus, the text pasted into the page)


def make_plants(
    registry: EvalRegistry, pages: list[str], per_benchmark: int, seed: int
) -> tuple[list[Plant], dict[str, list[str]]]:
    """Which item goes into which page, and the two planted corpora (verbatim, reformatted)."""
    rnd = random.Random(seed)
    hosts = [i for i, p in enumerate(pages) if len(p.split()) >= MIN_HOST_WORDS]
    counts = [min(per_benchmark, len(b.items)) for b in registry.benchmarks]
    chosen_pages = rnd.sample(hosts, sum(counts))
    plants: list[Plant] = []
    verbatim, reformatted = list(pages), list(pages)
    k = 0
    for b, count in zip(registry.benchmarks, counts, strict=True):
        recs = records(b.path)
        for item in rnd.sample(list(b.items), count):
            page = chosen_pages[k]
            k += 1
            edited = light_edit(content_form(recs[item.item_id], rnd), rnd)
            plants.append(
                Plant(b.name, item.item_id, page, (("verbatim", item.text), ("reformatted", edited)))
            )
            verbatim[page] = plant(pages[page], item.text)
            reformatted[page] = plant(pages[page], edited)
    return plants, {"verbatim": verbatim, "reformatted": reformatted}


# --- the two paths -------------------------------------------------------------------------------------
def page_key(i: int) -> int:
    return int(hashlib.sha256(f"page-{i}".encode()).hexdigest()[:16], 16)


def in_build(index: EvalIndex, pages: list[str]) -> tuple[set[tuple[str, str, int]], list[np.ndarray], float]:
    """What the stage does per document: the 8-gram set, the records it keeps, the items it flags."""
    t0 = time.perf_counter()
    found, rows = set(), []
    for i, text in enumerate(pages):
        doc_set = text_gram_set(text)
        rows.append(doc_rows(doc_set, page_key(i)))
        found |= {(m.benchmark, m.item_id, i) for m in index.match_set(doc_set)}
    return found, rows, time.perf_counter() - t0


def after_build(
    registry: EvalRegistry, index: EvalIndex, rows: list[np.ndarray], n_pages: int, work: Path, bits: int
) -> tuple[set[tuple[str, str, int]], float, int]:
    """What ``corpus contamination --benchmark`` does, against the per-document index of the pages."""
    paths = write_parts(np.concatenate(rows), work, bits)
    dg = DocGramIndex(paths, bits)
    page_of = {key_hex(page_key(i)): i for i in range(n_pages)}
    t0 = time.perf_counter()
    found = set()
    for b in registry.benchmarks:
        r = check_benchmark(b, dg, index.min_run, index.min_item_words)
        found |= {(b.name, item_id, page_of[m["doc"]]) for item_id, ms in r["matches"].items() for m in ms}
    return found, time.perf_counter() - t0, len(dg)


# --- the table -----------------------------------------------------------------------------------------
def siblings(index: EvalIndex, plants: list[Plant], corpus: str) -> set[tuple[str, str, int]]:
    """(item, page) pairs the pasted text alone contains besides the planted item: another item of the
    benchmarks sharing 22 words or a whole passage with it (HumanEval/56 and /61, ARC questions on one
    shared stem, overlapping LAMBADA passages). Found, they are right, not false positives."""
    out = set()
    for p in plants:
        text = dict(p.texts)[corpus]
        out |= {(m.benchmark, m.item_id, p.page) for m in index.match(text)} - {
            (p.benchmark, p.item_id, p.page)
        }
    return out


def score(
    found: set[tuple[str, str, int]],
    plants: list[Plant],
    benchmark: str | None = None,
    also: set = frozenset(),
) -> tuple[int, int, int]:
    """(planted, found, false positives) for one benchmark (or all); ``also``: pairs that are right too."""
    want = {(p.benchmark, p.item_id, p.page) for p in plants if benchmark in (None, p.benchmark)}
    got = {f for f in found if benchmark in (None, f[0])}
    return len(want), len(want & got), len(got - want - set(also))


def unchecked(index: EvalIndex, plants: list[Plant]) -> int:
    table = index.table
    checked = np.zeros(table.item_benchmark.shape[0], dtype=bool)
    checked[table.passage_item] = True  # an item with a passage long enough to check
    bad = {table.item(int(i)) for i in np.flatnonzero(~checked)}
    return sum((p.benchmark, p.item_id) in bad for p in plants)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/decont-bench"), help="cache and index directory")
    ap.add_argument("--per-benchmark", type=int, default=200)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--bits", type=int, default=4, help="the per-document index in 2**bits parts")
    args = ap.parse_args(argv)

    crawl = crawl_pages(args.work / "cache")
    pages = [text for _, text in crawl]
    t0 = time.perf_counter()
    registry = EvalRegistry.load(SHARED / "evals")
    index = EvalIndex.build(SHARED / "evals", args.work / "eval-table")
    print(
        f"crawl: {len(pages)} pages, {sum(len(p.split()) for p in pages):,} words; registry: "
        f"{sum(len(b.items) for b in registry.benchmarks):,} items, {index.table.manifest['passages']:,} "
        f"passages ({time.perf_counter() - t0:.1f}s); rule: {index.describe()['rule']}, run >= {index.min_run}"
    )
    plants, planted = make_plants(registry, pages, args.per_benchmark, args.seed)
    corpora = {"clean crawl": pages, **planted}
    results: dict[str, dict[str, set]] = {}
    agree = {}
    for name, docs in corpora.items():
        build, rows, t_build = in_build(index, docs)
        after, t_after, n_rows = after_build(
            registry, index, rows, len(docs), args.work / "index" / name.replace(" ", "-"), args.bits
        )
        results[name] = {"in the build": build, "after the build": after}
        agree[name] = build == after
        print(
            f"{name}: in the build {t_build:.1f}s ({len(docs) / t_build:.0f} pages/s); after it {t_after:.1f}s "
            f"against {n_rows:,} records ({16 * n_rows / 1e6:.0f} MB); paths agree: {'yes' if agree[name] else 'NO'}"
        )

    print()
    head = ("corpus", "path", "planted", "found", "recall", "siblings", "false pos.")
    rows_out = [head]
    for name in corpora:
        also = siblings(index, plants, name) if name != "clean crawl" else set()
        for path in ("in the build", "after the build"):
            if name == "clean crawl":
                fp = len(results[name][path])
                rows_out.append((name, path, "0", "-", "-", "-", str(fp)))
                continue
            n, hit, fp = score(results[name][path], plants, also=also)
            sib = len(results[name][path] & also)
            rows_out.append((name, path, str(n), str(hit), f"{hit / n:.3f}", str(sib), str(fp)))
    widths = [max(len(r[i]) for r in rows_out) for i in range(len(head))]
    for r in rows_out:
        print(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )

    print("\nrecall per benchmark (in the build = after the build where the paths agree)")
    head = ("benchmark", "planted", "unchecked", "verbatim", "reformatted")
    rows_out = [head]
    for b in registry.benchmarks:
        sub = [p for p in plants if p.benchmark == b.name]
        cells = [b.name, str(len(sub)), str(unchecked(index, sub))]
        for name in planted:
            n, hit, _ = score(results[name]["in the build"], plants, b.name)
            cells.append(f"{hit / n:.3f}")
        rows_out.append(tuple(cells))
    widths = [max(len(r[i]) for r in rows_out) for i in range(len(head))]
    for r in rows_out:
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    for name in planted:
        missed = sorted(
            {(p.benchmark, p.item_id) for p in plants} - {(b, i) for b, i, _ in results[name]["in the build"]}
        )
        if missed:
            print(
                f"missed ({name}): {', '.join(f'{b}/{i}' for b, i in missed[:12])}{' …' if len(missed) > 12 else ''}"
            )
    return 0 if all(agree.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
