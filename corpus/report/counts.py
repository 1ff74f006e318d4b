"""Per-stage yield counts of a build, as the JSON that ``corpus report --json`` prints."""

from __future__ import annotations

from typing import Any

from corpus.model import GroupCounts, StageManifest


def counts_json(c: GroupCounts) -> dict[str, Any]:
    d = c.to_dict()
    return {k: d[k] for k in ("in", "out", "filtered", "quarantined", "bytes_in", "bytes_out")}


def stage_counts(manifests: list[StageManifest]) -> dict[str, Any]:
    """``{stage: {in, out, filtered{reason}, quarantined{reason}, bytes…, by_source, by_lang}}``."""
    out: dict[str, Any] = {}
    for m in manifests:
        y = m.yield_counts()
        entry = counts_json(y.total())
        entry["by_source"] = {k: counts_json(v) for k, v in y.by(0).items()}
        entry["by_lang"] = {k: counts_json(v) for k, v in y.by(1).items()}
        out[m.stage] = entry
    return out


def funnel_table(manifests: list[StageManifest]) -> str:
    rows = [("stage", "in", "out", "kept %", "filtered", "quarantined")]
    for m in manifests:
        t = m.yield_counts().total()
        pct = f"{100 * t.docs_out / t.docs_in:.1f}" if t.docs_in else "-"
        rows.append(
            (
                m.stage,
                str(t.docs_in),
                str(t.docs_out),
                pct,
                str(sum(t.filtered.values())),
                str(sum(t.quarantined.values())),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    )
