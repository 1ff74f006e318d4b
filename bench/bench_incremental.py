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

**Generated mode** (``--generated N``): the shared crawls' delta is 57 % of their base, so the issue's
target (a delta of 10 % of the base in at most 25 % of the full build's time) cannot be judged on them.
This mode builds a corpus of real text made by ``bench.bench_scale`` (windows of real pages, planted exact
copies, near-duplicates and boilerplate: :func:`bench.bench_scale.generate`, written as JSONL shards by
:func:`bench.bench_scale.write_inputs`, sources and tiers from :func:`bench.bench_scale.build_config`):
``N + N/10`` documents generated **in one call with one seed**, then split: the first N of the generator's
shuffled order are the base, the other N/10 the delta (:func:`split_generated`). One call, because the
planted copies of a document are drawn among all originals of that call: after the split about 10/11 of the
delta's planted exact copies and near-duplicates copy a base document (or are copied by one), as in a new
crawl of the same web. A delta generated with another seed from the same pool would plant its copies among
its own originals only, and share with the base nothing but the accidental overlap of windows of one page:
exact_dedup would find almost nothing in the base, which is not what a delta looks like. Every document
keeps the URL and id of its position in the one call, so base and delta never collide.

Then three ``corpus build`` runs on the same ranks with the same config (``memory_budget_mb``,
``[dedup_index] partitions`` suggested for the full corpus by
:func:`corpus.formats.dedup_keys.suggest_partitions` unless given): the base, the delta with
``--base``, and base + delta as one full build (both input directories). It prints one table
(:func:`format_generated`) and writes it as JSON (``WORK/generated-N.json``): per build the wall seconds
of the whole ``corpus build``, each stage's seconds (from the stage manifests' ``run_info.finished_at``,
whole seconds: stage k's time is its finish minus stage k-1's, the first counted from the launch of the
build, so each includes its ``mpiexec`` launch), what follows the last stage (candidates, default version,
index commit job), the peak RSS per rank of exact_dedup and minhash_dedup, the ratio delta / full, and what
the delta's exact_dedup found in the base (its manifest's ``extra.index``) beside what was planted. The
exit status is 0 even when the target is missed.

    python bench/bench_incremental.py --generated 20000 [--repeat K] [--ranks 2] [--budget-mb 64]
        [--partitions P] [--work /tmp/bench_inc_gen] [--pool-cache DIR] [--seed 0]

``--repeat K`` builds K pairs of delta and full build, alternating their order (delta then full, full then
delta, ...), each into fresh directories: on a shared machine the load drifts over minutes, so the
verdict is on the median of the pairs' ratios (every pair is listed; the table shows the first).
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.formats.docshard import iter_docs  # noqa: E402
from corpus.version.open import open_version  # noqa: E402
from corpus.version.query import connect  # noqa: E402

#: the causes a difference between the two versions can have (``other`` must stay empty)
CAUSES = (
    "exact_dup_keep_first",
    "near_dup_keep_first",
    "near_dup_lsh_trusted",
    "near_dup_not_probed",
    "near_dup_cluster_differs",
    "near_dup_base_frozen",
    "holdout_copy_not_tagged",
    "line_dedup_base_frozen",
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


def build_args(
    inputs: list[Path], out: Path, ranks: int, base: Path | None = None, config: Path | None = None
) -> list[str]:
    """``corpus build``'s arguments: ``inputs`` into ``out`` on ``ranks`` ranks (on ``base``, with ``config``)."""
    args = ["build", "--input", *map(str, inputs), "--out", str(out), "--ranks", str(ranks)]
    args += ["--base", str(base)] if base is not None else []
    args += ["--config", str(config)] if config is not None else []
    return args


def corpus_build(
    out: Path, inputs: list[Path], ranks: int, base: Path | None = None, config: Path | None = None
) -> float:
    """Wall seconds of one ``corpus build`` (its log beside the build directory)."""
    cmd = [sys.executable, "-m", "cli", *build_args(inputs, out, ranks, base, config)]
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


def joined_base(row: dict[str, Any], base_ids: set[str]) -> bool:
    """Whether a document of the incremental build's delta joined a base cluster: its cluster id is a base
    document's (minhash_dedup tags a near copy of the base with the base cluster's id)."""
    return not row["base"] and row["dup_cluster_id"] in base_ids


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
    * ``line_dedup_base_frozen``: a base document whose counterpart is selected with another text: the full
      build's line_dedup removed lines that became frequent only with the delta's documents, and a base
      document keeps the text its own build gave it (append-only; the delta counts its lines over both);
    * ``line_dedup_text_differs``: the same for a delta document: line_dedup removed other lines (before
      line_dedup 5 kept line counts from build to build, it counted the delta's lines alone);
    * ``near_dup_keep_first``: a near-duplicate cluster that in the full build spans both crawls, whose
      representative there is the delta's document: in the incremental build the delta's document joined
      the base cluster (minhash_dedup probes the base's band index) and the base's document stays the one
      selected (keep-first);
    * ``near_dup_lsh_trusted``: the incremental build's delta document joined a base cluster (it shares a
      band key with a base document) with the text the full build has, while the full build's
      verification left it out of any cluster with a base document: a join left unverified (a base
      without a signature store: minhash_dedup before 9 trusted every LSH match to the base);
    * ``near_dup_not_probed``: the counterpart is stored but not selected, a non-representative of a
      near-duplicate cluster that in the full build spans both crawls, and the incremental build did not
      join it to the base cluster (a base without band records);
    * ``near_dup_cluster_differs``: the same, where the cluster or its representative differs because
      line_dedup gave its members other texts (minhash_dedup shingles line_dedup's output): a cluster of one
      crawl, or one across both crawls whose delta member has another text in the incremental build and
      shares no band key with the base there, or was joined to the base cluster on that text (verified
      on lines the full build removed);
    * ``near_dup_base_frozen``: a cluster across both crawls whose members of another text in the
      incremental build are all base documents: the base keeps the text its own build gave it
      (``line_dedup_base_frozen``), and the delta's member is not near enough to that text to join it;
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
    inc_by_url: dict[str, list[dict[str, Any]]] = {}
    for r in inc.values():
        inc_by_url.setdefault(r["url"], []).append(r)

    def in_incremental(m: dict[str, Any]) -> dict[str, Any] | None:
        """The incremental build's document of a full build's one: the same doc_id, else the same URL and
        the same id at exact_dedup."""
        return inc.get(m["doc_id"]) or next(
            (o for o in inc_by_url.get(m["url"], []) if lineage(o) & lineage(m)), None
        )

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
                cause = "line_dedup_base_frozen" if row["base"] else "line_dedup_text_differs"
                row |= {"cause": cause, "other_doc_id": there["doc_id"]}
            elif there is not None and there["holdout_copy"] and not r["holdout_copy"]:
                row |= {"cause": "holdout_copy_not_tagged", "other_doc_id": there["doc_id"]}
            elif there is not None and (
                max(there["dup_cluster_size"], r["dup_cluster_size"]) > 1
                or joined_base((r if side == "incremental" else there), base_ids)
            ):
                in_full = there if side == "incremental" else r
                in_inc = r if side == "incremental" else there
                members = clusters.get(in_full["dup_cluster_id"], [])
                crawls = {bool(lineage(m) & base_ids) for m in members}
                if len(crawls) == 2:  # the incremental build's documents of the full build's cluster
                    found = [c for m in members if (c := in_incremental(m)) is not None]
                    if any(joined_base(c, base_ids) for c in found):
                        cause = "near_dup_keep_first"
                    elif changed := [
                        m
                        for m in members
                        if (c := in_incremental(m)) is not None and c["doc_id"] != m["doc_id"]
                    ]:  # another text there: line_dedup counted otherwise, or kept a base text
                        frozen = all(lineage(m) & base_ids for m in changed)
                        cause = "near_dup_base_frozen" if frozen else "near_dup_cluster_differs"
                    else:
                        cause = "near_dup_not_probed"
                elif joined_base(in_inc, base_ids) and in_inc["doc_id"] == in_full["doc_id"]:
                    cause = "near_dup_lsh_trusted"
                else:  # a join verified on the text line_dedup made in the delta, or a cluster of one crawl
                    cause = "near_dup_cluster_differs"
                row |= {
                    "cause": cause,
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


# --- generated mode: a delta of N/10 against a base of N (issue 13 item 4) -------------------------------

#: the stages that probe the base's index in a delta (minhash_dedup: once the band index is wired)
PROBING_STAGES = ("exact_dedup", "minhash_dedup")
#: the issue's target: a delta of 10 % of the base in at most this share of the full build's time
TARGET_SHARE = 0.25
#: the three builds of the generated mode, in the order they run
GENERATED_BUILDS = (
    ("base", "base (full build)"),
    ("delta", "delta (`--base`)"),
    ("full", "base + delta (full build)"),
)


def split_generated(docs: list, n_base: int) -> tuple[list, list]:
    """The first ``n_base`` documents of one generator call (its shuffled order) as the base, the rest as
    the delta; each keeps its index (its URL and id), so the two never collide."""
    if not 0 < n_base < len(docs):
        raise ValueError(f"cannot split {len(docs)} documents into a base of {n_base} and a non-empty delta")
    return list(docs[:n_base]), list(docs[n_base:])


def planted_overlap(base: list, delta: list) -> dict[str, int]:
    """What the delta shares with the base, as planted (``GenDoc``\\ s of one generator call): delta
    documents with the text of a base document (exact_dedup with the base should tag each ``dup_of`` it,
    bar eval-holdout pages), and delta documents of a copy family (an original and its copies) with a
    member in the base whose text no base document has (near-duplicates of the base; minhash_dedup could
    cluster them with the base once it probes the band index)."""
    base_texts = {d.text for d in base}
    base_families = {d.of if d.of >= 0 else d.index for d in base}
    exact = [d for d in delta if d.text in base_texts]
    near = [
        d for d in delta if d.text not in base_texts and (d.of if d.of >= 0 else d.index) in base_families
    ]
    return {
        "base_documents": len(base),
        "delta_documents": len(delta),
        "delta_exact_of_base": len(exact),
        "delta_near_of_base": len(near),
        "delta_planted_copies": sum(d.kind != "original" for d in delta),
    }


def utc_seconds(stamp: str) -> float:
    """``run_info.finished_at`` (``2026-12-02T14:15:00Z``) as seconds since the epoch."""
    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))


def stage_seconds(started: float, finished: list[tuple[str, str]], ended: float) -> dict[str, float]:
    """Each stage's seconds from the finish times its manifests record (``finished``: (stage,
    ``finished_at``) in pipeline order; ``started`` / ``ended``: the build's launch and exit, epoch
    seconds): a stage's finish minus the one before (the first: minus the launch), then ``finish``, what
    the build did after its last stage. ``finished_at`` has whole seconds, so each is ±1 s."""
    out: dict[str, float] = {}
    prev = started
    for name, stamp in finished:
        t = utc_seconds(stamp)
        out[name] = round(max(0.0, t - prev), 1)
        prev = max(prev, t)
    out["finish"] = round(max(0.0, ended - prev), 1)
    return out


def read_manifests(build: Path) -> dict[str, dict[str, Any]]:
    """Every stage manifest of a build, by stage, in pipeline order."""
    from corpus.model.stages import PIPELINE

    return {name: json.loads((build / "stages" / name / "manifest.json").read_text()) for name in PIPELINE}


def build_facts(manifests: dict[str, dict[str, Any]], started: float, ended: float) -> dict[str, Any]:
    """One build as the generated table needs it, from its stage manifests (in pipeline order) and its
    launch and exit (epoch seconds)."""
    finished = [(name, m["run_info"]["finished_at"]) for name, m in manifests.items()]
    peaks = {}
    for name in PROBING_STAGES:
        by_rank = manifests[name]["run_info"].get("peak_rss_mb_by_rank", {})
        peaks[name] = [float(by_rank[r]) for r in sorted(by_rank, key=int)]
    first, last = next(iter(manifests.values())), list(manifests.values())[-1]
    exact = manifests.get("exact_dedup", {})
    return {
        "wall_s": round(ended - started, 1),
        "stages_s": stage_seconds(started, finished, ended),
        "peak_mb_by_rank": peaks,
        "budget_mb": exact.get("run_info", {}).get("memory_budget_mb"),
        "docs_in": first["totals"]["in"],
        "exact_dedup": {"in": exact["totals"]["in"], "out": exact["totals"]["out"]} if exact else {},
        "stored": last["totals"]["out"],
        "index": exact.get("extra", {}).get("index", {}),
    }


def _share(a: float, b: float) -> str:
    return f"{a / b:.1%}" if b > 0 else "-"


def format_generated(result: dict[str, Any]) -> str:
    """The generated mode's table (markdown): rows are the whole build, each stage, what follows the last
    stage, the probing stages' peak per rank and the documents; columns the three builds and delta / full."""
    b = result["builds"]
    names = [k for k, _ in GENERATED_BUILDS if k in b]
    head = "| | " + " | ".join(label for k, label in GENERATED_BUILDS if k in b) + " | delta / full |"
    lines = [head, "|---|" + "---:|" * (len(names) + 1)]

    def row(label: str, cells: list[str], ratio: str) -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")

    def ratio_of(get) -> str:
        return _share(get(b["delta"]), get(b["full"])) if "delta" in b and "full" in b else "-"

    row("documents in", [f"{b[k]['docs_in']:,}" for k in names], ratio_of(lambda f: f["docs_in"]))
    row(
        "**whole build, wall s**",
        [f"**{b[k]['wall_s']:.1f}**" for k in names],
        f"**{ratio_of(lambda f: f['wall_s'])}**",
    )
    stages = list(b[names[0]]["stages_s"])
    for stage in stages:
        label = (
            "after the last stage (candidates, version, index commit), s"
            if stage == "finish"
            else f"{stage}, s"
        )
        row(
            label,
            [f"{b[k]['stages_s'].get(stage, 0):.0f}" for k in names],
            ratio_of(lambda f, s=stage: f["stages_s"].get(s, 0)),
        )
    for stage in PROBING_STAGES:
        row(
            f"{stage} peak MB per rank",
            [" / ".join(f"{p:.0f}" for p in b[k]["peak_mb_by_rank"][stage]) for k in names],
            ratio_of(lambda f, s=stage: max(f["peak_mb_by_rank"][s], default=0)),
        )
    row(
        "exact_dedup in → out",
        [f"{b[k]['exact_dedup']['in']:,} → {b[k]['exact_dedup']['out']:,}" for k in names],
        ratio_of(lambda f: f["exact_dedup"]["out"]),
    )
    row(
        "documents stored (write_shards out)",
        [f"{b[k]['stored']:,}" for k in names],
        ratio_of(lambda f: f["stored"]),
    )
    p, idx = result["planted"], b.get("delta", {}).get("index", {})
    lines.append("")
    lines.append(
        f"N = {p['base_documents']:,} base + {p['delta_documents']:,} delta documents "
        f"({p['delta_documents'] / p['base_documents']:.0%}), {result['ranks']} ranks, memory_budget_mb = "
        f"{result['budget_mb']}, [dedup_index] partitions = {result['partitions']}; seed {result['seed']}."
    )
    lines.append(
        f"Planted: {p['delta_exact_of_base']:,} delta documents carry a base document's text, "
        f"{p['delta_near_of_base']:,} more are near-duplicates of a base document "
        f"({p['delta_planted_copies']:,} planted copies in the delta in all). The delta's exact_dedup found "
        f"{idx.get('base_keys', 0):,} of its keys in the base ({idx.get('base_records', 0):,} records, "
        f"{len(idx.get('base_generations', []))} generation(s)) and tagged {idx.get('base_duplicates', 0):,} "
        f"documents dup_of a base document; {idx.get('index_records', 0):,} new records."
    )
    pairs = result.get("pairs") or []
    if len(pairs) > 1:
        lines.append("Every pair of delta and full build (the table: the first), in the order built:")
        for i, p in enumerate(pairs):
            load = ", ".join(f"{k} {v[0]:.1f}" for k, v in p["load_avg"].items())
            lines.append(
                f"* pair {i + 1} ({' then '.join(p['order'])}): delta {p['delta_s']:.1f} s, full "
                f"{p['full_s']:.1f} s, {p['share']:.1%} (1-min load at the start: {load})"
            )
    if "delta" in b and "full" in b:
        share = b["delta"]["wall_s"] / b["full"]["wall_s"]
        if len(pairs) > 1:
            share = statistics.median(p["share"] for p in pairs)
        verdict = "met" if share <= TARGET_SHARE else "missed"
        which = f"the median of {len(pairs)} pairs" if len(pairs) > 1 else "whole builds"
        lines.append(f"Incremental / full = {share:.1%} ({which}): target ≤ {TARGET_SHARE:.0%} {verdict}.")
    loads = result.get("load_avg", {})
    if loads:
        lines.append(
            "Load average (1, 5, 15 min) at the start of each build: "
            + "; ".join(f"{k} {' '.join(f'{x:.2f}' for x in v)}" for k, v in loads.items())
            + "."
        )
    return "\n".join(lines)


def generated_main(args: argparse.Namespace) -> int:
    """Generate base and delta, build base, delta --base, base + delta, print and write the table."""
    from bench.bench_scale import (
        SHARED,
        Mix,
        build_config,
        generate,
        perl_pages,
        planted_summary,
        web_pages,
        write_inputs,
    )
    from corpus.formats.dedup_keys import suggest_partitions

    n_base = args.generated
    n_delta = max(1, round(n_base * args.delta_fraction))
    work = args.work or Path("/tmp/bench_inc_gen")
    work.mkdir(parents=True, exist_ok=True)
    mix = Mix()
    t0 = time.perf_counter()
    cache = args.pool_cache or work / "cache"
    pages = web_pages(SHARED, cache, mix.min_words) + perl_pages(SHARED)
    print(f"pool: {len(pages):,} real pages ({time.perf_counter() - t0:.0f} s)", flush=True)
    docs, _ = generate(pages, n_base + n_delta, args.seed, mix)
    base_docs, delta_docs = split_generated(docs, n_base)
    planted = planted_overlap(base_docs, delta_docs)
    # the whole corpus as bench_scale counts it; pool_coverage above ~1: windows of a page start to overlap
    used = sum(len(d.text.split()) for d in docs if d.kind == "original")
    corpus = planted_summary(docs) | {"pool_coverage": round(used / max(1, sum(p.words for p in pages)), 2)}
    print(f"generated: {json.dumps(corpus)}\nsplit: {json.dumps(planted)}", flush=True)
    inputs = {"base": work / f"input-{n_base}-base", "delta": work / f"input-{n_base}-delta"}
    for key, mine in (("base", base_docs), ("delta", delta_docs)):
        shutil.rmtree(inputs[key], ignore_errors=True)
        write_inputs(mine, inputs[key], mix.docs_per_shard)
    partitions = args.partitions or suggest_partitions(n_base + n_delta, ranks=args.ranks)
    config = work / f"config-{n_base}.json"
    config.write_text(
        json.dumps(
            build_config(args.budget_mb, args.seed) | {"dedup_index": {"partitions": partitions}}, indent=1
        )
    )
    builds = {key: work / f"{key}-{n_base}" for key, _ in GENERATED_BUILDS}
    runs = {
        "base": ([inputs["base"]], None),
        "delta": ([inputs["delta"]], builds["base"]),
        "full": ([inputs["base"], inputs["delta"]], None),
    }
    result: dict[str, Any] = {
        "n_base": n_base,
        "n_delta": n_delta,
        "ranks": args.ranks,
        "budget_mb": args.budget_mb,
        "partitions": partitions,
        "seed": args.seed,
        "planted": planted,
        "corpus": corpus,
        "load_avg": {},
        "builds": {},
    }

    def run(key: str, out: Path, loads: dict[str, list[float]]) -> dict[str, Any]:
        shutil.rmtree(out, ignore_errors=True)
        loads[key] = [round(x, 2) for x in os.getloadavg()]
        print(f"{time.strftime('%H:%M:%S')} building {out.name} (load {loads[key]}) ...", flush=True)
        ins, base = runs[key]
        started = time.time()
        corpus_build(out, ins, args.ranks, base=base, config=config)
        ended = time.time()
        print(f"  {out.name}: {ended - started:.1f} s", flush=True)
        return build_facts(read_manifests(out), started, ended)

    result["builds"]["base"] = run("base", builds["base"], result["load_avg"])
    # delta and full alternately (ABBA...), each pair into fresh directories: the load of a shared machine
    # drifts over minutes, so one pair alone can be far off
    pairs = []
    for i in range(max(1, args.repeat)):
        order = ("delta", "full") if i % 2 == 0 else ("full", "delta")
        loads: dict[str, list[float]] = {}
        got = {
            key: run(key, builds[key] if i == 0 else work / f"{key}-{n_base}-r{i}", loads) for key in order
        }
        pairs.append(
            {
                "order": list(order),
                "delta_s": got["delta"]["wall_s"],
                "full_s": got["full"]["wall_s"],
                "share": got["delta"]["wall_s"] / got["full"]["wall_s"],
                "load_avg": loads,
            }
        )
        if i == 0:
            result["builds"] |= got
            result["load_avg"] |= loads
        else:
            result.setdefault("repeat_builds", []).append(got)
    result["load_avg"]["end"] = [round(x, 2) for x in os.getloadavg()]
    result["pairs"] = pairs
    result["share"] = statistics.median(p["share"] for p in pairs)
    table = format_generated(result)
    path = work / f"generated-{n_base}.json"
    path.write_text(json.dumps(result | {"table": table}, indent=1))
    print(f"\n{table}\n\n(JSON: {path})")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument(
        "--work",
        type=Path,
        default=None,
        help="default /tmp/bench_incremental (/tmp/bench_inc_gen with --generated)",
    )
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--compare-only", action="store_true", help="only compare the builds already in --work")
    ap.add_argument("--generated", type=int, default=0, metavar="N", help="a generated base of N documents")
    ap.add_argument("--delta-fraction", type=float, default=0.1, help="--generated: the delta's size / N")
    ap.add_argument("--budget-mb", type=int, default=64, help="--generated: the builds' memory_budget_mb")
    ap.add_argument(
        "--partitions", type=int, default=0, help="--generated: [dedup_index] partitions (default: suggested)"
    )
    ap.add_argument("--seed", type=int, default=0, help="--generated: seeds the generator and the builds")
    ap.add_argument(
        "--repeat", type=int, default=1, help="--generated: pairs of delta and full builds, alternating order"
    )
    ap.add_argument(
        "--pool-cache", type=Path, default=None, help="--generated: the extracted pool's cache (WORK/cache)"
    )
    args = ap.parse_args()
    if args.generated:
        return generated_main(args)
    args.work = args.work or Path("/tmp/bench_incremental")
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
