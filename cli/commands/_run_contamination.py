"""``corpus contamination --record CKPT``: of the documents flagged for a benchmark, which a training run
actually read by its checkpoint, and at which step it first read each.

Flagged means the build's report (the documents decontaminate flagged; a version excludes them unless
it sets ``include_contaminated``) or, with ``--benchmark``, the documents that benchmark's check finds in
the kept 8-gram index (one published after the run). The answer is the loader's
(:class:`loader.read_set.RunReads`): arithmetic on the run's loader records, never a replay of its steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpus.model.errors import UserError
from corpus.snapshot.lookup import Snapshot


def flagged_by_benchmark(
    report: dict[str, Any], checked: dict[str, Any] | None
) -> dict[str, dict[str, dict]]:
    """benchmark -> doc_id -> {url, items}: from the ``--benchmark`` checks when given, else the build's report."""
    out: dict[str, dict[str, dict]] = {}
    if checked is not None:
        for r in checked["benchmarks"]:
            docs = out.setdefault(r["benchmark"], {})
            for item, found in sorted(r["matches"].items()):
                for m in found:
                    for doc_id in m["doc_ids"]:
                        docs.setdefault(doc_id, {"url": None, "items": []})["items"].append(item)
        return out
    for d in report.get("flagged_docs", []):
        for bench, m in sorted(d["matches"].items()):
            out.setdefault(bench, {})[d["doc_id"]] = {"url": d["url"], "items": list(m["items"])}
    return out


def run_contamination(
    snap: Snapshot, loader_path: Path, record: Path, recipe: Path | None, flagged: dict[str, dict[str, dict]]
) -> dict[str, Any]:
    """Each benchmark's flagged documents, and of them what the run of ``record`` read and when."""
    from loader.checkpoint import read_records  # torch: only where a run is asked about
    from loader.read_set import RunReads

    records = read_records(record)
    last = records[-1]
    chain = [last]  # a move to another version starts the chain anew: earlier records address other streams
    for r in reversed(records[:-1]):
        if r["snapshot_id"] != last["snapshot_id"]:
            break
        chain.insert(0, r)
    reads = RunReads(loader_path, chain, recipe)
    located = {}
    for doc_id in sorted({d for docs in flagged.values() for d in docs}):
        where = snap.locate(doc_id)
        if where is None:
            raise UserError(f"flagged document {doc_id} is not in snapshot {snap.snapshot_id}")
        located[doc_id] = (snap.shard_number(where[0]), where[1])
    found = dict(zip(located, reads.first_reads(list(located.values())), strict=True))
    benchmarks = []
    for bench, docs in sorted(flagged.items()):
        rows = [
            {
                "doc_id": doc_id,
                **about,
                "read": found[doc_id] is not None,
                "first_read": found[doc_id].to_dict() if found[doc_id] else None,
            }
            for doc_id, about in sorted(docs.items())
        ]
        benchmarks.append(
            {
                "benchmark": bench,
                "flagged_docs": len(rows),
                "read_docs": sum(r["read"] for r in rows),
                "documents": rows,
            }
        )
    return {
        "snapshot_id": last["snapshot_id"],
        "step": int(last["step"]),
        "world": int(last["plan"]["world"]),
        "records": [int(r["step"]) for r in chain],
        "benchmarks": benchmarks,
    }


def when(first: dict[str, Any]) -> str:
    if first["step"] is not None:
        return f"step {first['step']}"
    after = f"after step {first['after_step']}" if first["after_step"] is not None else "from the start"
    return f"{after}, by step {first['by_step']} (no record between)"


def run_table(out: dict[str, Any]) -> str:
    lines = [
        f"run up to step {out['step']} ({out['world']} ranks; records at steps "
        f"{', '.join(map(str, out['records']))}) of {out['snapshot_id'][:19]}…"
    ]
    for b in out["benchmarks"]:
        lines.append(
            f"{b['benchmark']}: {b['flagged_docs']} flagged documents, {b['read_docs']} read by the run"
        )
        for d in b["documents"]:
            if d["read"]:
                lines.append(f"  {d['doc_id']}  {d['url'] or ''}  first read {when(d['first_read'])}")
    return "\n".join(lines)
