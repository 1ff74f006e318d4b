"""MinHash: kernel speed per core and dedup quality, side by side with datasketch and datatrove.

    python bench/bench_minhash.py [--speed-mb 2] [--quality-docs 3000] [--json out.json]
    python bench/bench_minhash.py --scripts   # ours alone: English against Japanese and Chinese

1. Signature speed on one core (process CPU time) over the same real documents (Perl's documentation,
   ``../shared/data/curated/perl-doc.jsonl.gz``), 112 permutations, word 5-grams:
   ours (normalization + numba kernel), datasketch (the same normalization and shingles built in Python,
   ``MinHash.update_batch``), datatrove's ``MinhashDedupSignature`` (its own normalization and default
   spaCy word tokenizer; sha1 hashing since xxhash is not installed).
2. The S-curve: pairs planted at known shingle Jaccard; detection rate against 1-(1-s^r)^b, ours and
   datasketch ``MinHashLSH`` at the same b, r.
3. Precision and recall of the removed set against exact all-pairs Jaccard (threshold 0.7) on a few
   thousand real documents (``=head`` sections of the same PODs, plus copies edited at random rates):
   the real ``minhash_dedup`` stage (1 rank) with its default (every cluster verified) and with LSH alone, and
   datasketch ``MinHashLSH`` at the same b, r, all turned into clusters and representatives the same way.

``--scripts`` (ours alone, the shingles of unspaced scripts, normalization version 2):

1. speed on that English text and on ~2.5 MB of the crawl's Japanese and Chinese pages (character
   5-grams), through ``MinHasher.signatures`` (with the Python NFKC of non-ASCII text) and through the
   kernel alone;
2. the S-curve on real Japanese and Chinese pages edited at graded rates (characters or sentences
   replaced by real ones of other pages; ``tests/dedup/crawl_pages.py``);
3. the n of the character n-grams: Jaccard of unrelated pages (every pair of distinct ja / zh pages of
   the first crawl) and of real near-duplicates (the installation guide's pages for amd64 and arm64,
   in English, Japanese and Chinese), at n = 3 ... 10, against English word 5-grams on the same pages.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.dedup.order import representative_key  # noqa: E402
from corpus.dedup.union_find import UnionFind  # noqa: E402
from corpus.text.normalize import CHAR_NGRAM, shingle_units  # noqa: E402
from mpi_kernels.minhash import MinHasher, MinHashParams, lsh_probability  # noqa: E402
from tests.dedup.dedup_corpus import make_doc, perl_pods, perl_sections, planted_pair, write_stage_dir  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
BANDS, ROWS, PERM, THRESHOLD = 14, 8, 112, 0.7


def shingles(text: str, n: int = 5, char_n: int = CHAR_NGRAM) -> list[bytes]:
    """The shingles the kernel hashes, as bytes: word n-grams, or character n-grams of an unspaced text."""
    units, chars = shingle_units(text)
    if not units:
        return []
    width = min(char_n if chars else n, len(units))
    sep = "" if chars else " "
    return [sep.join(units[i : i + width]).encode() for i in range(len(units) - width + 1)]


def cpu(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


# -- 1. speed --------------------------------------------------------------------------------------
def bench_speed(texts: list[str]) -> list[dict]:
    from datasketch import MinHash
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
    from datatrove.utils.hashing import HashConfig

    mb = sum(len(t.encode()) for t in texts) / 1e6
    ours = MinHasher(MinHashParams(num_perm=PERM, bands=BANDS, rows=ROWS))
    ours.signatures(texts[:2])  # compile (or load the numba cache) outside the timing
    t_ours = min(cpu(lambda: ours.signatures(texts)) for _ in range(3))

    def datasketch_all():
        for t in texts:
            m = MinHash(num_perm=PERM, seed=1)
            m.update_batch(shingles(t))

    t_ds = cpu(datasketch_all)
    dt = MinhashDedupSignature(
        output_folder=tempfile.mkdtemp(),
        config=MinhashConfig(hash_config=HashConfig(hash_fc="sha1", precision=64)),
    )
    dt.get_signature(dt.get_shingles(texts[0]))  # load spaCy outside the timing

    def datatrove_all():
        for t in texts:
            sh = dt.get_shingles(t)
            if sh.size:
                dt.get_signature(sh)

    t_dt = cpu(datatrove_all)
    rows = []
    for name, secs in (("ours (numba)", t_ours), ("datasketch", t_ds), ("datatrove", t_dt)):
        rows.append(
            {
                "impl": name,
                "cpu_s": round(secs, 3),
                "MB_per_s": round(mb / secs, 2),
                "sigs_per_s": round(len(texts) / secs, 1),
                "ours_speedup": round(secs / t_ours, 1),
            }
        )
    return rows


def bench_scurve_unspaced(pages_per_language: int = 20, repeats: int = 10) -> list[dict]:
    """Graded edits of real ja and zh pages (the first crawl's first pages of 800-6,000 characters),
    ``repeats`` per page and level, each repeat with its own hash functions; found = shares a band."""
    from tests.dedup.crawl_pages import crawl_pages, scurve_points

    warcs = tuple(f"warc/crawl-2026-03-part{i}.warc.gz" for i in range(4))
    pages = crawl_pages(SHARED, pages_per_language, warcs=warcs)
    rows = []
    for lang, texts in pages.items():
        found = scurve_points(
            texts, (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95), repeats, lang, BANDS, ROWS
        )
        for results in found.values():
            j = np.array([x[0] for x in results])
            rows.append(
                {
                    "lang": lang,
                    "pairs": len(results),
                    "jaccard": round(float(j.mean()), 3),
                    "theory": round(float(lsh_probability(j, BANDS, ROWS).mean()), 3),
                    "ours": round(sum(x[1] for x in results) / len(results), 3),
                }
            )
    return rows


def bench_char_ngram(ns: tuple[int, ...] = (3, 4, 5, 6, 8, 10)) -> list[dict]:
    """For each n: unrelated pages (all pairs of distinct ja, zh pages of the first crawl shingled by
    characters): the 99.9th percentile of their Jaccard and the pairs LSH is expected to find; real
    near-duplicates (installation guide pages for amd64 and arm64, not identical): how many are at
    Jaccard >= 0.7 and how far their Jaccard is from English word 5-grams' on the same page pair."""
    import re

    from corpus.text.normalize import is_unspaced, normalize_text
    from tests.dedup.crawl_pages import URL_LANGUAGE, crawl_records, jaccard, page_text

    warcs = tuple(f"warc/{p.name}" for p in sorted((SHARED / "warc").glob("*.warc.gz")))
    guide = re.compile(r"installation-guide-(amd64|arm64)/(en|ja|zh_CN)/(.*)$")
    unrelated: dict[str, list[str]] = {"ja": [], "zh": []}
    arch: dict[tuple[str, str], dict[str, str]] = {}
    for rec in crawl_records(SHARED, warcs):
        m = guide.search(rec.url)
        lang = next((lang for lang, url in URL_LANGUAGE.items() if url.search(rec.url)), None)
        first_crawl = rec.date.startswith("2026-03")
        if m is None and (lang is None or not first_crawl or len(rec.payload) > 200_000):
            continue
        text = normalize_text(page_text(rec))
        if m:
            arch.setdefault((m.group(2), m.group(3)), {})[m.group(1)] = text
        if lang and first_crawl and is_unspaced(text) and len(text) >= 300:
            unrelated[lang].append(text)
    files = [
        f
        for (lang, f), v in arch.items()
        if lang == "en"
        and all(len(arch.get((lg, f), {})) == 2 for lg in ("en", "ja", "zh_CN"))
        and all(is_unspaced(arch[(lg, f)]["amd64"]) for lg in ("ja", "zh_CN"))
    ]

    def word_grams(t: str) -> set:
        w = t.split()
        return {" ".join(w[i : i + 5]) for i in range(max(1, len(w) - 4))}

    def char_grams(t: str, n: int) -> set:
        t = t.replace(" ", "")
        return {t[i : i + n] for i in range(max(1, len(t) - n + 1))}

    en = np.array(
        [jaccard(word_grams(arch[("en", f)]["amd64"]), word_grams(arch[("en", f)]["arm64"])) for f in files]
    )
    rows = []

    def near(lang: str, grams) -> tuple[str, float]:
        j = np.array(
            [jaccard(grams(arch[(lang, f)]["amd64"]), grams(arch[(lang, f)]["arm64"])) for f in files]
        )
        differ = j < 1.0
        return f"{int((j[differ] >= 0.7).sum())}/{int(differ.sum())}", round(float(np.abs(j - en).mean()), 3)

    en_near = near("en", word_grams)[0]
    print(f"English word 5-grams on the same {len(files)} page pairs: near-duplicates >= 0.7: {en_near}\n")
    shingles = [("word 5-grams (version 1)", word_grams)]
    shingles += [(f"char {n}-grams", lambda t, n=n: char_grams(t, n)) for n in ns]
    for name, grams in shingles:
        row: dict = {"shingles": name}
        for lang, key in (("ja", "ja"), ("zh", "zh_CN")):
            texts = unrelated[lang]
            sets = [set(grams(t)) for t in texts]
            js = np.array([jaccard(sets[a], sets[b]) for a in range(len(sets)) for b in range(a)])
            row[f"{lang} unrelated p99.9"] = round(float(np.quantile(js, 0.999)), 3)
            row[f"{lang} unrelated found"] = round(float(lsh_probability(js, BANDS, ROWS).sum()), 2)
            row[f"{lang} near-dups >= 0.7"], row[f"{lang} |J - J_en|"] = near(key, grams)
        rows.append(row)
    return rows


def bench_kernel_speed(english: list[str]) -> list[dict]:
    """Ours alone, best of 5 (process CPU time): English text, and Japanese and Chinese pages of the
    crawl (every crawl file, text extracted as the pipeline does), through ``signatures`` and through
    the kernel alone (text already in its byte form)."""
    from mpi_kernels.minhash import kernel_bytes
    from tests.dedup.crawl_pages import crawl_pages

    warcs = tuple(f"warc/{p.name}" for p in sorted((SHARED / "warc").glob("*.warc.gz")))
    pages = crawl_pages(SHARED, 200, min_chars=1, max_chars=10**9, max_html=10**6, warcs=warcs)
    ours = MinHasher(MinHashParams(num_perm=PERM, bands=BANDS, rows=ROWS))
    rows = []
    for name, texts in (
        ("English (Perl PODs)", english),
        ("Japanese + Chinese pages", pages["ja"] + pages["zh"]),
    ):
        mb = sum(len(t.encode()) for t in texts) / 1e6
        ours.signatures(texts[:2])  # compile (or load the numba cache) outside the timing
        encoded = [kernel_bytes(t) for t in texts]
        t_all = min(cpu(lambda texts=texts: ours.signatures(texts)) for _ in range(5))
        t_kernel = min(cpu(lambda encoded=encoded: ours._kernel(encoded)) for _ in range(5))
        rows.append(
            {
                "text": name,
                "docs": len(texts),
                "MB": round(mb, 2),
                "signatures_MB_per_s": round(mb / t_all, 1),
                "kernel_MB_per_s": round(mb / t_kernel, 1),
            }
        )
    return rows


# -- 2. S-curve ------------------------------------------------------------------------------------
def datasketch_minhashes(texts: list[str]):
    from datasketch import MinHash

    out = []
    for t in texts:
        m = MinHash(num_perm=PERM, seed=1)
        m.update_batch(shingles(t))
        out.append(m)
    return out


def bench_scurve(pairs_per_level: int = 200) -> list[dict]:
    from datasketch import MinHashLSH

    rnd = random.Random(0)
    m = MinHasher(MinHashParams(num_perm=PERM, bands=BANDS, rows=ROWS))
    rows = []
    for target in (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95):
        pairs = [planted_pair(rnd, 100, target, lambda t: set(shingles(t))) for _ in range(pairs_per_level)]
        ka = m.band_keys(m.signatures([p[0] for p in pairs]))
        kb = m.band_keys(m.signatures([p[1] for p in pairs]))
        ours = int((ka == kb).all(axis=2).any(axis=1).sum())
        ds_hits = 0
        for i, (x, y, _) in enumerate(pairs):
            lsh = MinHashLSH(num_perm=PERM, params=(BANDS, ROWS))
            mx, my = datasketch_minhashes([x, y])
            lsh.insert(f"x{i}", mx)
            ds_hits += bool(lsh.query(my))
        mean_j = float(np.mean([p[2] for p in pairs]))
        theory = float(np.mean([lsh_probability(p[2], BANDS, ROWS) for p in pairs]))
        rows.append(
            {
                "jaccard": round(mean_j, 3),
                "pairs": len(pairs),
                "theory": round(theory, 3),
                "ours": round(ours / len(pairs), 3),
                "datasketch": round(ds_hits / len(pairs), 3),
            }
        )
    return rows


# -- 3. precision / recall -------------------------------------------------------------------------
def quality_corpus(n_docs: int):
    rnd = random.Random(1)
    sections = perl_sections(SHARED)[: int(n_docs * 0.85)]
    docs = [make_doc(t, i) for i, t in enumerate(sections)]
    for k in range(n_docs - len(docs)):
        base = rnd.choice(sections)
        words = base.split()
        rate = rnd.uniform(0.0, 0.25)
        for i in rnd.sample(range(len(words)), int(len(words) * rate)):
            words[i] = f"edit{rnd.randrange(10**9)}"
        docs.append(make_doc(" ".join(words), 100_000 + k))
    return docs


def exact_pairs(docs, threshold: float) -> list[tuple[int, int]]:
    """Every pair with exact shingle-set Jaccard >= threshold (sparse all-pairs intersection counts)."""
    from scipy.sparse import csr_matrix

    vocab: dict[bytes, int] = {}
    indptr, indices = [0], []
    for d in docs:
        ids = sorted({vocab.setdefault(s, len(vocab)) for s in shingles(d.text)})
        indices.extend(ids)
        indptr.append(len(indices))
    x = csr_matrix((np.ones(len(indices), np.int32), indices, indptr), shape=(len(docs), len(vocab)))
    sizes = np.diff(x.indptr)
    inter = (x @ x.T).tocoo()
    out = []
    for i, j, c in zip(inter.row, inter.col, inter.data, strict=True):
        if i < j and c / (sizes[i] + sizes[j] - c) >= threshold:
            out.append((int(i), int(j)))
    return out


def removed_by_clusters(docs, pairs) -> set[int]:
    """Components of the pairs; everyone but the representative (corpus.dedup.order) is removed."""
    uf = UnionFind()
    for i, j in pairs:
        uf.union(i.to_bytes(4, "big"), j.to_bytes(4, "big"))
    groups: dict[bytes, list[int]] = {}
    for node in list(uf.parent):
        groups.setdefault(uf.find(node), []).append(int.from_bytes(node, "big"))
    removed = set()
    for members in groups.values():
        rep = min(members, key=lambda i: representative_key(docs[i]))
        removed.update(m for m in members if m != rep)
    return removed


def run_stage_removed(docs, config: str) -> tuple[set[int], float]:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_stage_dir(tmp / "in", docs, shards=4)
        cfg = tmp / "c.toml"
        cfg.write_text(f"[minhash_dedup]\n{config}\n")
        t = time.time()
        subprocess.run(
            [
                str(Path(sys.executable).parent / "mpiexec"),
                "-n",
                "1",
                sys.executable,
                "-m",
                "hpc_jobs.minhash_dedup",
                "--in",
                str(tmp / "in"),
                "--out",
                str(tmp / "out"),
                "--config",
                str(cfg),
            ],
            check=True,
            cwd=ROOT,
            capture_output=True,
        )
        wall = time.time() - t
        from tests.dedup.stage_io import kept_docs

        # every member stays a candidate; the ones labelled dup_of are what a version drops
        index = {d.url: i for i, d in enumerate(docs)}
        return {index[d.url] for d in kept_docs(tmp / "out") if d.dup_of}, wall


def bench_quality(n_docs: int) -> tuple[dict, list[dict]]:
    from datasketch import MinHashLSH

    docs = quality_corpus(n_docs)
    truth = removed_by_clusters(docs, exact_pairs(docs, THRESHOLD))
    results = {}
    results["ours (default: every cluster verified)"] = run_stage_removed(docs, "")[0]
    results["ours (LSH only, no verification)"] = run_stage_removed(
        docs, "verify_components_above = 1000000"
    )[0]
    mhs = datasketch_minhashes([d.text for d in docs])
    lsh = MinHashLSH(num_perm=PERM, params=(BANDS, ROWS))
    for i, m in enumerate(mhs):
        if not m.is_empty():
            lsh.insert(i, m)
    ds_pairs = [(i, j) for i, m in enumerate(mhs) if not m.is_empty() for j in lsh.query(m) if j > i]
    results["datasketch MinHashLSH"] = removed_by_clusters(docs, ds_pairs)
    rows = []
    truth_ids = Counter(docs[i].doc_id for i in truth)
    for name, removed in results.items():
        # copies with the same doc_id (same text and source) are interchangeable: count by doc_id
        tp = sum((Counter(docs[i].doc_id for i in removed) & truth_ids).values())
        rows.append(
            {
                "impl": name,
                "removed": len(removed),
                "true_removed": len(truth),
                "precision": round(tp / max(len(removed), 1), 4),
                "recall": round(tp / max(len(truth), 1), 4),
            }
        )
    return {"docs": len(docs), "threshold": THRESHOLD, "bands": BANDS, "rows": ROWS}, rows


def plot_scurve(rows: list[dict], path: Path) -> None:
    """The S-curve as a picture: theory 1-(1-s^r)^b, and the share of planted pairs each LSH found."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = np.linspace(0.3, 1.0, 200)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(s, lsh_probability(s, BANDS, ROWS), color="gray", label=f"1-(1-s^{ROWS})^{BANDS}")
    ax.plot([r["jaccard"] for r in rows], [r["ours"] for r in rows], "o", label="ours (mpi_kernels.minhash)")
    ax.plot([r["jaccard"] for r in rows], [r["datasketch"] for r in rows], "x", label="datasketch MinHashLSH")
    ax.set_xlabel("shingle Jaccard similarity of the planted pair")
    ax.set_ylabel("share of pairs sharing a band")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def table(rows: list[dict]) -> str:
    cols = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    line = "| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = [
        "| " + " | ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths, strict=True)) + " |" for r in rows
    ]
    return "\n".join([line, sep, *body])


def section(report: dict, key: str, title: str, run) -> None:
    """Print ``title`` as a heading, then the table of what ``run()`` returns, kept as ``report[key]``."""
    print(f"## {title}\n")
    report[key] = run()
    print(table(report[key]) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speed-mb", type=float, default=2.0, help="MB of text for the speed comparison")
    ap.add_argument("--quality-docs", type=int, default=3000)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path, help="write the S-curve as a PNG here")
    ap.add_argument("--scripts", action="store_true", help="only ours: English against Japanese and Chinese")
    a = ap.parse_args()
    texts, size = [], 0
    for pod in perl_pods(SHARED):
        texts.append(pod["text"])
        size += len(pod["text"].encode())
        if size >= a.speed_mb * 1e6:
            break
    report = {}
    if a.scripts:
        title = f"Our signature speed, one core, K={PERM}"
        section(report, "kernel_speed", title, lambda: bench_kernel_speed(texts))
        title = f"S-curve on graded edits of real Japanese and Chinese pages (b={BANDS}, r={ROWS})"
        section(report, "scurve_unspaced", title, bench_scurve_unspaced)
        title = "The n of character n-grams: unrelated pages and real near-duplicates"
        section(report, "char_ngram", title, bench_char_ngram)
        if a.json:
            a.json.write_text(json.dumps(report, indent=1))
        return
    title = f"Signature speed, one core, {size / 1e6:.1f} MB / {len(texts)} documents, K={PERM}"
    section(report, "speed", title, lambda: bench_speed(texts))
    section(report, "scurve", f"S-curve (b={BANDS}, r={ROWS}): share of planted pairs found", bench_scurve)
    if a.plot:
        plot_scurve(report["scurve"], a.plot)
    setup, rows = bench_quality(a.quality_docs)
    report["quality"] = {**setup, "rows": rows}
    print(f"## Removed set vs exact all-pairs Jaccard >= {THRESHOLD}, {setup['docs']} documents\n")
    print(table(rows) + "\n")
    if a.json:
        a.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
