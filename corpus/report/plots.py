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

KEPT, FILTERED, QUARANTINED = "#2b8a3e", "#e8590c", "#c92a2a"
BEFORE, AFTER = "#adb5bd", "#1c7ed6"
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


def funnel_plot(rows: list[dict[str, Any]]) -> str:
    """Documents per stage: what went on, what a filter dropped, what was quarantined."""
    stages = [r["stage"] for r in rows][::-1]
    out = [r["out"] for r in rows][::-1]
    filt = [r["filtered"] for r in rows][::-1]
    quar = [r["quarantined"] for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.0))
    ax.barh(stages, out, color=KEPT, label="kept")
    ax.barh(stages, filt, left=out, color=FILTERED, label="filtered")
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
    ax.set_xlabel("documents")
    ax.set_xlim(0, max([r["in"] for r in rows] + [1]) * 1.22)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False, fontsize=8)
    ax.set_title("Yield funnel (documents per stage)", pad=22)
    return to_data_uri(fig)


def retention_by_group_plot(table: dict[str, list[dict[str, Any]]], stages: list[str], title: str) -> str:
    """Retention % at every stage, one line per source (or language): where one group falls off."""
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    x = list(range(len(stages)))
    for i, (group, rows) in enumerate(table.items()):
        by_stage = {r["stage"]: r["retention"] for r in rows}
        ys = [by_stage.get(s) for s in stages]
        ax.plot(
            x,
            [y if y is not None else float("nan") for y in ys],
            marker="o",
            label=group,
            color=PALETTE[i % len(PALETTE)],
        )
    ax.set_xticks(x, stages, rotation=20, ha="right")
    ax.set_ylabel("retention % (out / in)")
    ax.set_ylim(-3, 103)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(frameon=False, fontsize=8, ncol=min(4, max(1, len(table))), loc="lower left")
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


def histogram_plot(hists: dict[str, dict[str, Any]], title: str, xlabel: str, small: bool = False) -> str:
    """Overlaid histograms of one quantity over several populations (annotated vs kept)."""
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
    ax.set_xlabel(xlabel)
    ax.set_ylabel("documents")
    ax.legend(frameon=False, fontsize=7)
    ax.set_title(title)
    return to_data_uri(fig)


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
