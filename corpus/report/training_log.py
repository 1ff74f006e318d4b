"""The data card's "realized vs target per phase": what a training run actually took from each bucket.

``corpus recipe-audit`` says before a run what its mixture will be; the training log says what it was.
This reads the lines ``examples/train.py`` writes (the online counter's reports, the step lines, the
``--dump-tokens`` JSON records) and ignores every other, so a whole job log can be given. Per phase the
realized share comes from the most complete record given (dumped steps, else the last counter report,
else the sampled step lines); the target is the counter's. See docs/report.md ("The training log").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from html import escape
from pathlib import Path
from typing import Any

from corpus.model.errors import UserError
from corpus.report.plots import PALETTE, plt, to_data_uri

_REPORT = re.compile(r"mixture at step (\d+), phase (\S+): realized (\{.*?\}) target (\{.*?\})\s*$")
_STEP = re.compile(r"\[rank (\d+)/\d+\] step (\d+) phase (\S+) loss \S+ tokens (\{.*?\})\s*$")
#: the loader's own line (loader.metrics.metrics_line): read latency, bytes read, cache hits, stalls
_METRICS = re.compile(r"\[rank (\d+)/\d+\] loader metrics at step (\d+): (\{.*\})\s*$")


def _phase(name: str | None) -> str:
    return "-" if name in (None, "None") else str(name)


def parse_training_log(paths: Iterable[str | Path]) -> dict[str, Any]:
    """The counter reports and step records of training log files (see the module docstring)."""
    reports: list[dict[str, Any]] = []
    # (file, rank, step) -> phase and tokens, so a step of a rank counts once; every step / every tenth
    dumped: dict[tuple[str, int, int], dict[str, Any]] = {}
    steps: dict[tuple[str, int, int], dict[str, Any]] = {}
    loader: dict[tuple[str, int], dict[str, Any]] = {}  # (file, rank) -> its latest metrics line
    names = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise UserError(f"--training-log {path}: no such file")
        names.append(str(path))
        for line in path.read_text(errors="replace").splitlines():
            if m := _REPORT.search(line):
                reports.append(
                    {
                        "step": int(m[1]),
                        "phase": _phase(m[2]),
                        "realized": json.loads(m[3]),
                        "target": json.loads(m[4]),
                    }
                )
            elif m := _METRICS.search(line):
                key = (str(path), int(m[1]))
                if int(m[2]) >= loader.get(key, {}).get("step", -1):
                    loader[key] = {**json.loads(m[3]), "rank": int(m[1]), "step": int(m[2])}
            elif m := _STEP.search(line):
                steps[(str(path), int(m[1]), int(m[2]))] = {"phase": _phase(m[3]), "tokens": json.loads(m[4])}
            elif line.startswith("{") and '"tokens"' in line:
                rec = json.loads(line)
                dumped[(str(path), 0, int(rec["step"]))] = {
                    "phase": _phase(rec.get("phase")),
                    "tokens": rec["tokens"],
                }
    if not reports and not steps and not dumped and not loader:
        raise UserError(
            f"--training-log {', '.join(names)}: no mixture reports or step lines of examples/train.py"
        )

    def listed(records: dict) -> list[dict[str, Any]]:
        return [{"step": k[2], **v} for k, v in sorted(records.items(), key=lambda kv: kv[0][2])]

    return {
        "reports": sorted(reports, key=lambda r: r["step"]),
        "steps": listed(steps),
        "dumped": listed(dumped),
        "loader": [loader[k] for k in sorted(loader)],
    }


def realized_vs_target(log: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per phase, in the order the run reached them: its steps, where the realized shares come
    from, and per bucket target, realized and the difference (None where the log has no target)."""
    order: list[str] = []
    for rec in sorted(log["reports"] + log["steps"] + log["dumped"], key=lambda r: r["step"]):
        if rec["phase"] not in order:
            order.append(rec["phase"])
    out = []
    for phase in order:
        reports = [r for r in log["reports"] if r["phase"] == phase]
        dumped = [s for s in log["dumped"] if s["phase"] == phase]
        steps = dumped or [s for s in log["steps"] if s["phase"] == phase]
        tokens: dict[str, int] = {}
        for s in steps:
            for b, n in s["tokens"].items():
                tokens[b] = tokens.get(b, 0) + int(n)
        logged = sum(tokens.values())
        if reports and not dumped:
            realized, source = reports[-1]["realized"], f"counter report at step {reports[-1]['step']}"
        else:
            realized = {b: n / logged for b, n in tokens.items()} if logged else {}
            source = f"{len(steps)} {'dumped' if dumped else 'logged'} steps"
        target = reports[-1]["target"] if reports else {}
        buckets = sorted(set(realized) | set(target) | set(tokens))
        every = [r["step"] for r in reports] + [s["step"] for s in steps]
        out.append(
            {
                "phase": phase,
                "first_step": min(every),
                "last_step": max(every),
                "source": source,
                "buckets": [
                    {
                        "bucket": b,
                        "target": target.get(b, 0.0) if target else None,
                        "realized": realized.get(b, 0.0),
                        "diff": realized.get(b, 0.0) - target.get(b, 0.0) if target else None,
                        "logged_tokens": tokens.get(b, 0),
                    }
                    for b in buckets
                ],
            }
        )
    return out


def training_log_section(paths: Iterable[str | Path]) -> dict[str, Any]:
    """The card's ``training_log`` entry: the files, the per-phase table and the counter's reports."""
    paths = [str(p) for p in paths]
    log = parse_training_log(paths)
    return {
        "files": paths,
        "phases": realized_vs_target(log),
        "reports": log["reports"],
        "loader": log["loader"],
    }


def share_plot(reports: list[dict[str, Any]]) -> str:
    """Realized share per bucket at every counter report (solid, dots), each phase's target dashed."""
    buckets = sorted({b for r in reports for b in (*r["realized"], *r["target"])})
    color = {b: PALETTE[i % len(PALETTE)] for i, b in enumerate(buckets)}
    fig, ax = plt.subplots(figsize=(8, 3.2))
    spans: list[tuple[str, int, int]] = []
    for r in reports:
        if spans and spans[-1][0] == r["phase"]:
            spans[-1] = (r["phase"], spans[-1][1], r["step"])
        else:
            spans.append((r["phase"], r["step"], r["step"]))
    labelled: set[str] = set()
    for phase, lo, hi in spans:
        rs = [r for r in reports if r["phase"] == phase and lo <= r["step"] <= hi]
        for b in buckets:
            if b not in rs[-1]["target"] and not any(r["realized"].get(b) for r in rs):
                continue  # not in this phase
            ax.plot(
                [r["step"] for r in rs],
                [r["realized"].get(b, 0.0) for r in rs],
                "o-",
                ms=3,
                color=color[b],
                label=None if b in labelled else b,
            )
            labelled.add(b)
            if b in rs[-1]["target"]:
                ax.hlines(rs[-1]["target"][b], lo, hi, colors=color[b], linestyles="dashed", linewidth=1)
        ax.axvline(lo, color="#adb5bd", linewidth=0.8)
        ax.text(
            lo, 1.0, f" {phase}", va="top", fontsize=8, color="#495057", transform=ax.get_xaxis_transform()
        )
    ax.set_xlabel("step")
    ax.set_ylabel("token share")
    ax.set_title("Realized share per bucket (dashed: target)")
    ax.legend(loc="center left", bbox_to_anchor=(1, 0.5), frameon=False)
    return to_data_uri(fig)


def _share(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def training_log_html(card: dict[str, Any]) -> str:
    """The section, or nothing when the card was made without ``--training-log``."""
    section = card.get("training_log")
    if not section:
        return ""
    out = [
        "<h2>Training mixture: realized vs target per phase</h2>",
        f'<p class="mono">{escape(", ".join(section["files"]))}</p>',
    ]
    if section["reports"]:
        out.append(f'<img src="{share_plot(section["reports"])}" alt="realized share per bucket over steps">')
    for ph in section["phases"]:
        out.append(
            f"<h3>phase {escape(ph['phase'])}: steps {ph['first_step']}..{ph['last_step']} "
            f"({escape(ph['source'])})</h3>"
        )
        rows = "".join(
            f"<tr><td>{escape(b['bucket'])}</td><td>{_share(b['target'], '.4f')}</td><td>{b['realized']:.4f}</td>"
            f"<td>{_share(b['diff'], '+.4f')}</td><td>{b['logged_tokens']:,}</td></tr>"
            for b in ph["buckets"]
        )
        out.append(
            "<table><tr><th>bucket</th><th>target</th><th>realized</th><th>diff</th>"
            f"<th>tokens in logged steps</th></tr>{rows}</table>"
        )
    return "".join(out) + loader_html(section.get("loader", []))


def loader_html(ranks: list[dict[str, Any]]) -> str:
    """Each rank's last loader metrics line: what reading cost it (docs/loader.md, "Metrics")."""
    if not ranks:
        return ""
    rows = "".join(
        f"<tr><td>{r['rank']}</td><td>{r['step']}</td>"
        f"<td>{r['read_latency_ms']['p50']:.2f} / {r['read_latency_ms']['p99']:.2f}</td>"
        f"<td>{r['step_wait_ms']['p50']:.2f} / {r['step_wait_ms']['p99']:.2f}</td>"
        f"<td>{r['reads']:,}</td><td>{r['bytes_read'] / 1e6:,.1f}</td><td>{r['shard_cache_hits']:,}</td>"
        f"<td>{r['prefetch_stalls']:,} ({r['prefetch_stall_s']:.2f} s)</td></tr>"
        for r in ranks
    )
    return (
        "<h2>Loader reads per rank (last report)</h2>"
        "<table><tr><th>rank</th><th>step</th><th>read latency p50 / p99 ms</th>"
        "<th>step data wait p50 / p99 ms</th><th>reads</th><th>MB read</th><th>shard cache hits</th>"
        f"<th>prefetch stalls</th></tr>{rows}</table>"
    )
