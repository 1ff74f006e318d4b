"""Issue 13 item 4: what an incremental build costs against a full build of the same inputs.

Three real ``corpus build`` runs on the shared crawls, each in its own process under ``mpiexec``:

1. the base: ``crawl-2026-03-part*`` (a full build);
2. the delta against it: ``corpus build --base BASE --input crawl-2026-06``;
3. the full build of base + delta in one run (what the delta would cost without a base).

It prints one table: wall seconds of each, the incremental build's share of the full one, the peak
resident memory per rank of exact_dedup (``run_info.peak_rss_mb_by_rank`` of its manifest: with the base's
index probed in the delta, without one in the full builds), and what exact_dedup found in the base.

Then the equivalence check (issue 13 item 5): the documents the delta's default version selects (base and
new together) against those of the full build's default version, every difference listed with its cause
(:func:`classify_differences`, from the metadata tables and ``copies`` of both builds), a table of causes
and the whole list as JSON lines (``WORK/differences.jsonl``). ``--compare-only`` compares builds already
in ``WORK`` without building.

    python bench/bench_incremental.py [--ranks 2] [--work DIR] [--data ../shared/data] [--compare-only]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.docshard import iter_docs  # noqa: E402
from corpus.version import connect, open_version  # noqa: E402

#: the causes a difference between the two versions can have (``other`` must stay empty)
CAUSES = (
    "exact_dup_keep_first",
    "near_dup_not_probed",
    "near_dup_cluster_differs",
    "holdout_copy_not_tagged",
    "line_dedup_text_differs",
    "recrawl",
    "other",
)
#: what is read of each stored document
ROW_SQL = """
SELECT doc_id, url, source, tier, CAST(crawl_date AS VARCHAR) AS crawl_date, selected, shard,
       coalesce(derived_from, '') AS derived_from, dup_cluster_id, dup_cluster_size, {holdout} AS holdout_copy
FROM docs
"""
#: exact_dedup and minhash_dedup tag a copy of an eval-holdout page (a score column; a selection drops it)
HOLDOUT_COLUMNS = ("holdout_exact", "holdout_near")


def corpus_build(out: Path, inputs: list[Path], ranks: int, base: Path | None = None) -> float:
    """Wall seconds of one ``corpus build`` (its log beside the build directory)."""
    cmd = [
        sys.executable,
        "-m",
        "cli",
        "build",
        "--input",
        *map(str, inputs),
        "--out",
        str(out),
        "--ranks",
        str(ranks),
    ]
    cmd += ["--base", str(base)] if base is not None else []
    t0 = time.monotonic()
    with open(out.with_suffix(".log"), "w") as log:
        subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True)
    return time.monotonic() - t0


def exact_dedup_facts(build: Path) -> tuple[list[float], dict]:
    m = json.loads((build / "stages" / "exact_dedup" / "manifest.json").read_text())
    peaks = m["run_info"]["peak_rss_mb_by_rank"]
    return [peaks[r] for r in sorted(peaks, key=int)], m["extra"].get("index", {})


def version_rows(build: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The stored documents of a build's default version by doc_id (each with ``selected`` and ``base``:
    in a shard its candidates list from the base) and its exact copies (the copy's doc_id at exact_dedup ->
    its keeper's)."""
    version = open_version(build)
    inherited = {s.name for s in version.shards[: int(version.base.extra.get("base", {}).get("shards", 0))]}
    con = connect(version)
    present = {r[0] for r in con.execute("DESCRIBE docs").fetchall()}
    tags = [f"coalesce({c}, 0) > 0" for c in HOLDOUT_COLUMNS if c in present]
    cur = con.execute(ROW_SQL.format(holdout=" OR ".join(tags) or "FALSE"))
    names = [d[0] for d in cur.description]
    rows = {}
    for values in cur.fetchall():
        row = dict(zip(names, values, strict=True))
        row["base"] = row.pop("shard") in inherited
        rows[row["doc_id"]] = row
    has_copies = con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'copies'").fetchone()[0]
    copies = dict(con.execute("SELECT copy_doc_id, doc_id FROM copies").fetchall()) if has_copies else {}
    return rows, copies


def lineage(row: dict[str, Any]) -> set[str]:
    """The ids a stored document may have had at exact_dedup: its doc_id, or, when a later stage (line_dedup)
    changed its text, the id it was derived from (``derived_from`` names the id before the last change)."""
    return {row["doc_id"], row["derived_from"]} - {""}


def classify_differences(
    inc: dict[str, dict[str, Any]],
    full: dict[str, dict[str, Any]],
    inc_copies: dict[str, str],
    full_copies: dict[str, str],
) -> list[dict[str, Any]]:
    """Every document (doc_id and URL) one default version selects and the other does not, with its cause.
    ``inc`` / ``full``: the stored documents of the incremental build (base and delta) and of the full build
    by doc_id, as :func:`version_rows` reads them; ``*_copies``: a copy's doc_id at exact_dedup -> its
    keeper's. A document's counterpart is the other build's document of the same doc_id, else of the same
    URL and the same id at exact_dedup (:func:`lineage`). Causes:

    * ``exact_dup_keep_first``: the other build selects an exact copy of it instead (the same doc_id at
      another URL: one text, one source; or the keeper its ``copies`` name): the incremental build kept the
      base's copy (keep-first), the full build the copy its keeper order prefers;
    * ``line_dedup_text_differs``: the counterpart is selected but has another text: line_dedup removed
      other lines (it counts lines over the documents of one build);
    * ``near_dup_not_probed``: the counterpart is stored but not selected, a non-representative of a
      near-duplicate cluster that in the full build spans both crawls: the incremental build could not
      cluster the delta with the base (minhash_dedup does not probe the base band index);
    * ``near_dup_cluster_differs``: the same, in a cluster of one crawl: the cluster or its representative
      differs because line_dedup gave its members other texts (minhash_dedup shingles line_dedup's output);
    * ``holdout_copy_not_tagged``: the counterpart is stored but not selected, tagged there as a copy of an
      eval-holdout page (``holdout_exact`` / ``holdout_near``): the held-out page is in the other crawl, and
      the delta's dedup stages never see the base's held-out pages, so the incremental build does not tag it;
    * ``recrawl``: no counterpart; the other build selects another fetch of the URL (another crawl date);
    * ``other``: none of these (listed with what is known).
    """
    base_ids = set().union(*(lineage(r) for r in inc.values() if r["base"]))
    clusters: dict[str, list[dict[str, Any]]] = {}
    for r in full.values():
        if r["dup_cluster_id"]:
            clusters.setdefault(r["dup_cluster_id"], []).append(r)
    selected = {  # (doc_id, url): two exact copies of one source share a doc_id, not a URL
        "incremental": {(d, r["url"]) for d, r in inc.items() if r["selected"]},
        "full": {(d, r["url"]) for d, r in full.items() if r["selected"]},
    }
    sides = {"incremental": (inc, full, full_copies), "full": (full, inc, inc_copies)}
    out = []
    for side, (mine, other, other_copies) in sides.items():
        theirs = "full" if side == "incremental" else "incremental"
        by_url: dict[str, list[dict[str, Any]]] = {}
        by_lineage: dict[str, list[dict[str, Any]]] = {}
        for r in other.values():
            by_url.setdefault(r["url"], []).append(r)
            for i in lineage(r):
                by_lineage.setdefault(i, []).append(r)
        for doc_id, url in sorted(selected[side] - selected[theirs]):
            r = mine[doc_id]
            row = {
                "side": f"{side} only",
                "url": url,
                "doc_id": doc_id,
                "base": bool(lineage(r) & base_ids),
                "crawl_date": r["crawl_date"],
                "source": r["source"],
            }
            there = other.get(doc_id)
            if there is None:
                there = next((o for o in by_url.get(url, []) if lineage(o) & lineage(r)), None)
            keepers = {other_copies[i] for i in lineage(r) if i in other_copies}
            kept = [o for k in sorted(keepers) for o in by_lineage.get(k, []) if o["selected"]]
            if there is not None and there["url"] != url and there["selected"]:
                row |= {
                    "cause": "exact_dup_keep_first",
                    "kept_instead": [f"{there['doc_id']} {there['url']}"],
                }
            elif there is not None and there["selected"]:
                row |= {"cause": "line_dedup_text_differs", "other_doc_id": there["doc_id"]}
            elif there is not None and there["holdout_copy"] and not r["holdout_copy"]:
                row |= {"cause": "holdout_copy_not_tagged", "other_doc_id": there["doc_id"]}
            elif there is not None and max(there["dup_cluster_size"], r["dup_cluster_size"]) > 1:
                in_full = there if side == "incremental" else r
                members = clusters.get(in_full["dup_cluster_id"], [])
                crawls = {bool(lineage(m) & base_ids) for m in members}
                row |= {
                    "cause": "near_dup_not_probed" if len(crawls) == 2 else "near_dup_cluster_differs",
                    "other_doc_id": there["doc_id"],
                    "full_cluster": in_full["dup_cluster_id"],
                    "full_cluster_size": in_full["dup_cluster_size"],
                    "full_representative": [m["doc_id"] for m in members if m["selected"]],
                    "cluster_size_here": r["dup_cluster_size"],
                }
            elif there is not None:
                row |= {
                    "cause": "other",
                    "known": "stored by both builds, selected by one; in no near-duplicate cluster, no holdout tag",
                    "other_doc_id": there["doc_id"],
                }
            elif kept:
                row |= {
                    "cause": "exact_dup_keep_first",
                    "kept_instead": [f"{o['doc_id']} {o['url']}" for o in kept],
                }
            elif any(o["selected"] and o["crawl_date"] != r["crawl_date"] for o in by_url.get(url, [])):
                fetches = [o for o in by_url[url] if o["selected"]]
                row |= {
                    "cause": "recrawl",
                    "other_doc_id": [o["doc_id"] for o in fetches],
                    "other_crawl_date": sorted({o["crawl_date"] for o in fetches}),
                }
            else:
                row |= {
                    "cause": "other",
                    "known": "no counterpart in the other build"
                    + (f"; an exact copy of {sorted(keepers)} there, not selected" if keepers else ""),
                    "same_url_there": [o["doc_id"] for o in by_url.get(url, [])],
                }
            out.append(row)
    return out


def texts_of(builds: list[Path], doc_ids: set[str]) -> dict[str, str]:
    """The texts of ``doc_ids`` as the builds' decontaminate stage kept them (its outputs are the
    documents the candidates store)."""
    found: dict[str, str] = {}
    for build in builds:
        stage = build / "stages" / "decontaminate"
        for out in json.loads((stage / "manifest.json").read_text())["outputs"]:
            for doc in iter_docs(stage / out["path"]):
                if doc.doc_id in doc_ids:
                    found[doc.doc_id] = doc.text
    return found


def line_difference(a: str, b: str) -> tuple[int, int]:
    """Lines of ``a`` that ``b`` lacks, lines of ``b`` that ``a`` lacks (as multisets)."""
    la, lb = Counter(a.splitlines()), Counter(b.splitlines())
    return sum((la - lb).values()), sum((lb - la).values())


def equivalence(base: Path, delta: Path, full: Path, out: Path) -> None:
    """Compare the delta's default version with the full build's; every difference to ``out`` (JSONL)."""
    inc, inc_copies = version_rows(delta)
    full_rows, full_copies = version_rows(full)
    rows = classify_differences(inc, full_rows, inc_copies, full_copies)
    # a counterpart with another text: how many lines differ (line_dedup's doing, or a recrawl's)
    pairs = [r for r in rows if isinstance(r.get("other_doc_id"), str) and r["other_doc_id"] != r["doc_id"]]
    texts = texts_of([base, delta, full], {r["doc_id"] for r in pairs} | {r["other_doc_id"] for r in pairs})
    for r in pairs:
        mine, theirs = texts.get(r["doc_id"]), texts.get(r["other_doc_id"])
        if mine is not None and theirs is not None:
            r["lines_only_here"], r["lines_only_there"] = line_difference(mine, theirs)
    with open(out, "w") as f:
        for r in sorted(rows, key=lambda r: (r["cause"], r["url"], r["side"], r["doc_id"])):
            f.write(json.dumps(r, sort_keys=True) + "\n")
    inc_sel = sum(r["selected"] for r in inc.values())
    full_sel = sum(r["selected"] for r in full_rows.values())
    print(
        f"\nequivalence: the delta's default version selects {inc_sel:,}, the full build's {full_sel:,}; "
        f"{len(rows):,} differences (list: {out})\n"
    )
    table = Counter((r["cause"], r["side"]) for r in rows)
    print("| cause | incremental only | full only |")
    print("|---|---:|---:|")
    for cause in CAUSES:
        print(f"| {cause} | {table[cause, 'incremental only']} | {table[cause, 'full only']} |")
    for cause in CAUSES:
        texts_differ = [r for r in pairs if r["cause"] == cause and "lines_only_here" in r]
        if texts_differ:
            here = sum(r["lines_only_here"] for r in texts_differ)
            there = sum(r["lines_only_there"] for r in texts_differ)
            print(
                f"{cause}: {len(texts_differ)} documents whose counterpart has another text; {here:,} lines "
                f"only in theirs, {there:,} only in the counterpart's"
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_incremental"))
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--compare-only", action="store_true", help="only compare the builds already in --work")
    args = ap.parse_args()
    warc = args.data / "warc"
    march, june = sorted(warc.glob("crawl-2026-03-part*.warc.gz")), [warc / "crawl-2026-06.warc.gz"]
    args.work.mkdir(parents=True, exist_ok=True)
    base, delta, full = args.work / "base", args.work / "delta", args.work / "full"
    if args.compare_only:
        equivalence(base, delta, full, args.work / "differences.jsonl")
        return 0
    t_base = corpus_build(base, march, args.ranks)
    t_delta = corpus_build(delta, june, args.ranks, base=base)
    t_full = corpus_build(full, march + june, args.ranks)
    rows = [
        ("base (March, full build)", t_base, base),
        ("delta (June, --base)", t_delta, delta),
        ("March + June (full build)", t_full, full),
    ]
    print(f"ranks {args.ranks}; incremental / full = {t_delta / t_full:.1%}\n")
    print("| build | wall s | exact_dedup peak MB per rank | base keys found | copies tagged dup_of base |")
    print("|---|---:|---|---:|---:|")
    for name, seconds, build in rows:
        peaks, index = exact_dedup_facts(build)
        print(
            f"| {name} | {seconds:.1f} | {' / '.join(f'{p:.0f}' for p in peaks)} | "
            f"{index.get('base_keys', 0)} | {index.get('base_duplicates', 0)} |"
        )
    equivalence(base, delta, full, args.work / "differences.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
