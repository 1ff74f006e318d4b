"""The quality model on the data card: which model annotate ran, the languages it scores, its held-out
precision / recall / AUC per language (from the model's own card), and what it gave this build's
documents: per language, the score distribution, the documents it gave no score (a language it was
not trained for) and how many of each the version selects.

The model card is found beside the model annotate recorded (``[annotate] quality_model`` of the build
config, else the default model the project ships) and used only when its ``sha256`` is the hash
annotate recorded; the distribution comes from the version's metadata table (``quality`` is a null
for a document without a score).
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

import duckdb
import matplotlib

from corpus.model.facts import quality_model_hash
from corpus.report import plots
from corpus.report.widgets import html_table, img, mono, note, number
from corpus.signals.quality import CLASSES, DEFAULT_MODEL, card_path
from corpus.version.query import connect

#: the score histogram's bins: [0, 0.1), [0.1, 0.2), ... [0.9, 1.0]
BINS = 10


def model_card(recorded_hash: str, configured: str, build_dir: Path | None) -> tuple[dict | None, str]:
    """(the card of the model annotate ran, where it was found), or (None, why not)."""
    candidates = []
    if configured:
        p = Path(configured)
        candidates += [p] if p.is_absolute() or build_dir is None else [p, build_dir / p]
    else:
        candidates.append(DEFAULT_MODEL)
    for model in candidates:
        cp = card_path(model)
        if not cp.is_file():
            continue
        try:
            card = json.loads(cp.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if card.get("sha256") == recorded_hash:
            return card, "the shipped default model" if model == DEFAULT_MODEL else str(model)
    where = configured or "the default model"
    return None, f"no card of the model {recorded_hash} beside {where}"


def scores_by_language(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    """Over the table ``docs`` of ``con`` (corpus.version.query.connect), per language: documents, those with
    a quality score and without, quantiles and a 10-bin histogram of the score, and with a
    ``selected`` column how many of each the version selects."""
    columns = {r[0] for r in con.execute("DESCRIBE docs").fetchall()}
    quality = '"quality"' if "quality" in columns else "CAST(NULL AS DOUBLE)"
    chosen = "selected" if "selected" in columns else "NULL"
    rows = con.execute(
        f"""
        SELECT coalesce(nullif(lang, ''), 'und') AS lang,
               count(*) AS docs,
               count({quality}) AS scored,
               sum(CASE WHEN {chosen} THEN 1 ELSE 0 END) AS selected,
               sum(CASE WHEN {chosen} AND {quality} IS NULL THEN 1 ELSE 0 END) AS selected_unscored,
               quantile_cont({quality}, [0.1, 0.5, 0.9]) AS q,
               list(least(floor({quality} * {BINS}), {BINS - 1})::INTEGER) FILTER (WHERE {quality} IS NOT NULL)
        FROM docs GROUP BY 1 ORDER BY docs DESC, lang
        """
    ).fetchall()
    out = {}
    for lang, docs, scored, selected, selected_unscored, q, bins in rows:
        hist = [0] * BINS
        for b in bins or []:
            hist[b] += 1
        out[lang] = {
            "docs": docs,
            "scored": scored,
            "unscored": docs - scored,
            "selected": None if chosen == "NULL" else int(selected or 0),
            "selected_unscored": None if chosen == "NULL" else int(selected_unscored or 0),
            "p10": None if q is None else round(q[0], 4),
            "median": None if q is None else round(q[1], 4),
            "p90": None if q is None else round(q[2], 4),
            "histogram": hist,
        }
    return out


def quality_model(view) -> tuple[dict[str, Any] | None, str]:
    """The card's ``quality_model`` section of a :class:`corpus.report.build_view.BuildView` (None,
    with the reason, when no annotate stage recorded a model)."""
    m = view.stage("annotate")
    recorded = quality_model_hash(m) if m is not None else None
    if m is None or recorded is None:
        return None, "no annotate stage recorded a quality model"
    configured = (view.build_config.get("annotate") or {}).get("quality_model", "") or ""
    card, where = model_card(recorded, configured, view.build_dir)
    section: dict[str, Any] = {
        "model_hash": recorded,
        "model": m.config.get("quality_model") or "default",
        "card_found": where if card else None,
        "card_absent": None if card else where,
        "languages": card.get("languages") if card else None,
        "labels": card.get("labels") if card else None,
        "split": card.get("split") if card else None,
        "examples": {k: card.get("examples", {}).get(k) for k in ("train", "test", "left_out")}
        if card
        else None,
        "evaluation": card.get("evaluation") if card else None,
        "by_lang": None,
    }
    v = view.version
    if v is not None and v.live_shards and all(s.metadata.is_file() for s in v.live_shards):
        section["by_lang"] = scores_by_language(connect(v))
    return section, ""


def quality_html(card: dict[str, Any]) -> str:
    """The card's "Quality model" section."""
    out = ["<h2>Quality model</h2>"]
    q = card.get("quality_model")
    if not q:
        return out[0] + note(card.get("absent", {}).get("quality_model", "no quality model"))
    langs = q["languages"]
    scored = "every language (its card names none)" if langs is None else ", ".join(langs)
    out.append(
        f"<p>Model {mono(q['model'])} {mono(q['model_hash'], 24)}; scores {'–' if not q['card_found'] else scored}. "
        "A document in any other language has no quality score (a null, never a 0): the policy's "
        "<code>quality</code> check and selections on <code>quality</code> decide what that means.</p>"
    )
    ev = q.get("evaluation")
    if ev:
        rule = (q.get("labels") or {}).get("rule")
        if rule:
            out.append(note("Labels: " + rule))
        split = q.get("split") or {}
        out.append(
            note(
                f"Held out: {split.get('test_percent', '?')}% of split groups (translations, architecture "
                f"copies and near copies of a page share a group), never trained on. hq is called at "
                f"score ≥ {ev['threshold']}; 'lq below' is the share of held-out lq scored under it."
            )
        )
        train = (q.get("examples") or {}).get("train") or {}
        rows = []
        for lang, m in [*ev["by_lang"].items(), ("all", ev["all"])]:
            tr = train.get(lang) or {c: sum(x[c] for x in train.values()) for c in CLASSES}
            rows.append(
                [
                    escape(lang),
                    f"{number(tr['hq'])} / {number(tr['lq'])}",
                    f"{number(m['hq'])} / {number(m['lq'])}",
                ]
                + [_f3(m.get(k)) for k in ("precision", "recall", "lq_recall", "auc")]
            )
        out.append(
            html_table(
                ["language", "train hq / lq", "held-out hq / lq", "precision", "recall", "lq below", "AUC"],
                rows,
            )
        )
        left = (q.get("examples") or {}).get("left_out") or {}
        if left:
            out.append(
                note(
                    "Too few labelled examples, so no score: "
                    + ", ".join(f"{k} ({number(v)} examples)" for k, v in left.items())
                )
            )
    else:
        out.append(note(q.get("card_absent") or "the model's card has no held-out evaluation"))
    by_lang = q.get("by_lang")
    if not by_lang:
        return "".join(out) + note("no metadata table: the score distribution per language is not shown")
    by_lang = dict(sorted(by_lang.items(), key=lambda kv: (-kv[1]["docs"], kv[0])))
    out.append(img(plots_by_language(plots, by_lang), "quality score by language"))
    rows = [
        [escape(lang), number(d["docs"]), number(d["scored"]), number(d["unscored"])]
        + [_f3(d[k]) for k in ("p10", "median", "p90")]
        + [number(d[k]) for k in ("selected", "selected_unscored")]
        for lang, d in by_lang.items()
    ]
    out.append(
        html_table(
            [
                "language",
                "documents",
                "scored",
                "no score",
                "p10",
                "median",
                "p90",
                "selected",
                "selected, no score",
            ],
            rows,
        )
    )
    return "".join(out)


def _f3(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def plots_by_language(plots, by_lang: dict[str, dict[str, Any]], top: int = 20) -> str:
    """Each language's documents (the ``top`` first, in the order given) as one bar of shares: the ten
    score bins (red = low, green = high) and, grey and hatched, the documents without a score."""

    langs = list(by_lang)[:top][::-1]
    fig, ax = plots.plt.subplots(figsize=(7.5, 0.32 * len(langs) + 1.3))
    cmap = matplotlib.colormaps["RdYlGn"]
    for y, lang in enumerate(langs):
        d = by_lang[lang]
        left = 0.0
        for b, n in enumerate(d["histogram"]):
            w = n / d["docs"]
            ax.barh(y, w, left=left, color=cmap((b + 0.5) / BINS), height=0.8)
            left += w
        ax.barh(y, d["unscored"] / d["docs"], left=left, color="#ced4da", height=0.8, hatch="//")
    ax.set_yticks(range(len(langs)), [f"{lang} ({by_lang[lang]['docs']:,})" for lang in langs])
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the language's documents (green: score near 1, red: near 0, grey: no score)")
    ax.set_title("Quality score by language")
    return plots.to_data_uri(fig)
