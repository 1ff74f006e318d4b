"""The card's pictures: matplotlib figures rendered to self-contained SVG data URIs.

Each function takes plain numbers from the gathered card and returns a ``data:`` URI, so the HTML
needs no files beside it and no network to show its plots.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

KEPT, FILTERED, QUARANTINED = "#2b8a3e", "#e8590c", "#c92a2a"
BEFORE, AFTER = "#adb5bd", "#1c7ed6"
THRESHOLD = "#c92a2a"
PALETTE = ["#1c7ed6", "#e8590c", "#2b8a3e", "#7048e8", "#c2255c", "#0c8599", "#f08c00", "#5c940d", "#862e9c"]

plt.rcParams.update(
    {
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.titlesize": 10,
        "axes.titleweight": "bold",
        "svg.hashsalt": "corpus-report",  # stable element ids: the same card renders to the same bytes
    }
)


def to_data_uri(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def version_rows(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A version's funnel steps as funnel rows: what each rule had before it, kept and dropped."""
    rows = []
    for st in steps:
        before = st["left"] + st["removed"]
        rows.append(
            {
                "stage": f"− {st['key']}",
                "in": before,
                "out": st["left"],
                "filtered": st["removed"],
                "quarantined": 0,
                "retention": 100 * st["left"] / before if before else None,
            }
        )
    return rows


def funnel_plot(rows: list[dict[str, Any]], steps: list[dict[str, Any]] | None = None) -> str:
    """Documents per stage: what went on, what a filter dropped, what was quarantined; then, below a
    line, the version's rules one by one (``steps``): what each leaves and what it drops."""
    physical = len(rows)
    rows = rows + version_rows(steps or [])
    stages = [r["stage"] for r in rows][::-1]
    out = [r["out"] for r in rows][::-1]
    filt = [r["filtered"] for r in rows][::-1]
    quar = [r["quarantined"] for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.0))
    ax.barh(stages, out, color=KEPT, label="kept / selected")
    ax.barh(stages, filt, left=out, color=FILTERED, label="filtered / not selected")
    ax.barh(
        stages,
        quar,
        left=[o + f for o, f in zip(out, filt, strict=True)],
        color=QUARANTINED,
        label="quarantined",
    )
    for y, r in enumerate(rows[::-1]):
        if r["retention"] is not None:
            ax.text(r["in"], y, f"  {r['retention']:.1f}% kept", va="center", fontsize=8)
    if steps:
        ax.axhline(len(rows) - physical - 0.5, color="#495057", linewidth=1, linestyle="--")
    ax.set_xlabel("documents")
    ax.set_xlim(0, max([r["in"] for r in rows] + [1]) * 1.22)
    if steps:
        right = ax.get_xlim()[1]
        ax.text(right, len(rows) - physical - 0.5, "the version's rules ↓", ha="right", va="top", fontsize=8)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False, fontsize=8)
    title = (
        "Yield funnel: the stages, then the version's rules"
        if steps
        else "Yield funnel (documents per stage)"
    )
    ax.set_title(title, pad=22)
    return to_data_uri(fig)


def heatmap_plot(rows: list[str], columns: list[str], values: list[list[float | None]], title: str) -> str:
    """A percentage per (row, column), 0 red to 100 green, the number in each cell; a blank cell: no
    documents there (a language before language ID, a stage a source never reached)."""
    grid = np.array([[np.nan if v is None else v for v in r] for r in values], dtype=float).reshape(
        len(rows), len(columns)
    )
    fig, ax = plt.subplots(figsize=(min(1.0 + 0.75 * len(columns), 9.0), 0.28 * max(len(rows), 3) + 1.4))
    cmap = matplotlib.colormaps["RdYlGn"].copy()
    cmap.set_bad("#f1f3f5")
    ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=100, aspect="auto")
    for (i, j), v in np.ndenumerate(grid):
        if not np.isnan(v):
            ink = "white" if v >= 85 or v <= 15 else "black"  # legible on the dark ends of the scale
            ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=7, color=ink)
    ax.set_xticks(range(len(columns)), columns, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.tick_params(length=0)
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title(title)
    return to_data_uri(fig)


def bars_plot(values: dict[str, float], title: str, xlabel: str, color: str = AFTER) -> str:
    items = sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))[:30]
    fig, ax = plt.subplots(figsize=(7.5, 0.3 * len(items) + 1.0))
    ax.barh([k for k, _ in items][::-1], [v for _, v in items][::-1], color=color)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    return to_data_uri(fig)


def grouped_bars_plot(series: dict[str, dict[str, float]], title: str, xlabel: str) -> str:
    """Several populations over the same categories (e.g. languages before and after policy)."""
    cats = sorted(  # by the largest value, ties by name: never in the hash order of a set
        {c for s in series.values() for c in s}, key=lambda c: (-max(s.get(c, 0) for s in series.values()), c)
    )[:20]
    fig, ax = plt.subplots(figsize=(7.5, 0.38 * len(cats) * max(1, len(series)) / 1.5 + 1.0))
    h = 0.8 / max(1, len(series))
    colors = [BEFORE, AFTER] + PALETTE
    for i, (name, s) in enumerate(series.items()):
        ys = [j + i * h for j in range(len(cats))]
        ax.barh(ys, [s.get(c, 0) for c in cats], height=h, label=name, color=colors[i % len(colors)])
    ax.set_yticks([j + h * (len(series) - 1) / 2 for j in range(len(cats))], cats)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.legend(frameon=False, fontsize=8)
    ax.set_title(title)
    return to_data_uri(fig)


def histogram_plot(
    hists: dict[str, dict[str, Any]],
    title: str,
    xlabel: str,
    small: bool = False,
    thresholds: list[dict[str, Any]] | None = None,
) -> str:
    """Overlaid histograms of one quantity over several populations (candidates vs selected), and a
    dashed line at each threshold the version puts on it (an SVG element ``threshold-<i>``)."""
    fig, ax = plt.subplots(figsize=(3.6, 2.4) if small else (7.5, 2.8))
    colors = [BEFORE, AFTER] + PALETTE
    log = False
    if all(len(h["edges"]) <= 2 for h in hists.values()):  # one value only: a bar would fill the axes
        values = sorted({h["edges"][0] for h in hists.values() if h["edges"]})
        ax.text(
            0.5,
            0.5,
            "every document: " + ", ".join(f"{v:g}" for v in values),
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(title)
        return to_data_uri(fig)
    for i, (name, h) in enumerate(hists.items()):
        edges, counts = h["edges"], h["counts"]
        if not counts:
            continue
        log = log or h.get("log", False)
        ax.stairs(
            counts,
            edges,
            fill=i == 0,
            alpha=0.75 if i == 0 else 1.0,
            color=colors[i % len(colors)],
            linewidth=1.6,
            label=name,
        )
    if log:
        ax.set_xscale("log")
    _threshold_lines(ax, thresholds or [])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("documents")
    ax.legend(frameon=False, fontsize=7)
    ax.set_title(title)
    return to_data_uri(fig)


def _threshold_lines(ax, thresholds: list[dict[str, Any]]) -> None:
    """A dashed line per drawn threshold, one legend entry per rule (a top fraction draws one line per
    language)."""
    named: set[str] = set()
    for i, t in enumerate(x for x in thresholds if x.get("drawn")):
        line = ax.axvline(
            t["value"],
            color=THRESHOLD,
            linestyle="--" if t["bound"] == "min" else ":",
            linewidth=1.2,
            label=None if t["rule"] in named else f"{t['rule']} ({t['bound']})",
        )
        line.set_gid(f"threshold-{i}")
        named.add(t["rule"])


def cluster_sizes_plot(sizes: dict[str, int], title: str) -> str:
    """How many clusters of each size (log-log when sizes span decades): a lone huge cluster stands out at the right."""
    pts = sorted((int(k), v) for k, v in sizes.items())
    fig, ax = plt.subplots(figsize=(7.5, 2.6))
    ax.scatter([k for k, _ in pts], [v for _, v in pts], color=AFTER, s=18)
    ax.vlines([k for k, _ in pts], 0.8, [v for _, v in pts], color=AFTER, linewidth=1)
    if max(k for k, _ in pts) > 20:
        ax.set_xscale("log")
    else:
        ax.set_xticks([k for k, _ in pts])
    ax.set_yscale("log")
    ax.set_ylim(0.8, max([v for _, v in pts] + [1]) * 1.5)
    ax.set_xlabel("cluster size (documents)")
    ax.set_ylabel("clusters")
    ax.set_title(title)
    return to_data_uri(fig)
