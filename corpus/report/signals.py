"""Every signal of the metadata table over the version's candidates and its selected documents, on
shared bins, with the thresholds the version's selection puts on it.

Two populations, not two stages: the policy is a selection made when the version is made, so the build's
stages all hold the same documents; what differs is what the version selects. One DuckDB aggregate a
signal over the metadata table (never the text): exact quantiles, 40 bins over the candidates' range
(the length in equal ratios). Thresholds come from the selection the version records (policy checks,
score bounds, language confidence) and, for a top fraction, the lowest value each language keeps.
See docs/report.md ("Distributions").
"""

from __future__ import annotations

import math
from typing import Any

import duckdb

from corpus.formats.metadata import FIXED_COLUMNS
from corpus.select.policy import EVERY, PolicyConfig
from corpus.select.selection import Selection

BINS = 40
#: the length a histogram shows (characters of text; a table without it: bytes of text)
LENGTHS = ("char_count", "text_bytes")
POPULATIONS = {"candidates": "TRUE", "selected": "selected"}


def _round(v: Any) -> Any:
    return float(f"{v:.6g}") if isinstance(v, float) else v


def _scope_text(scope: str, p: PolicyConfig) -> str:
    """Which documents a policy check judges, in words."""
    tiers = f"tiers other than {', '.join(p.exempt_tiers)}" if p.exempt_tiers else "every tier"
    return {
        EVERY: "every document",
        "script": "languages checked for their script",
        "web": tiers,
        "web_spaced": f"{tiers}, languages written with spaces",
        "web_stop": f"{tiers}, languages with a stop-word list",
    }[scope]


def _bound(bound: str, value: float, rule: str, scope: str, lang: str | None = None) -> dict[str, Any]:
    return {"bound": bound, "value": _round(float(value)), "rule": rule, "scope": scope, "lang": lang}


def _policy_thresholds(p: PolicyConfig) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for c in p.checks:
        for bound, value in (("min", c.low), ("max", c.high)):
            if math.isfinite(value):
                out.setdefault(c.score, []).append(
                    _bound(bound, value, f"policy/{c.name}", _scope_text(c.scope, p))
                )
    scope = (
        f"tiers other than {', '.join(p.language_exempt_tiers)}" if p.language_exempt_tiers else "every tier"
    )
    conf = [_bound("min", p.min_lang_confidence, "policy/lang_confidence", scope)]
    conf += [
        _bound("min", v, "policy/lang_confidence", scope, lang)
        for lang, v in sorted(p.lang_confidence.items())
    ]
    out.setdefault("lang_confidence", []).extend(conf)
    return out


def selection_thresholds(
    s: Selection, cutoffs: dict[str, dict[str, float]]
) -> dict[str, list[dict[str, Any]]]:
    """Per column, every bound the selection puts on it (``cutoffs``: per top-fraction score, the
    lowest value each language keeps), in the order the selection judges them."""
    out = _policy_thresholds(s.policy) if s.policy is not None else {}
    for bound, glob, by_lang in (
        ("min", s.min_scores, s.min_scores_by_lang),
        ("max", s.max_scores, s.max_scores_by_lang),
    ):
        rule = f"{bound}_scores"
        for col, v in sorted(glob.items()):
            out.setdefault(col, []).append(_bound(bound, v, f"{rule}/{col}", "every document"))
        for lang, table in sorted(by_lang.items()):
            for col, v in sorted(table.items()):
                out.setdefault(col, []).append(_bound(bound, v, f"{rule}/{col}", f"language {lang}", lang))
    if s.min_lang_confidence is not None:
        out.setdefault("lang_confidence", []).append(
            _bound("min", s.min_lang_confidence, "min_lang_confidence", "every document")
        )
    for t in s.top_fraction:
        for lang, v in sorted(cutoffs.get(t.score, {}).items()):
            keep = t.by_lang.get(lang, t.keep)
            out.setdefault(t.score, []).append(
                _bound("min", v, f"top_fraction/{t.score}", f"the top {keep:.0%} of language {lang}", lang)
            )
    return out


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _edges(lo: float, hi: float, log: bool) -> list[float]:
    if hi <= lo:
        return [lo, lo]
    if log:
        a, b = math.log10(lo), math.log10(hi)
        return [10 ** (a + (b - a) * i / BINS) for i in range(BINS + 1)]
    return [lo + (hi - lo) * i / BINS for i in range(BINS + 1)]


def column_populations(con: duckdb.DuckDBPyConnection, col: str, log: bool = False) -> dict[str, Any] | None:
    """The column over each population of the table ``docs`` (a version's: it has ``selected``):
    count, min, p5, median, p95, max, mean and a histogram on bins shared by both (None: no value)."""
    x = f"greatest({_quoted(col)}::DOUBLE, 1.0)" if log else f"{_quoted(col)}::DOUBLE"
    valued = f"FROM docs WHERE {_quoted(col)} IS NOT NULL AND NOT isnan({_quoted(col)}::DOUBLE)"
    lo, hi = con.execute(f"SELECT min({x}), max({x}) {valued}").fetchone()
    if lo is None:
        return None
    edges = _edges(lo, hi, log)
    if len(edges) > 2:
        t, tlo, thi = (f"log10({x})", math.log10(lo), math.log10(hi)) if log else (x, lo, hi)
        binned = f"least(floor(({t} - ?) / ?)::BIGINT, {BINS - 1})"
        params: list[Any] = [tlo, (thi - tlo) / BINS]
    else:
        binned, params = "0", []
    out = {}
    for name, where in POPULATIONS.items():
        n, mn, q, mx, mean = con.execute(
            f"SELECT count(*), min({x}), quantile_cont({x}, [0.05, 0.5, 0.95]), max({x}), avg({x}) "
            f"{valued} AND {where}"
        ).fetchone()
        counts = [0] * (len(edges) - 1)
        for b, k in con.execute(
            f"SELECT {binned}, count(*) {valued} AND {where} GROUP BY 1", params
        ).fetchall():
            counts[int(b)] = int(k)
        summary = {"count": int(n)}
        if n:
            summary |= {"min": mn, "p05": q[0], "p50": q[1], "p95": q[2], "max": mx, "mean": mean}
        out[name] = {k: _round(v) for k, v in summary.items()} | {
            "histogram": {"edges": [_round(e) for e in edges], "counts": counts, "log": log}
        }
    return out


def score_columns(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The table's numeric columns that are signals (every score annotate stored), by name."""
    rows = con.execute("DESCRIBE docs").fetchall()
    return sorted(r[0] for r in rows if r[0] not in FIXED_COLUMNS and r[1] in ("DOUBLE", "FLOAT"))


def version_populations(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The card's two populations of a version, in the shape of the stage populations
    (:func:`corpus.report.gather.populations_json`): ``candidates`` (stored) and ``selected``."""
    have = {r[0] for r in con.execute("DESCRIBE docs").fetchall()}
    length = next(c for c in LENGTHS if c in have)
    cols = {c: column_populations(con, c) for c in score_columns(con) if c != length}
    lengths = column_populations(con, length, log=True)
    conf = column_populations(con, "lang_confidence")
    per_lang = {
        lang: (n, k)
        for lang, n, k in con.execute(
            "SELECT coalesce(nullif(lang, ''), 'und'), count(*), count(*) FILTER (WHERE selected) "
            "FROM docs GROUP BY 1"
        ).fetchall()
    }
    out = {}
    for i, (name, label) in enumerate((("candidates", "stored"), ("selected", "version"))):
        languages = sorted(((g, c[i]) for g, c in per_lang.items() if c[i]), key=lambda kv: (-kv[1], kv[0]))
        out[name] = {
            "stage": label,
            "docs": sum(n for _, n in languages),
            "length_chars": lengths[name] if lengths else None,
            "length_column": length,
            "lang_confidence": conf[name] if conf and conf[name]["count"] else None,
            "scores": {c: p[name] for c, p in cols.items() if p is not None and p[name]["count"]},
            "languages": dict(languages),
        }
    return out


def placed_thresholds(
    thresholds: dict[str, list[dict[str, Any]]], pops: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """The thresholds of the signals the card shows, each marked ``drawn`` when it falls inside the
    candidates' histogram (a bound outside every value, such as the 100,000 words of the policy's
    maximum, is listed under the plot instead)."""
    cand = pops.get("candidates") or {}
    hists = {"lang_confidence": cand.get("lang_confidence"), **cand.get("scores", {})}
    hists[cand.get("length_column") or ""] = cand.get("length_chars")
    out = {}
    for col, ts in sorted(thresholds.items()):
        edges = (hists.get(col) or {}).get("histogram", {}).get("edges", [])
        if edges:
            out[col] = [t | {"drawn": len(edges) > 2 and edges[0] <= t["value"] <= edges[-1]} for t in ts]
    return out
