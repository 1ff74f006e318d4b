"""The data card's numbers: everything ``corpus report`` shows, as one JSON-able dict.

Counts come from the stage manifests, never the shards; dedup clusters and quarantine samples from one
streaming pass over the stages that hold them (:mod:`corpus.report.scan`); a version's funnel and
distributions from its metadata table (:mod:`corpus.report.version_funnel`, :mod:`corpus.report.signals`),
a build without one's distributions from its stages. The sections with their own module (code, incremental,
quality model, holdout, ...) are gathered by it. A section whose data the build does not have is
listed under ``absent`` with the reason, and the card says so instead of failing. Where each number
comes from: docs/report.md ("Where each number comes from").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corpus.formats.docshard import ShardCorrupt
from corpus.model import GroupCounts, StageManifest
from corpus.model.facts import SnapshotFacts, StageFacts
from corpus.report import alarms
from corpus.report.build_view import BuildView
from corpus.report.code import code_section
from corpus.report.counts import stage_counts
from corpus.report.gate import gate_section
from corpus.report.holdout import holdout_copies, holdout_counts
from corpus.report.incremental import incremental_section
from corpus.report.quality_model import quality_model
from corpus.report.removed_lines import most_removed_lines
from corpus.report.representatives import representative_lengths
from corpus.report.scan import (
    Clusters,
    Distributions,
    holds_documents,
    quarantine_samples,
    scan_clusters,
    scan_documents,
    snapshot_tokens,
)
from corpus.report.signals import placed_thresholds, selection_thresholds, version_populations
from corpus.report.sketch import Sketch
from corpus.report.skipped import skipped_records
from corpus.report.version_funnel import recorded_selection, version_funnel
from corpus.version.open import Version
from corpus.version.query import connect

FORMAT = "corpus-report/1"
_ARTIFACT_JSON_LIMIT = 2 << 20


def pct(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 3) if whole else None


def funnel_row(stage: str, c: GroupCounts) -> dict[str, Any]:
    return {
        "stage": stage,
        "in": c.docs_in,
        "out": c.docs_out,
        "filtered": sum(c.filtered.values()),
        "quarantined": sum(c.quarantined.values()),
        "bytes_in": c.bytes_in,
        "bytes_out": c.bytes_out,
        "retention": pct(c.docs_out, c.docs_in),
        "bytes_retention": pct(c.bytes_out, c.bytes_in),
    }


def funnel(stages: list[StageManifest]) -> dict[str, Any]:
    """The yield funnel: every stage overall, and per source and per language."""
    total, by_source, by_lang = [], {}, {}
    for m in stages:
        y = m.yield_counts()
        total.append(funnel_row(m.stage, y.total()))
        for axis, table in ((0, by_source), (1, by_lang)):
            for key, c in y.by(axis).items():
                table.setdefault(key, []).append(funnel_row(m.stage, c))
    return {
        "total": total,
        "by_source": dict(sorted(by_source.items())),
        "by_lang": dict(sorted(by_lang.items())),
    }


def tokens(view: BuildView, lineage: bool = True) -> dict[str, Any] | None:
    """Tokens per mixture bucket (snapshot manifest) and, with ``lineage``, per language, source and
    tier (a pass over the snapshot's lineage and index files); else any ``tokens_by_<axis>`` a stage
    or the snapshot recorded."""
    tables: dict[str, dict[str, Any]] = {}
    if view.snapshot is not None and view.snapshot.shards:
        by_bucket: dict[str, dict[str, int]] = {}
        if view.version is not None:
            counts = [(s.bucket, docs, toks) for s, docs, toks in view.version.selected_counts()]
        else:
            counts = [(s.bucket, s.docs, s.tokens) for s in view.snapshot.shards]
        for bucket, docs, toks in counts:
            b = by_bucket.setdefault(bucket, {"tokens": 0, "docs": 0, "shards": 0})
            b["tokens"] += toks
            b["docs"] += docs
            b["shards"] += 1
        tables["bucket"] = dict(sorted(by_bucket.items()))
        if lineage and view.snapshot_dir is not None:
            tables |= snapshot_tokens(view.snapshot_dir, list(view.snapshot.shards), view.selected) or {}
    extras = [m.extra for m in view.stages] + ([view.snapshot.extra] if view.snapshot else [])
    for extra in extras:
        for key, value in extra.items():
            if key.startswith("tokens_by_") and isinstance(value, dict):
                tables.setdefault(key[len("tokens_by_") :], {str(k): v for k, v in sorted(value.items())})
    if not tables or not any(_token_total(t) for t in tables.values()):
        return None
    total = _token_total(tables.get("bucket", {})) or max(_token_total(t) for t in tables.values())
    return {"total": total, "by": tables}


def version_counts(view: BuildView) -> dict[str, Any] | None:
    """The reported version against the candidates it selects from: ids, documents and tokens."""
    if view.version is None:
        return None
    counts = list(view.version.selected_counts())
    return {
        "snapshot_id": view.version.snapshot_id,
        "candidates_id": view.version.base.snapshot_id,
        "selected_docs": sum(d for _, d, _ in counts),
        "stored_docs": sum(s.docs for s, _, _ in counts),
        "selected_tokens": sum(t for _, _, t in counts),
        "stored_tokens": sum(s.tokens for s, _, _ in counts),
        "tombstones": [
            {
                **t,
                "date": (view.version.manifest or {})
                .get("run_info", {})
                .get("tombstone_dates", {})
                .get(name),
            }
            for name, t in sorted(view.version.tombstones.items())
        ],
        "takedowns": [
            {"name": t["name"], "docs": len(t["doc_ids"]), "reason": t["reason"]}
            for t in view.version.takedowns
        ],
    }


def _token_total(table: dict[str, Any]) -> int:
    return sum(v["tokens"] if isinstance(v, dict) else v for v in table.values() if isinstance(v, dict | int))


def sketch_json(s: Sketch, log: bool = False, span: tuple[float, float] | None = None) -> dict[str, Any]:
    edges, counts = s.histogram(bins=40, log=log, lo=span[0] if span else None, hi=span[1] if span else None)
    return {
        **{k: _round(v) for k, v in s.summary().items()},
        "histogram": {"edges": [_round(e) for e in edges], "counts": counts, "log": log},
    }


def _round(v: Any) -> Any:
    return float(f"{v:.6g}") if isinstance(v, float) else v


def _span(sketches: list[Sketch]) -> tuple[float, float] | None:
    """One range for a quantity over every population, so their histograms share bins."""
    filled = [s for s in sketches if s.count]
    return (min(s.min for s in filled), max(s.max for s in filled)) if filled else None


def populations_json(pops: dict[str, Distributions]) -> dict[str, Any]:
    """Each population's distributions, histogrammed on bins shared across populations."""
    ds = list(pops.values())
    length_span = _span([d.length for d in ds])
    conf_span = _span([d.lang_confidence for d in ds])
    score_spans = {k: _span([d.scores[k] for d in ds if k in d.scores]) for d in ds for k in d.scores}
    return {
        name: {
            "stage": d.stage,
            "docs": d.docs,
            "length_chars": sketch_json(d.length, log=True, span=length_span),
            "lang_confidence": sketch_json(d.lang_confidence, span=conf_span)
            if d.lang_confidence.count
            else None,
            "scores": {k: sketch_json(v, span=score_spans[k]) for k, v in sorted(d.scores.items())},
            "languages": dict(sorted(d.languages.items(), key=lambda kv: (-kv[1], kv[0]))),
        }
        for name, d in pops.items()
    }


def clusters_json(c: Clusters, m: StageManifest) -> dict[str, Any]:
    t = m.yield_counts().total()
    sizes = c.sizes(t.docs_out)
    return {
        "removed": sum(t.filtered.values()),
        "removed_by_reason": dict(sorted(t.filtered.items())),
        "clusters": sum(n for size, n in sizes.items() if size > 1),
        "cluster_sizes": {str(k): v for k, v in sizes.items()},
        "largest": c.largest(),
        # what the stage itself recorded about its clusters, as it recorded it
        "recorded": {k: v for k, v in m.extra.items() if "cluster" in k or "by_size" in k},
    }


def representatives(view: BuildView) -> dict[str, Any] | None:
    """How often the version's cluster representatives are much longer than their clusters, read
    from the metadata table (None without a version, or for shards written before it)."""
    v = view.version
    if v is None or not v.live_shards or not all(s.metadata.is_file() for s in v.live_shards):
        return None
    return representative_lengths(connect(v))


def holdout(view: BuildView) -> dict[str, Any] | None:
    """The eval holdout: held out and stored (manifests), and the candidates copying a held-out page
    (the version's metadata table, when it has one); None when ingest recorded no holdout."""
    counts = holdout_counts(view.stage("ingest"), view.stage("extract"))
    if counts is None:
        return None
    v = view.version
    if v is not None and v.live_shards and all(s.metadata.is_file() for s in v.live_shards):
        counts["copies"] = holdout_copies(connect(v))
    return counts


def contamination(view: BuildView) -> dict[str, Any] | None:
    """The snapshot's per-benchmark contamination report, else what the decontaminate stage recorded."""
    if view.snapshot is not None and view.snapshot_dir is not None:
        art = SnapshotFacts.of(view.snapshot).contamination_report
        if art is not None and (view.snapshot_dir / art.path).is_file():
            report = json.loads((view.snapshot_dir / art.path).read_text())
            flagged = report.pop("flagged_docs", [])
            return {
                "source": f"snapshot {art.path}",
                "report": report,
                "flagged_docs": len(flagged),
                "flagged_sample": flagged[:10],
            }
    m = view.stage("decontaminate")
    if m is None:
        return None
    artifacts = {}
    for ref in m.side_outputs:
        kind = ref.path.split("/", 1)[0]
        path = view.stage_dir(m.stage) / ref.path
        if kind in ("filtered", "quarantine") or not ref.path.endswith(".json") or not path.is_file():
            continue
        if path.stat().st_size <= _ARTIFACT_JSON_LIMIT:
            try:
                artifacts[ref.path] = json.loads(path.read_text())
            except ValueError:
                continue
    t = m.yield_counts().total()
    return {
        "source": f"stage {m.stage} manifest",
        "report": {
            "docs_scanned": t.docs_in,
            "removed": dict(sorted(t.filtered.items())),
            **{k: v for k, v in m.extra.items() if not k.endswith("_hash")},
        },
        "artifacts": artifacts,
    }


def _population_before_policy(doc_stages: list[StageManifest]) -> StageManifest | None:
    """The annotated documents, before anything is dropped for quality: the annotate stage's output,
    else extraction's (text, not HTML), else the first stage that holds documents."""
    by_name = {m.stage: m for m in doc_stages}
    for name in ("annotate", "extract"):
        if name in by_name:
            return by_name[name]
    return doc_stages[0] if doc_stages else None


def _readable(absent: dict[str, str], section: str, scan, view: BuildView, m: StageManifest):
    """``scan(stage_dir, manifest)``, or None with the reason noted: a damaged or half-copied stage output
    costs its own section of the card, never the card."""
    try:
        return scan(view.stage_dir(m.stage), m)
    except (OSError, ShardCorrupt, ValueError, KeyError) as e:
        absent[section] = f"cannot read the {m.stage} stage's shards: {e}"
        return None


def version_with_table(view: BuildView) -> Version | None:
    """The reported version when it is one (not a build's own snapshot, which selects everything) and
    its live shards have their metadata tables: what the selection's funnel and histograms read."""
    v = view.version
    if v is None or v.manifest is None or not v.live_shards:
        return None
    return v if all(s.metadata.is_file() for s in v.live_shards) else None


def stage_populations(view: BuildView, absent: dict[str, str]) -> dict[str, Any]:
    """Without a version: the distributions of two stages' documents, *annotated* (before any policy)
    and *kept* (the last document stage), each stage's shards read once."""
    doc_stages = [m for m in view.stages if holds_documents(view.stage_dir(m.stage), m)]
    before = _population_before_policy(doc_stages)
    kept = doc_stages[-1] if doc_stages else None
    scanned: dict[str, Distributions] = {}  # a stage that is both populations is read once
    pops: dict[str, Distributions] = {}
    for name, m in (("annotated", before), ("kept", kept)):
        if m is not None and m.stage not in scanned:
            scanned[m.stage] = _readable(absent, f"distributions ({m.stage})", scan_documents, view, m)
        if m is not None and scanned[m.stage] is not None:
            pops[name] = scanned[m.stage]
    return populations_json(pops)


def gather(view: BuildView, history_path: Path | str | None = None) -> dict[str, Any]:
    """Every number of the data card. Reads manifests, and streams each stage's shards at most once."""
    absent: dict[str, str] = {}
    card: dict[str, Any] = {
        "format": FORMAT,
        "build": {
            "path": str(view.path),
            "build_dir": str(view.build_dir) if view.build_dir else None,
            "snapshot_id": view.snapshot_id,
            "version": version_counts(view),
            "seed": view.snapshot.seed if view.snapshot else view.build_config.get("seed"),
            "sources": view.sources(),
            "stages": [m.stage for m in view.stages],
            "stage_versions": view.stage_versions(),
            "tokenizer": view.snapshot.tokenizer if view.snapshot else {},
            "token_dtype": view.snapshot.token_dtype if view.snapshot else "",
            "shards": len(view.snapshot.shards) if view.snapshot else None,
            "build_config": view.build_config,
        },
    }
    if view.snapshot is None:
        absent["snapshot"] = "no snapshot/manifest.json: the build did not finish"
    if not view.stages:
        absent["stages"] = (
            "no stage manifests beside this snapshot: funnel, distributions and dedup need the build"
        )

    card["stages"] = stage_counts(view.stages)
    card["funnel"] = funnel(view.stages)
    card["filtered"] = {m.stage: dict(sorted(m.yield_counts().total().filtered.items())) for m in view.stages}
    card["skipped"] = {m.stage: s for m in view.stages if (s := skipped_records(m)) is not None}
    card["gate"] = gate_section(view.stages)

    card["tokens"] = tokens(view)
    if card["tokens"] is None:
        absent["tokens"] = "no stage has counted tokens yet (the snapshot's shards record 0 tokens)"

    version = version_with_table(view)
    card["version_funnel"] = version_funnel(version) if version else None
    if version is not None:
        dists = version_populations(connect(version))
        selection = recorded_selection(version.manifest["selection"])
        cutoffs = card["version_funnel"]["top_fraction_cutoffs"]
        card["thresholds"] = placed_thresholds(selection_thresholds(selection, cutoffs), dists)
    else:
        absent["version_funnel"] = "no version with a metadata table: the card shows the stages only"
        dists, card["thresholds"] = stage_populations(view, absent), {}
    card["distributions"] = dists
    if not dists:
        absent.setdefault("distributions", "no stage output holds documents")
    elif not any(p["scores"] for p in dists.values()):
        absent["scores"] = "no document carries scores (quality, heuristics) yet"
    if dists and not any(p["lang_confidence"] for p in dists.values()):
        absent["lang_confidence"] = "no document carries a language yet"
    dedup = {}
    for m in view.stages:
        if "dedup" in m.stage:
            clusters = _readable(absent, f"dedup ({m.stage})", scan_clusters, view, m)
            if clusters is not None:
                dedup[m.stage] = clusters_json(clusters, m)
    card["dedup"] = dedup
    if not any("dedup" in m.stage for m in view.stages):
        absent["dedup"] = "no dedup stage in this build"
    line_dedup = view.stage("line_dedup")
    card["removed_lines"] = (
        most_removed_lines(view.stage_dir("line_dedup"))
        if line_dedup and view.build_dir is not None
        else None
    )
    if card["removed_lines"] is None:
        absent["removed_lines"] = "no line_dedup stage kept its removed lines"
    card["representatives"] = representatives(view)
    if card["representatives"] is None:
        absent["representatives"] = "no near-duplicate cluster with one selected representative"

    card["quality_model"], why = quality_model(view)
    if card["quality_model"] is None:
        absent["quality_model"] = why

    card["holdout"] = holdout(view)
    if card["holdout"] is None:
        absent["holdout"] = "no ingest stage recorded an eval holdout"

    card["code"] = code_section(view)
    if card["code"] is None:
        absent["code"] = "ingest read no repository"

    card["incremental"] = incremental_section(view)

    card["contamination"] = contamination(view)
    if card["contamination"] is None:
        absent["contamination"] = "no decontaminate stage in this build"

    card["quarantine"] = {}
    for m in view.stages:
        t = m.yield_counts().total()
        if t.quarantined:
            samples = _readable(absent, f"quarantine samples ({m.stage})", quarantine_samples, view, m) or {}
            card["quarantine"][m.stage] = {
                r: {"count": n, "samples": samples.get(r, [])} for r, n in sorted(t.quarantined.items())
            }

    if view.stages:
        found, compared, path = alarms.assess(view, history_path)
        card["alarms"] = {
            "history": str(path),
            "compared_with": compared,
            "alarms": [a.to_dict() for a in found],
        }
    else:
        card["alarms"] = None
    # alarms a stage raised about its own output (e.g. minhash_dedup: a cluster far too large)
    card["stage_alarms"] = {
        m.stage: list(facts.alarms) for m in view.stages if (facts := StageFacts.of(m)).alarms
    }
    card["absent"] = absent
    return card
