"""The data card written: its numbers gathered, rendered to HTML and JSON side by side, and the alarm
lines a person reads in the log. ``corpus report`` and the build's finalize step both write it here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corpus.formats.docshard import atomic_write_bytes
from corpus.report.build_view import BuildView
from corpus.report.gather import gather
from corpus.report.html import render_html
from corpus.report.training_log import training_log_section


def write_card(
    view: BuildView, out: Path, history: Path | None, training_logs: list[Path] | None = None
) -> dict[str, Any]:
    """Gather the card of ``view``, write ``out`` (HTML) and ``out`` with ``.json`` beside it; the card."""
    card = gather(view, history)
    if training_logs:
        card["training_log"] = training_log_section(training_logs)
    atomic_write_bytes(out.with_suffix(".json"), (json.dumps(card, indent=1, sort_keys=True) + "\n").encode())
    atomic_write_bytes(out, render_html(card).encode())
    return card


def alarm_lines(card: dict[str, Any]) -> list[str]:
    """The card's stage and yield alarms, one log line each."""
    lines = [f"STAGE ALARM: {stage}: {a}" for stage, alarms in card["stage_alarms"].items() for a in alarms]
    return lines + [f"YIELD ALARM: {a['message']}" for a in (card["alarms"] or {}).get("alarms", [])]
