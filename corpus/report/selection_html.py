"""The card's view of the selection: the version's funnel rule by rule (overall, per source, per
language) and every signal's histogram over the candidates and the selected documents, with the
version's thresholds drawn. Rendered from the gathered numbers alone (:mod:`corpus.report.gather`);
see docs/report.md ("The version's selection", "Distributions").
"""

from __future__ import annotations

from html import escape
from typing import Any

from corpus.report import plots
from corpus.report.widgets import html_table, img, note, number, percent


def _share(part: int, whole: int) -> str:
    return percent(100 * part / whole if whole else None)


def _group_table(title: str, groups: dict[str, Any], keys: list[str]) -> str:
    """Per group: stored, selected, and the drops of every step, largest groups first."""
    order = sorted(groups, key=lambda g: (-groups[g]["stored"], g))
    rows = [
        [escape(g), number(groups[g]["stored"]), number(groups[g]["selected"])]
        + [_share(groups[g]["selected"], groups[g]["stored"])]
        + [number(groups[g]["removed"].get(k, 0)) for k in keys]
        for g in order
    ]
    heads = [k.replace("/", "/\u200b") for k in keys]  # a long rule name may wrap at its slash
    return html_table([title, "stored", "selected", "selected share"] + heads, rows)


def version_funnel_html(card: dict[str, Any]) -> str:
    out = ["<h2>The version's selection</h2>"]
    f = card.get("version_funnel")
    if not f:
        return out[0] + note(card["absent"].get("version_funnel", "no version"))
    dropped = f["stored"] - f["selected"]
    out.append(
        f"<p>Of <b>{number(f['stored'])}</b> stored candidates the version selects <b>{number(f['selected'])}</b> "
        f"({_share(f['selected'], f['stored'])}). Each of the other {number(dropped)} is counted once, under the "
        "first rule that drops it, in the order the selection applies them: the steps add up to "
        f"{number(sum(s['removed'] for s in f['steps']))}.</p>"
    )
    rows = [
        [escape(s["rule"]), escape(s["reason"] or "–"), number(s["removed"]), number(s["left"])]
        + [_share(s["removed"], f["stored"])]
        for s in f["steps"]
    ]
    out.append(html_table(["rule", "reason", "dropped", "left", "share of stored"], rows, left=2))
    recorded = f["policy_reasons_recorded"]
    counted = {s["reason"]: s["removed"] for s in f["steps"] if s["rule"] == "policy"}
    if recorded and counted != recorded:
        out.append(
            note(
                "the policy's drops here differ from the version manifest's policy_reasons "
                f"({', '.join(f'{k} {v}' for k, v in recorded.items())}): shards tombstoned since"
            )
        )
    if f["unexplained"]:
        out.append(
            f'<p class="bad">{number(f["unexplained"])} document(s) where the recorded selection and the '
            "version's bitmaps disagree.</p>"
        )
    keys = [s["key"] for s in f["steps"] if s["rule"] not in ("tombstone",)]
    out.append("<h3>Per source</h3>" + _group_table("source", f["by_source"], keys))
    out.append("<h3>Per language</h3>" + _group_table("language", f["by_lang"], keys))
    return "".join(out)


def _summary_table(pops: dict[str, dict[str, Any]], pick) -> str:
    rows = []
    for name, p in pops.items():
        s = pick(p)
        if s:
            rows.append(
                [escape(f"{name} ({p['stage']})")]
                + [number(s.get(k)) for k in ("count", "min", "p05", "p50", "p95", "max", "mean")]
            )
    return (
        html_table(["population", "docs", "min", "p5", "median", "p95", "max", "mean"], rows) if rows else ""
    )


def _threshold_text(thresholds: list[dict[str, Any]]) -> str:
    """The bounds on a signal, as a line under its plot (those outside the data: not drawn)."""
    if not thresholds:
        return ""
    items = [
        f"{'≥' if t['bound'] == 'min' else '≤'} {number(t['value'])} ({t['rule']}, {t['scope']})"
        + ("" if t["drawn"] else ", outside the values")
        for t in thresholds
    ]
    return f'<p class="mono">thresholds: {escape("; ".join(items))}</p>'


def _signal_plot(card: dict[str, Any], col: str, hists: dict[str, Any], title: str, small: bool) -> str:
    thresholds = card.get("thresholds", {}).get(col, [])
    uri = plots.histogram_plot(hists, title, col, small=small, thresholds=thresholds)
    return f"<div>{img(uri, title)}{_threshold_text(thresholds)}</div>"


def _populations_note(pops: dict[str, Any]) -> str:
    if "candidates" in pops:
        return (
            "Full distributions over the stored candidates and over the documents the version selects, "
            "on shared bins; the version's thresholds are the dashed (minimum) and dotted (maximum) lines."
        )
    return (
        "Full distributions over the annotated documents (before any policy) and over the "
        "documents that reached the last document stage (kept): no version to compare with."
    )


def distributions_html(card: dict[str, Any]) -> str:
    pops = card["distributions"]
    out = ["<h2>Distributions</h2>"]
    if not pops:
        return out[0] + note(card["absent"].get("distributions", "no documents"))
    labels = {k: f"{k} ({p['stage']}, {p['docs']:,} docs)" for k, p in pops.items()}
    out.append(note(_populations_note(pops)))
    languages = {labels[k]: p["languages"] for k, p in pops.items()}
    out.append(img(plots.grouped_bars_plot(languages, "Documents per language", "documents"), "languages"))
    length = {"char_count": "characters", "text_bytes": "bytes of text"}.get(
        next(iter(pops.values())).get("length_column", "char_count"), "characters"
    )
    lengths = {labels[k]: p["length_chars"]["histogram"] for k, p in pops.items() if p["length_chars"]}
    out.append(
        img(plots.histogram_plot(lengths, "Document length", f"{length} (log scale)"), "document length")
    )
    out.append(_summary_table(pops, lambda p: p["length_chars"]))
    if any(p["lang_confidence"] for p in pops.values()):
        hists = {
            labels[k]: p["lang_confidence"]["histogram"] for k, p in pops.items() if p["lang_confidence"]
        }
        out.append(_signal_plot(card, "lang_confidence", hists, "Language-ID confidence", small=False))
        out.append(_summary_table(pops, lambda p: p["lang_confidence"]))
    else:
        out.append(note(card["absent"].get("lang_confidence", "no language confidence")))
    names = sorted({k for p in pops.values() for k in p["scores"]}, key=lambda k: (k != "quality", k))
    if not names:
        out.append(note(card["absent"].get("scores", "no scores")))
    if "quality" in names:
        hists = {
            labels[k]: p["scores"]["quality"]["histogram"]
            for k, p in pops.items()
            if "quality" in p["scores"]
        }
        out.append(_signal_plot(card, "quality", hists, "Quality score", small=False))
        out.append(_summary_table(pops, lambda p: p["scores"].get("quality")))
    # the signals a threshold is on first: the ones that decide what the version selects
    bounded = card.get("thresholds", {})
    others = sorted((n for n in names if n != "quality"), key=lambda n: (n not in bounded, n))
    if others:
        out.append('<h3>Heuristic scores</h3><div class="grid">')
        for n in others:
            hists = {labels[k]: p["scores"][n]["histogram"] for k, p in pops.items() if n in p["scores"]}
            out.append(_signal_plot(card, n, hists, n, small=True))
        out.append("</div>")
    return "".join(out)
