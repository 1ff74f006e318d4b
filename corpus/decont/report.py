"""The per-benchmark contamination report, a required artifact of every snapshot.

Built from the documents the decontaminate stage flagged (its ``flagged/`` artifact: the flagged
candidates, annotated, with their text): per benchmark the documents and tokens flagged, their rate
against everything the stage scanned, the longest run and the distinct items contaminated, and apart
from them the fuzzy tier's (documents and items it alone found); per flagged document every
contaminated item. Flagged documents stay candidates; a version excludes them unless its selection
says ``include_contaminated = true`` (exact hits) or ``include_fuzzy_contaminated = true`` (fuzzy).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from corpus.model import Document
from corpus.model.annotations import (
    CONTAMINATED_FUZZY,
    CONTAMINATED_FUZZY_ITEM,
    CONTAMINATED_ITEM,
    CONTAMINATED_ITEMS,
    CONTAMINATED_RUN,
)

#: decontaminate's per-shard artifact of the documents it flagged
FLAGGED = "flagged"
REPORT_FORMAT = "corpus-contamination-report/3"


def encode_items(item_ids: list[str]) -> str:
    """Every contaminated item of a benchmark in a document, as an annotation value (a JSON list)."""
    return json.dumps(list(item_ids), ensure_ascii=False)


def matches_of(doc: Document) -> dict[str, tuple[int, str, list[str]]]:
    """benchmark -> (longest run, item of that run, every contaminated item) from the decontaminate
    annotations of a flagged doc (an annotation of version 4 names one item only)."""
    out: dict[str, tuple[int, str, list[str]]] = {}
    for a in doc.annotations:
        bench = CONTAMINATED_RUN.key_of(a)
        if bench is not None:
            item = CONTAMINATED_ITEM.of(doc, bench)
            every = CONTAMINATED_ITEMS.of(doc, bench)
            best = str(item.value) if item else ""
            items = json.loads(str(every.value)) if every else ([best] if best else [])
            out[bench] = (int(a.value), best, items)
    return out


def fuzzy_of(doc: Document) -> dict[str, tuple[float, str]]:
    """benchmark -> (largest share, its item) of the fuzzy tier's annotations of a flagged doc."""
    out = {}
    for a in doc.annotations:
        bench = CONTAMINATED_FUZZY.key_of(a)
        if bench is not None:
            item = CONTAMINATED_FUZZY_ITEM.of(doc, bench)
            out[bench] = (float(a.value), str(item.value) if item else "")
    return out


def build_report(
    flagged: Iterable[Document],
    *,
    benchmarks: dict[str, dict],
    docs_scanned: int,
    tokens_scanned: int,
    count_tokens: Callable[[list[str]], list[int]],
    settings: dict[str, Any],
) -> dict[str, Any]:
    def fresh() -> dict[str, Any]:
        return {
            "docs_flagged": 0,
            "tokens_flagged": 0,
            "longest_run": 0,
            "items_matched": set(),
            "docs_fuzzy": 0,
            "items_fuzzy": set(),
        }

    per: dict[str, dict[str, Any]] = {name: fresh() for name in benchmarks}
    flagged = sorted(flagged, key=lambda d: d.doc_id)
    tokens = count_tokens([d.text for d in flagged]) if flagged else []
    total_tokens_flagged = fuzzy_docs = fuzzy_tokens = 0
    for doc, n_tokens in zip(flagged, tokens, strict=True):
        exact = matches_of(doc)
        for bench, (run, _, items) in exact.items():
            p = per.setdefault(bench, fresh())
            p["docs_flagged"] += 1
            p["tokens_flagged"] += n_tokens
            p["longest_run"] = max(p["longest_run"], run)
            p["items_matched"].update(items)
        for bench, (_, item) in fuzzy_of(doc).items():
            p = per.setdefault(bench, fresh())
            p["docs_fuzzy"] += 1
            p["items_fuzzy"].add(item)
        if exact:
            total_tokens_flagged += n_tokens
        else:  # flagged by the fuzzy tier alone
            fuzzy_docs += 1
            fuzzy_tokens += n_tokens
    rows = {}
    for bench in sorted(per):
        p = per[bench]
        rows[bench] = {
            "docs_flagged": p["docs_flagged"],
            "tokens_flagged": p["tokens_flagged"],
            "doc_rate": p["docs_flagged"] / docs_scanned if docs_scanned else 0.0,
            "token_rate": p["tokens_flagged"] / tokens_scanned if tokens_scanned else 0.0,
            "longest_run": p["longest_run"],
            "items_matched": len(p["items_matched"]),
            "docs_fuzzy": p["docs_fuzzy"],
            "items_fuzzy": len(p["items_fuzzy"]),
            "items": benchmarks.get(bench, {}).get("items", 0),
            "unchecked_items": benchmarks.get(bench, {}).get("unchecked_items", 0),
        }
    return {
        "format": REPORT_FORMAT,
        "settings": settings,
        "docs_scanned": docs_scanned,
        "docs_flagged": len(flagged) - fuzzy_docs,
        "tokens_flagged": total_tokens_flagged,
        "docs_fuzzy_only": fuzzy_docs,
        "tokens_fuzzy_only": fuzzy_tokens,
        "tokens_scanned": tokens_scanned,
        "policy": "flagged documents are candidates; a version excludes them unless it sets "
        "include_contaminated (exact hits) or include_fuzzy_contaminated (the fuzzy tier's)",
        "benchmarks": rows,
        "flagged_docs": [
            {
                "doc_id": d.doc_id,
                "url": d.url,
                "matches": {
                    b: {"run": r, "item": i, "items": items}
                    for b, (r, i, items) in sorted(matches_of(d).items())
                },
                "fuzzy": {b: {"share": f, "item": i} for b, (f, i) in sorted(fuzzy_of(d).items())},
            }
            for d in flagged
        ],
    }


def report_table(report: dict[str, Any]) -> str:
    rows = [
        (
            "benchmark",
            "items",
            "docs flagged",
            "tokens flagged",
            "doc rate",
            "token rate",
            "longest run",
            "fuzzy docs",
        )
    ]
    for name, r in report["benchmarks"].items():
        rows.append(
            (
                name,
                str(r["items"]),
                str(r["docs_flagged"]),
                str(r["tokens_flagged"]),
                f"{100 * r['doc_rate']:.3f}%",
                f"{100 * r['token_rate']:.4f}%",
                str(r["longest_run"]),
                str(r.get("docs_fuzzy", 0)),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    ]
    fuzzy = report.get("docs_fuzzy_only", 0)
    also = (
        f", {fuzzy} more by the fuzzy tier alone ({report.get('tokens_fuzzy_only', 0)} tokens)"
        if fuzzy
        else ""
    )
    lines.append(
        f"{report['docs_flagged']} of {report['docs_scanned']} documents flagged "
        f"({report['tokens_flagged']} tokens){also}; {report['policy']}"
    )
    return "\n".join(lines)
