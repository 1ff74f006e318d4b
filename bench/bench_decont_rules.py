"""Benchmark: the build's rule (runs of 8-grams per passage) against seed 002's 13-gram rule, precision and
recall on planted paraphrases of benchmark items in real pages.

    python bench/bench_decont_rules.py [--work /tmp/decont-bench] [--per-benchmark 200] [--seed 16]

The corpus and registry are bench_decont's (every page of the shared crawl; the full shared eval sets).
``--per-benchmark`` items of each benchmark are pasted into as many distinct pages, written as
bench_decont's *reformatted* plants (no template, choices shuffled and relabelled, case, punctuation and
line breaks changed) and then **paraphrased** by this script at a rate r: each word, with probability r,
is replaced (a synonym from a small table, else the word's plural/singular), dropped, or followed by a
filler word ("also", "really", …). r = 0 is the reformatted plant itself.

* **run rule** (the build's, ``passage-8gram-set-run/1``): an item is contaminated when one of its
  passages has a run of min(15, its 8-grams) consecutive 8-grams all in the page.
  With ``min_run = 6`` a run is 13 words, the 13-gram rule's span, and short passages still count.
* **13-gram rule** (seed 002 §5, GPT-3's): an item is contaminated when any 13-gram of its passages (the
  same passages) is in the page; items under 13 words cannot be checked.
* **run rule + fuzzy tier** (the build's two tiers, what a default version excludes): also an item one
  of whose passages has at least a share (0.55 by default) of its words, and at least 8 of them,
  covered by 5-grams the page holds, anywhere and in any order (``passage-5gram-cover/1``).

Then the default fuzzy tier with the bundled registry (``assets/evals``, MMLU among its 42,048 items)
on the clean crawl: the pages it flags, where its many short questions could meet stock phrases.

Recall: planted (item, page) pairs found. A false positive: a flagged (item, page) that was not planted,
except *siblings* (another item the pasted text contains by itself, by that rule); on pages with nothing
planted, every flag. Precision: found / (found + false positives).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_decont import SHARED, content_form, crawl_pages, light_edit, plant, records  # noqa: E402
from corpus.decont.matcher import EvalIndex  # noqa: E402
from corpus.decont.ngrams import Grams, normalize_words, text_grams, word_hashes  # noqa: E402
from corpus.decont.registry import EvalItem, EvalRegistry  # noqa: E402
from corpus.decont.rule import text_gram_set  # noqa: E402

RATES = (0.0, 0.02, 0.05, 0.1, 0.2)
MIN_HOST_WORDS = 100
_SYNONYMS = {
    "the": "a", "a": "the", "is": "was", "was": "is", "are": "were", "what": "which", "which": "what",
    "how": "in what way", "many": "a number of", "much": "a lot of", "if": "when", "when": "if",
    "and": "as well as", "but": "yet", "has": "owns", "have": "own", "buy": "purchase", "gets": "receives",
    "each": "every", "every": "each", "total": "sum", "number": "count", "find": "work out", "more": "extra",
    "big": "large", "small": "little", "uses": "employs", "use": "employ", "makes": "produces",
}  # fmt: skip
_FILLERS = ("also", "really", "then", "just", "still", "actually")


def paraphrase(text: str, rate: float, rnd: random.Random) -> str:
    """Each word, with probability ``rate``: replaced, dropped, or followed by a filler word."""
    out = []
    for word in text.split():
        if rnd.random() >= rate:
            out.append(word)
            continue
        action = rnd.random()
        if action < 0.5:
            key = word.lower()
            out.append(
                _SYNONYMS.get(key) or (word[:-1] if key.endswith("s") and len(key) > 3 else word + "s")
            )
        elif action < 0.75:
            continue
        else:
            out += [word, rnd.choice(_FILLERS)]
    return " ".join(out)


class ThirteenGramRule:
    """Any 13-gram of an item's passages in the page: the item's (sorted hashes, item) table."""

    def __init__(self, items: list[EvalItem]) -> None:
        hashes, owners = [], []
        for i, item in enumerate(items):
            grams = [text_grams(t, 13) for t in item.passages or (item.text,)]
            h = np.unique(np.concatenate(grams))
            hashes.append(h)
            owners.append(np.full(h.shape[0], i, dtype=np.int64))
        h, o = np.concatenate(hashes), np.concatenate(owners)
        order = np.argsort(h, kind="stable")
        self.hashes, self.owner, self.items = h[order], o[order], items

    def match(self, text: str) -> set[tuple[str, str]]:
        page = np.unique(text_grams(text, 13))
        left = np.searchsorted(self.hashes, page, side="left")
        right = np.searchsorted(self.hashes, page, side="right")
        hit = {
            int(self.owner[j])
            for a, b in zip(left.tolist(), right.tolist(), strict=True)
            for j in range(a, b)
        }
        return {(self.items[i].benchmark, self.items[i].item_id) for i in hit}


def run_rule(index: EvalIndex):
    return lambda text: {(m.benchmark, m.item_id) for m in index.match_set(text_gram_set(text))}


def both_tiers(index: EvalIndex):
    """The run rule's items and the fuzzy tier's: what a default version excludes."""

    def match(text: str) -> set[tuple[str, str]]:
        exact, fuzzy = index.match_both(Grams(word_hashes(normalize_words(text))))
        return {(m.benchmark, m.item_id) for m in exact} | {(m.benchmark, m.item_id) for m in fuzzy}

    return match


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/decont-bench"))
    ap.add_argument("--per-benchmark", type=int, default=200)
    ap.add_argument("--seed", type=int, default=16)
    args = ap.parse_args(argv)

    pages = [text for _, text in crawl_pages(args.work / "cache")]
    registry = EvalRegistry.load(SHARED / "evals")
    items = [i for b in registry.benchmarks for i in b.items]
    index = EvalIndex.build(SHARED / "evals", args.work / "eval-table")
    rules = {
        "run rule (min_run 15, the default)": run_rule(index),
        "run rule, min_run 6 (13 words)": run_rule(EvalIndex(index.table, min_run=6)),
        "13-gram rule": ThirteenGramRule(items).match,
        "run rule + fuzzy tier (share 0.55, the default)": both_tiers(index),
        "run rule + fuzzy tier, share 0.5": both_tiers(fuzzy_variant(index, 0.5)),
        "run rule + fuzzy tier, share 0.6": both_tiers(fuzzy_variant(index, 0.6)),
    }
    rnd = random.Random(args.seed)
    hosts = rnd.sample(
        [i for i, p in enumerate(pages) if len(p.split()) >= MIN_HOST_WORDS], 5 * args.per_benchmark
    )
    plants = []  # (benchmark, item id, page, content form)
    for b in registry.benchmarks:
        recs = records(b.path)
        for item in rnd.sample(list(b.items), min(args.per_benchmark, len(b.items))):
            plants.append(
                (
                    b.name,
                    item.item_id,
                    hosts[len(plants)],
                    light_edit(content_form(recs[item.item_id], rnd), rnd),
                )
            )
    clean = {name: {k: rule(p) for k, p in enumerate(pages)} for name, rule in rules.items()}
    planted_pages = {p[2] for p in plants}
    print(f"{len(pages):,} pages, {len(items):,} items, {len(plants)} plants")
    print()
    print("| rule | paraphrase rate | planted | found | recall | siblings | false pos. | precision |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rule in rules.items():
        fp_clean = sum(len(f) for k, f in clean[name].items() if k not in planted_pages)
        pages_flagged = sum(1 for k, f in clean[name].items() if f and k not in planted_pages)
        print(
            f"| {name} | clean crawl | 0 | - | - | - | {sum(len(f) for f in clean[name].values())} "
            f"({pages_flagged} of {len(pages) - len(planted_pages)} unplanted pages) | - |"
        )
        for rate in RATES:
            prnd = random.Random(f"{args.seed}-{rate}")
            found = siblings = fp = 0
            for bench, item_id, page, form in plants:
                text = paraphrase(form, rate, prnd)
                flags = rule(plant(pages[page], text))
                alone = rule(text) - {(bench, item_id)}
                found += (bench, item_id) in flags
                siblings += len(flags & alone)
                fp += len(flags - alone - {(bench, item_id)})
            fp += fp_clean
            n = len(plants)
            print(
                f"| {name} | {rate:g} | {n} | {found} | {found / n:.3f} | {siblings} | {fp} | "
                f"{found / max(1, found + fp):.3f} |",
                flush=True,
            )
    bundled = both_tiers(EvalIndex.build(ROOT / "assets" / "evals", args.work / "bundled-table"))
    flagged = [k for k, p in enumerate(pages) if k not in planted_pages and bundled(p)]
    print()
    print(
        f"the bundled registry, the default tiers: {len(flagged)} of "
        f"{len(pages) - len(planted_pages)} unplanted pages flagged"
    )
    return 0


def fuzzy_variant(index: EvalIndex, share: float) -> EvalIndex:
    return EvalIndex(index.table, index.min_run, index.fuzzy_table, fuzzy_share=share)


if __name__ == "__main__":
    sys.exit(main())
