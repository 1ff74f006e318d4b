"""The data card as one self-contained HTML page, rendered from the gathered numbers alone.

No scripts, no external files, no network: styles are inline and plots are SVG data URIs, so the card
can be mailed, attached to a ticket or opened from a laptop without the cluster. Alarms come first,
because "was it the data?" is answered there before anywhere else.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from corpus.report import plots
from corpus.report.code import code_html
from corpus.report.incremental import incremental_html
from corpus.report.quality_model import quality_html
from corpus.report.selection_html import distributions_html, version_funnel_html
from corpus.report.training_log import training_log_html
from corpus.report.widgets import html_table, img, mono, note, number, percent, with_contents

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#212529;
 margin:0;background:#f1f3f5}
main{max-width:1100px;margin:0 auto;padding:20px 28px 60px;background:#fff;min-height:100vh}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:30px 0 8px;border-bottom:2px solid #dee2e6;padding-bottom:4px}
h3{font-size:14px;margin:18px 0 6px}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.id{font-size:13px;word-break:break-all;color:#495057}
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(160px,1fr));gap:10px;margin:14px 0}
.tile{border:1px solid #dee2e6;border-radius:6px;padding:8px 12px}
.tile b{display:block;font-size:20px} .tile span{color:#6c757d;font-size:12px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px;display:block;overflow-x:auto;max-width:100%}
th,td{padding:3px 10px;border-bottom:1px solid #e9ecef;text-align:right;vertical-align:top}
th{background:#f8f9fa;font-weight:600} td:first-child,th:first-child{text-align:left}
td.l,th.l{text-align:left}
.alarm{background:#fff5f5;border:2px solid #c92a2a;border-radius:6px;padding:10px 14px;margin:12px 0}
.alarm h2{border:0;margin:0 0 6px;color:#c92a2a}
.ok{background:#ebfbee;border:1px solid #2b8a3e;border-radius:6px;padding:8px 14px;margin:12px 0}
.note{background:#f8f9fa;border-left:4px solid #adb5bd;padding:6px 12px;margin:8px 0;color:#495057}
img{width:100%;max-width:820px;display:block;margin:6px 0}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(330px,1fr));gap:8px}
.bad{color:#c92a2a;font-weight:600}
pre{background:#f8f9fa;padding:8px;overflow:auto;font-size:12px;max-height:360px}
.toc{border:1px solid #dee2e6;border-radius:6px;padding:6px 14px;margin:10px 0;font-size:13px}
.toc ol{columns:3;margin:4px 0;padding-left:20px} .toc a{color:#1c7ed6;text-decoration:none}
"""


def _alarms(card: dict[str, Any]) -> str:
    return _stage_alarms(card) + _yield_alarms(card) + _absent(card)


def _absent(card: dict[str, Any]) -> str:
    if not card["absent"]:
        return ""
    items = "".join(f"<li><b>{escape(k)}</b>: {escape(v)}</li>" for k, v in card["absent"].items())
    return f'<div class="note">Not on this card:<ul>{items}</ul></div>'


def _stage_alarms(card: dict[str, Any]) -> str:
    raised = card.get("stage_alarms") or {}
    if not raised:
        return ""
    items = "".join(
        f"<li>{escape(stage)}: {escape(a)}</li>" for stage, alarms in raised.items() for a in alarms
    )
    return f'<section class="alarm"><h2>⚠ stage alarms</h2><ul>{items}</ul></section>'


def _yield_alarms(card: dict[str, Any]) -> str:
    a = card.get("alarms")
    if a is None:
        return note("Yield alarms: no stage manifests, nothing to compare.")
    if a["alarms"]:
        items = "".join(f"<li>{escape(x['message'])}</li>" for x in a["alarms"])
        return (
            f'<section class="alarm"><h2>⚠ {len(a["alarms"])} yield alarm(s)</h2><ul>{items}</ul>'
            f'<span class="mono">history: {escape(a["history"])}</span></section>'
        )
    if not a["compared_with"]:
        return note(
            f"Yield alarms: no earlier build of these sources in {a['history']}; nothing to compare yet."
        )
    return (
        f'<p class="ok">No yield alarm: every stage within its band of the trailing median of '
        f"{a['compared_with']} earlier build(s) of these sources.</p>"
    )


def _tiles(card: dict[str, Any]) -> list[tuple[str, str]]:
    """The numbers at the top: what came in, what the build stored (its candidates) and what the
    version selects of them, never one mistaken for the other."""
    total, version = card["funnel"]["total"], card["build"].get("version")
    tiles = []
    first_in = total[0]["in"] if total else None
    stored = version["stored_docs"] if version else (total[-1]["out"] if total else None)
    if total:
        tiles += [("documents in", number(first_in)), ("documents stored (candidates)", number(stored))]
        tiles.append(("stored of in", percent(100 * stored / first_in if first_in else None)))
    if version:
        selected = version["selected_docs"]
        tiles.append(("documents selected (version)", number(selected)))
        tiles.append(("selected of stored", percent(100 * selected / stored if stored else None)))
        if first_in:
            tiles.append(("selected of in", percent(100 * selected / first_in)))
        tiles.append(("tokens stored", number(version["stored_tokens"])))
    if total:
        tiles.append(("bytes stored", number(total[-1]["bytes_out"])))
    if card.get("tokens"):
        tiles.append(("tokens selected" if version else "tokens", number(card["tokens"]["total"])))
    if card["build"]["shards"] is not None:
        tiles.append(("snapshot shards", number(card["build"]["shards"])))
    return tiles


def _header(card: dict[str, Any]) -> str:
    b = card["build"]
    sid = b["snapshot_id"] or "(no snapshot: the build did not finish)"
    tiles = _tiles(card)
    tile_html = "".join(f'<div class="tile"><b>{v}</b><span>{escape(k)}</span></div>' for k, v in tiles)
    tombstones = "".join(
        f"<div>tombstone <code>{escape(t['name'])}</code>: {escape(t['reason'])} ({escape(t['date'] or 'undated')})</div>"
        for t in (b.get("version") or {}).get("tombstones", [])
    ) + "".join(
        f"<div>takedown: {t['docs']} document(s) of <code>{escape(t['name'])}</code>: {escape(t['reason'])}</div>"
        for t in (b.get("version") or {}).get("takedowns", [])
    )
    return (
        f'<h1>Data card</h1><div class="id mono">snapshot_id {escape(sid)}</div>'
        f"<div>build <code>{escape(str(b['build_dir'] or b['path']))}</code> · seed {number(b['seed'])} · "
        f"sources {escape(', '.join(b['sources']) or '–')} · stages {escape(' → '.join(b['stages']) or '–')}</div>"
        f"{tombstones}"
        f'<div class="tiles">{tile_html}</div>'
    )


def _funnel(card: dict[str, Any]) -> str:
    f = card["funnel"]
    if not f["total"]:
        return "<h2>Yield funnel</h2>" + note(card["absent"].get("stages", "no stage manifests"))
    rows = [
        [
            escape(r["stage"]),
            number(r["in"]),
            number(r["out"]),
            percent(r["retention"]),
            number(r["filtered"]),
            number(r["quarantined"]),
            number(r["bytes_in"]),
            number(r["bytes_out"]),
            percent(r["bytes_retention"]),
        ]
        for r in f["total"]
    ]
    stages = [r["stage"] for r in f["total"]]
    out = [
        "<h2>Yield funnel</h2>",
        img(plots.funnel_plot(f["total"]), "yield funnel"),
        html_table(
            [
                "stage",
                "docs in",
                "docs out",
                "kept",
                "filtered",
                "quarantined",
                "bytes in",
                "bytes out",
                "bytes kept",
            ],
            rows,
        ),
    ]
    steps = (card.get("version_funnel") or {}).get("steps")
    out[1] = img(plots.funnel_plot(f["total"], steps), "yield funnel")
    for axis, title in (("by_source", "source"), ("by_lang", "language")):
        out.append(f"<h3>Retention per {title}</h3>")
        out.append(_retention_by_group(card, axis, title, stages))
    return "".join(out)


def _retention_by_group(card: dict[str, Any], axis: str, title: str, stages: list[str]) -> str:
    """Stage × group retention (out / in at each stage), then the share of its stored documents the
    version selects: a heatmap, largest groups at the top, and the same numbers as a table."""
    table = card["funnel"][axis]
    version = (card.get("version_funnel") or {}).get(axis)
    columns = stages + (["selected (version)"] if version is not None else [])
    groups = sorted(table, key=lambda g: (-max(r["in"] for r in table[g]), g))
    grid, body = [], []
    for group in groups:
        by_stage = {r["stage"]: r for r in table[group]}
        cells = [by_stage[s]["retention"] if s in by_stage else None for s in stages]
        if version is not None:
            v = version.get(group)
            cells.append(100 * v["selected"] / v["stored"] if v and v["stored"] else None)
        grid.append(cells)
        last = by_stage.get(stages[-1])
        body.append(
            [escape(group)]
            + [percent(c) for c in cells]
            + [number(last["out"] if last else 0), number(last["bytes_out"] if last else 0)]
        )
    plot = plots.heatmap_plot(groups, columns, grid, f"Retention % per {title} and stage")
    return img(plot, f"retention per {title}") + html_table(
        [title] + columns + ["docs out", "bytes out"], body
    )


def _tokens(card: dict[str, Any]) -> str:
    t = card.get("tokens")
    if not t:
        return "<h2>Tokens</h2>" + note(card["absent"].get("tokens", "no token counts"))
    out = ["<h2>Tokens</h2>"]
    for axis, table in t["by"].items():
        values = {k: (v["tokens"] if isinstance(v, dict) else v) for k, v in table.items()}
        out.append(img(plots.bars_plot(values, f"Tokens per {axis}", "tokens"), f"tokens per {axis}"))
        total = sum(values.values()) or 1
        rows = []
        for k, v in table.items():
            extra = [number(v.get("docs")), number(v.get("shards"))] if isinstance(v, dict) else []
            rows.append([escape(k), number(values[k]), percent(100 * values[k] / total)] + extra)
        head = [axis, "tokens", "share"] + (
            ["docs", "shards"] if any(isinstance(v, dict) for v in table.values()) else []
        )
        out.append(html_table(head, rows))
    return "".join(out)


def _dedup(card: dict[str, Any]) -> str:
    out = ["<h2>Deduplication</h2>"]
    if not card["dedup"]:
        return out[0] + note(card["absent"].get("dedup", "no dedup stage"))
    for stage, d in card["dedup"].items():
        out.append(
            f"<h3>{escape(stage)}: {number(d['removed'])} removed, {number(d['clusters'])} clusters of 2 or more</h3>"
        )
        if d["clusters"]:
            out.append(
                img(
                    plots.cluster_sizes_plot(d["cluster_sizes"], f"{stage}: cluster sizes"),
                    f"{stage} clusters",
                )
            )
            rows = [
                [
                    number(c["size"]),
                    mono(c["keeper"]),
                    mono(c.get("keeper_url") or "–", 70),
                    mono(c["copy_doc_id"]),
                    escape(c["source"]),
                    mono(c["url"], 70),
                ]
                for c in d["largest"]
            ]
            out.append(
                "<p>Largest clusters (a huge cluster is a bug signal). An exact copy of the same source has its "
                "keeper's doc_id, a digest of text and source: the urls tell them apart.</p>"
            )
            head = ["size", "kept doc_id", "its url", "a dropped copy", "source", "its url"]
            out.append(html_table(head, rows, left=6))
        for key, value in d["recorded"].items():
            out.append(
                f'<p class="mono">{escape(stage)} records {escape(key)}: '
                f"{escape(json.dumps(value, sort_keys=True))[:600]}</p>"
            )
    return "".join(out) + _removed_lines(card) + _representatives(card)


def _removed_lines(card: dict[str, Any]) -> str:
    r = card.get("removed_lines")
    out = ["<h3>Lines removed by line_dedup</h3>"]
    if r is None:
        return out[0] + note(card["absent"].get("removed_lines", "no line_dedup stage"))
    out.append(
        f"<p>{number(r['distinct_lines'])} distinct lines removed, {number(r['removals'])} times in all "
        "(a document counted once per line). The most removed (a line of code or prose here is a bug signal):</p>"
    )
    if r["top"]:
        rows = [[escape(t["line"]), mono(t["key"]), number(t["docs"])] for t in r["top"]]
        out.append(html_table(["line", "key", "documents"], rows, left=2))
    return "".join(out)


def _representatives(card: dict[str, Any]) -> str:
    r = card.get("representatives")
    out = ["<h3>Representatives</h3>"]
    if r is None:
        return out[0] + note(card["absent"].get("representatives", "no clusters"))
    out.append(
        f"<p>{number(r['longer'])} of {number(r['clusters'])} clusters ({r['share']:.1%}) keep a representative more "
        f"than {r['longer_than']}× the cluster's median length in tokens (boilerplate or a footer the other "
        "copies lack is the usual cause).</p>"
    )
    if r["sample"]:
        rows = [
            [
                mono(c["cluster_id"]),
                number(c["size"]),
                number(round(c["median_tokens"])),
                number(c["representative_tokens"]),
                mono(c["url"]),
            ]
            for c in r["sample"]
        ]
        out.append("<p>A sample to read (chosen by a hash of the cluster id):</p>")
        out.append(
            html_table(["cluster", "size", "median tokens", "representative tokens", "its url"], rows, left=5)
        )
    return "".join(out)


def _holdout(card: dict[str, Any]) -> str:
    out = ["<h2>Eval holdout</h2>"]
    h = card.get("holdout")
    if not h:
        return out[0] + note(card["absent"].get("holdout", "no holdout"))
    stored = "" if h["stored"] is None else f", {number(h['stored'])} stored extracted and PII-scrubbed"
    dropped = ", ".join(f"{escape(r)} {number(n)}" for r, n in sorted(h["dropped"].items()))
    out.append(
        f"<p>{number(h['held_out'])} pages held out (by normalized URL, carving version "
        f"{escape(str(h['carving_version']))}){stored}{' (no text: ' + dropped + ')' if dropped else ''}.</p>"
    )
    c = h.get("copies")
    if c is None:
        return "".join(out) + note("no metadata table: copies of held-out pages are not counted")
    sel = "" if c["selected"] is None else f"; {number(c['selected'])} of them selected by this version"
    out.append(
        f"<p>Candidates copying a held-out page at another URL: {number(c['exact'])} exact, {number(c['near'])} "
        f"near{sel} (the default selection excludes them all).</p>"
    )
    if c["sample"]:
        rows = [
            [mono(x["doc_id"]), escape(x["copy"]), number(x["similarity"]), mono(x["url"])]
            for x in c["sample"]
        ]
        out.append(html_table(["doc_id", "copy", "similarity", "its url"], rows, left=4))
    return "".join(out)


def _contamination(card: dict[str, Any]) -> str:
    out = ["<h2>Contamination</h2>"]
    c = card.get("contamination")
    if not c:
        return out[0] + note(card["absent"].get("contamination", "no decontaminate stage"))
    r = c["report"]
    head = [f"{number(r.get('docs_scanned'))} documents checked"]
    if "docs_flagged" in r:
        head.append(f"{number(r['docs_flagged'])} flagged ({number(r.get('tokens_flagged'))} tokens)")
    if r.get("docs_fuzzy_only"):
        head.append(
            f"{number(r['docs_fuzzy_only'])} more by the fuzzy tier alone "
            f"({number(r.get('tokens_fuzzy_only'))} tokens)"
        )
    if r.get("removed"):
        head.append("removed " + ", ".join(f"{escape(k)}: {number(v)}" for k, v in r["removed"].items()))
    if r.get("policy"):
        head.append(escape(r["policy"]))
    out.append(f'<p>{"; ".join(head)}. <span class="mono">from {escape(c["source"])}</span></p>')
    bench = r.get("benchmarks")
    if isinstance(bench, dict) and bench:
        cols = [
            "items",
            "items_matched",
            "docs_flagged",
            "tokens_flagged",
            "doc_rate",
            "token_rate",
            "longest_run",
            "docs_fuzzy",
            "items_fuzzy",
        ]
        cols = [k for k in cols if any(k in v for v in bench.values())] or sorted(
            {k for v in bench.values() for k in v}
        )
        rows = [
            [escape(b)]
            + [
                (
                    percent(100 * v[k])
                    if k.endswith("_rate") and isinstance(v.get(k), float)
                    else number(v.get(k))
                )
                for k in cols
            ]
            for b, v in bench.items()
        ]
        out.append(html_table(["benchmark"] + [k.replace("_", " ") for k in cols], rows))
    rest = {
        k: v
        for k, v in r.items()
        if k
        not in (
            "benchmarks",
            "docs_scanned",
            "docs_flagged",
            "tokens_flagged",
            "docs_fuzzy_only",
            "tokens_fuzzy_only",
            "removed",
            "policy",
        )
    }
    if rest:
        out.append(f"<pre>{escape(json.dumps(rest, indent=1, sort_keys=True))[:6000]}</pre>")
    if c.get("flagged_sample"):
        rows = [
            [
                f'<span class="mono">{escape(f["doc_id"])}</span>',
                escape(f.get("url", "")),
                escape(
                    ", ".join(
                        [f"{b} (run {m['run']})" for b, m in f.get("matches", {}).items()]
                        + [f"{b} (fuzzy, {m['share']:.0%})" for b, m in f.get("fuzzy", {}).items()]
                    )
                ),
            ]
            for f in c["flagged_sample"]
        ]
        out.append(f"<p>Flagged documents ({number(c['flagged_docs'])}; first {len(rows)}):</p>")
        out.append(html_table(["doc_id", "url", "benchmarks"], rows, left=3))
    for name, value in c.get("artifacts", {}).items():
        out.append(_keyed_table(name, value))
    return "".join(out)


def _keyed_table(name: str, value: Any) -> str:
    """A benchmark -> {field: number} mapping as a table; anything else as JSON."""
    rows_src = value
    if isinstance(value, dict):
        for key in ("benchmarks", "per_benchmark", "by_benchmark"):
            if isinstance(value.get(key), dict):
                rows_src = value[key]
    if isinstance(rows_src, dict) and rows_src and all(isinstance(v, dict) for v in rows_src.values()):
        cols = sorted({k for v in rows_src.values() for k, x in v.items() if not isinstance(x, dict | list)})
        rows = [[escape(str(b))] + [number(v.get(c)) for c in cols] for b, v in sorted(rows_src.items())]
        return f"<h3>{escape(name)}</h3>" + html_table(["benchmark"] + cols, rows)
    if isinstance(rows_src, list) and rows_src and all(isinstance(v, dict) for v in rows_src):
        cols = sorted({k for v in rows_src for k, x in v.items() if not isinstance(x, dict | list)})
        return f"<h3>{escape(name)}</h3>" + html_table(
            cols, [[number(v.get(c)) for c in cols] for v in rows_src]
        )
    if not value:
        return ""
    return f"<h3>{escape(name)}</h3><pre>{escape(json.dumps(value, indent=1, sort_keys=True))[:8000]}</pre>"


def _gate(gate: dict[str, Any] | None) -> str:
    """The extract gate as it ran, and the pages it kept from the second pass by source and language."""
    if gate is None:
        return ""
    out = ["<h3>The extract gate (pages never extracted, by their first-pass language)</h3>"]
    if not gate["gate"]:
        return out[0] + note(f"extractor {gate['extractor']}: no gate, every page was extracted")
    out.append(note(f"extractor {gate['extractor']}, gate: {gate['gate']}"))
    rows = [[escape(s), escape(lang), escape(r), number(n)] for s, lang, r, n in gate["rows"]]
    out.append(
        html_table(["source", "language", "reason", "documents"], rows, left=3)
        if rows
        else note("the gate passed every page")
    )
    return "".join(out)


def _reasons(card: dict[str, Any]) -> str:
    out = ["<h2>Filter and quarantine reasons</h2>"]
    rows = [
        [escape(s), escape(r), number(n)]
        for s, reasons in card["filtered"].items()
        for r, n in reasons.items()
    ]
    out.append("<h3>Filtered (kept in each stage's filtered/ with the document)</h3>")
    out.append(
        html_table(["stage", "reason", "documents"], rows, left=2)
        if rows
        else note("no document was filtered")
    )
    out.append(_gate(card.get("gate")))
    srows = [
        [escape(stage), escape(r), number(x["records"]), percent(x["share"])]
        for stage, s in card.get("skipped", {}).items()
        for r, x in s["by_reason"].items()
    ]
    read = ", ".join(
        f"{stage} read {s['records_read']:,} records, {s['documents']:,} of them documents"
        for stage, s in card.get("skipped", {}).items()
    )
    out.append("<h3>Skipped records (read, but not documents: requests, revisits, non-HTML, non-200)</h3>")
    out.append(
        note(read) + html_table(["stage", "reason", "records", "share of records read"], srows, left=2)
        if srows
        else note((read + ": " if read else "") + "no record was skipped")
    )
    out.append("<h3>Quarantined (inputs that could not become documents)</h3>")
    qrows = []
    for stage, reasons in card["quarantine"].items():
        for reason, q in reasons.items():
            samples = "<br>".join(
                f'<span class="mono">{escape(s["raw_digest"][:24])}…</span> '
                f"{escape(s.get('url') or s.get('source') or '')} {escape(s.get('detail') or '')[:80]}"
                for s in q["samples"]
            )
            qrows.append([escape(stage), escape(reason), number(q["count"]), samples])
    out.append(
        html_table(["stage", "reason", "records", "sample raw digests"], qrows, left=2)
        if qrows
        else note("nothing was quarantined")
    )
    return "".join(out)


def _versions(card: dict[str, Any]) -> str:
    b = card["build"]
    order = b["stages"] + sorted(set(b["stage_versions"]) - set(b["stages"]))
    rows = []
    for stage in order:
        v = b["stage_versions"].get(stage)
        if v is None:
            continue
        others = "<br>".join(
            f"{escape(k)} {mono(str(x), 23)}"
            for k, x in sorted(v.items())
            if k not in ("version", "config_hash", "manifest")
        )
        rows.append(
            [
                escape(stage),
                escape(str(v.get("version", "–"))),
                mono(str(v.get("config_hash", "–")), 23),
                mono(str(v.get("manifest", "–")), 23),
                others,
            ]
        )
    out = [
        "<h2>Stage versions</h2>",
        html_table(["stage", "version", "config hash", "manifest", "other hashes"], rows, left=5),
    ]
    if b["tokenizer"]:
        out.append(
            f"<h3>Tokenizer</h3><pre>{escape(json.dumps(b['tokenizer'], indent=1, sort_keys=True))}</pre>"
        )
    out.append(
        f"<h3>Build config</h3><pre>{escape(json.dumps(b['build_config'], indent=1, sort_keys=True))}</pre>"
    )
    return "".join(out)


def render_html(card: dict[str, Any]) -> str:
    sid = card["build"]["snapshot_id"] or "unfinished build"
    title = f"Data card {sid[:19]}"
    body = "".join(
        [
            _alarms(card),
            _funnel(card),
            version_funnel_html(card),
            _tokens(card),
            training_log_html(card),
            distributions_html(card),
            quality_html(card),
            _dedup(card),
            _holdout(card),
            code_html(card),
            incremental_html(card),
            _contamination(card),
            _reasons(card),
            _versions(card),
        ]
    )
    toc, body = with_contents(body)
    body = _header(card) + toc + body
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{CSS}</style></head>'
        f"<body><main>{body}</main></body></html>\n"
    )
