"""The code section of the data card: repositories by licence class, files rejected by reason, and
what the version selects of the ``code`` bucket.

Why on the card: a code bucket's size is decided twice, by file rules (vendored, generated, minified:
a third of raw bytes) and by licences (the default selection keeps permissive code only,
``corpus.select.selection.DEFAULT_CLASSES_BY_TIER``), and a reader must see both to know why the bucket is
the size it is. Repositories, their licences and rejected files come from the ingest manifest
(``extra.code_files``); documents and tokens by licence class, stored and selected, from the version's
metadata table (``tier = 'code'``); the bucket's totals from the version's shards; the repository
clusters (releases and forks minhash_dedup put together, and which one the version keeps) from the
same table (:mod:`corpus.report.repo_clusters`).
"""

from __future__ import annotations

from html import escape
from typing import Any

from corpus.model.facts import CodeFilesFacts
from corpus.report.build_view import BuildView
from corpus.report.repo_clusters import repository_clusters
from corpus.report.widgets import html_table, note, number
from corpus.version.query import connect

BUCKET = "code"


def code_section(view: BuildView) -> dict[str, Any] | None:
    """The section's numbers; None when ingest read no repository."""
    ingest = view.stage("ingest")
    files = CodeFilesFacts.of(ingest) if ingest is not None else None
    if files is None:
        return None
    section: dict[str, Any] = {
        "repositories": files.repositories,
        "quarantined_repositories": files.quarantined_repositories,
        "kept": files.kept,
        "rejected": files.rejected,
        "licence_classes": files.licence_classes,
        "licences": files.licences,
        "bucket": None,
        "by_class": None,
        "repo_clusters": None,
    }
    v = view.version
    if v is not None and v.live_shards:
        counts = [(s, d, t) for s, d, t in v.selected_counts() if s.bucket == BUCKET]
        section["bucket"] = {
            "name": BUCKET,
            "stored_docs": sum(s.docs for s, _, _ in counts),
            "selected_docs": sum(d for _, d, _ in counts),
            "stored_tokens": sum(s.tokens for s, _, _ in counts),
            "selected_tokens": sum(t for _, _, t in counts),
        }
        if all(s.metadata.is_file() for s in v.live_shards):
            con = connect(v)
            section["by_class"] = licence_class_counts(con)
            section["repo_clusters"] = repository_clusters(con)
    return section


def licence_class_counts(con: Any) -> list[dict[str, Any]]:
    """Code documents and tokens per (licence class, expression), stored and selected (``selected`` is
    None on a table without a selection)."""
    has_selected = "selected" in {r[0] for r in con.execute("DESCRIBE docs").fetchall()}
    chosen = "selected" if has_selected else "NULL"
    rows = con.execute(
        f"""
        SELECT licence_class, licence, count(*), sum(tokens),
               sum(CASE WHEN {chosen} THEN 1 ELSE 0 END), sum(CASE WHEN {chosen} THEN tokens ELSE 0 END)
        FROM docs WHERE tier = ? GROUP BY licence_class, licence ORDER BY licence_class, licence
        """,
        [BUCKET],
    ).fetchall()
    return [
        {
            "class": cls,
            "expression": expr,
            "stored_docs": int(n),
            "stored_tokens": int(tok),
            "selected_docs": int(sn) if has_selected else None,
            "selected_tokens": int(st) if has_selected else None,
        }
        for cls, expr, n, tok, sn, st in rows
    ]


def code_html(card: dict[str, Any]) -> str:
    """The card's "Code" section."""
    out = ["<h2>Code</h2>"]
    c = card.get("code")
    if not c:
        return out[0] + note(card["absent"].get("code", "no repository was read"))
    out.append(
        f"<p>{number(c['repositories'])} repositories read ({number(c['quarantined_repositories'])} quarantined); "
        f"{number(c['kept']['files'])} files kept ({number(c['kept']['bytes'])} bytes).</p>"
    )
    b = c.get("bucket")
    if b:
        out.append(
            f"<p>Bucket <b>{escape(b['name'])}</b>: {number(b['selected_docs'])} of {number(b['stored_docs'])} "
            f"documents and {number(b['selected_tokens'])} of {number(b['stored_tokens'])} tokens selected.</p>"
        )
    if c["by_class"]:
        rows = [
            [
                escape(r["class"]),
                escape(r["expression"] or "–"),
                number(r["selected_docs"]),
                number(r["stored_docs"]),
                number(r["selected_tokens"]),
                number(r["stored_tokens"]),
            ]
            for r in c["by_class"]
        ]
        out.append("<h3>Documents by licence</h3>")
        out.append(
            html_table(["class", "expression", "selected docs", "docs", "selected tokens", "tokens"], rows, 2)
        )
    if c["licences"]:
        rows = [
            [
                escape(r["repository"]),
                escape(r["expression"]),
                escape(r["class"]),
                escape(r["decided_by"]),
                number(r["conflicts"]),
            ]
            for r in c["licences"]
        ]
        classes = ", ".join(f"{escape(k)} {number(n)}" for k, n in c["licence_classes"].items())
        out.append(f"<h3>Repositories by licence</h3><p>{classes}.</p>")
        out.append(html_table(["repository", "expression", "class", "decided by", "conflicts"], rows, 4))
    rejected = sorted(c["rejected"].items(), key=lambda kv: (-kv[1]["bytes"], kv[0]))
    if rejected:
        rows = [[escape(r), number(v["files"]), number(v["bytes"])] for r, v in rejected]
        out.append("<h3>Files rejected, by reason</h3>")
        out.append(html_table(["reason", "files", "bytes"], rows))
    rc = c.get("repo_clusters")
    if rc:
        rows = [
            [
                escape(m["cluster"]),
                escape(m["repository"]),
                number(m["rank"]),
                number(m["documents"]),
                number(m["tokens"]),
                "–" if m["similarity"] is None else f"{m['similarity']:.3f}",
                "–" if m["file_share"] is None else f"{m['file_share']:.3f}",
                "–" if m["kept"] is None else ("yes" if m["kept"] else "no"),
            ]
            for m in rc["members"]
        ]
        out.append(
            f"<h3>Repository clusters</h3><p>{number(rc['clusters'])} clusters of {number(rc['repositories'])} "
            "repositories (releases and forks at line Jaccard ≥ the threshold; rank 0 is the stage's "
            "representative; similarity to it by line sets, and the share of files they share exactly).</p>"
        )
        out.append(
            html_table(
                ["cluster", "repository", "rank", "docs", "tokens", "similarity", "file share", "kept"],
                rows,
                2,
            )
        )
    return "".join(out)
