"""The data card's view of the extract gate: which pages two-pass extraction never extracted, and why.

A gate is a physical decision (a page it rejects never reaches trafilatura, annotate or a version), so
the card shows it in full: the gate as the stage ran it and its rejections per source, language (the
page's first-pass language) and reason. docs/report.md (item 8 of the card).
"""

from __future__ import annotations

from typing import Any

from corpus.model import StageManifest

#: the prefix of every reason the gate files a page under (``corpus.select.gate.gate_reason``)
GATE_PREFIX = "gate_"


def gate_section(stages: list[StageManifest]) -> dict[str, Any] | None:
    """``{extractor, gate, rows: [[source, lang, reason, documents], ...]}`` of the build's extract
    stage, rows by source, language and reason; None when no stage ran extract."""
    m = next((m for m in stages if m.stage == "extract"), None)
    if m is None:
        return None
    rows = [
        [source, lang, reason, n]
        for (source, lang), cell in sorted(m.yield_counts().groups.items())
        for reason, n in sorted(cell.filtered.items())
        if reason.startswith(GATE_PREFIX) and n
    ]
    return {
        "extractor": m.config.get("extractor", "trafilatura"),
        "gate": m.config.get("gate", ""),
        "rows": rows,
    }
