"""What differs between two builds or snapshots: the answer to "run N+1 is worse: was it the data?".

Compared, from the manifests: snapshot ids, stage versions (and every recorded ``*_hash``: tokenizer,
eval registry, ...), the effective config of every stage and the build config's other keys, the
tokenizer, per-stage counts by reason, per-source / per-language final documents and per-bucket /
source / language tokens, and which shards are byte-identical. From the shards: which documents were
added or removed (by doc_id), reading only the final stage's shards whose digests differ.
"""

from __future__ import annotations

from typing import Any

from corpus.formats.docshard import iter_records
from corpus.model import StageManifest
from corpus.report.build_view import BuildView
from corpus.report.gather import tokens, version_counts
from corpus.report.scan import holds_documents, shard_paths

SAMPLE = 10


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists stay whole (a list is one setting)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out |= flatten(v, f"{prefix}{k}." if not isinstance(v, dict) or v else f"{prefix}{k}")
        return out if out or not prefix else {prefix.rstrip("."): value}
    return {prefix.rstrip("."): value}


def changes(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    fa, fb = flatten(a), flatten(b)
    missing = "(absent)"
    return [
        {"key": prefix + k, "a": fa.get(k, missing), "b": fb.get(k, missing)}
        for k in sorted(fa.keys() | fb.keys())
        if fa.get(k, missing) != fb.get(k, missing)
    ]


def count_delta(a: int, b: int) -> dict[str, int]:
    return {"a": a, "b": b, "delta": b - a}


def stage_count_changes(ma: StageManifest | None, mb: StageManifest | None) -> dict[str, Any]:
    ta = ma.yield_counts().total() if ma else None
    tb = mb.yield_counts().total() if mb else None
    out: dict[str, Any] = {}
    for field in ("docs_in", "docs_out", "bytes_in", "bytes_out"):
        va, vb = getattr(ta, field, 0) if ta else 0, getattr(tb, field, 0) if tb else 0
        if va != vb:
            out[field.replace("docs_", "")] = count_delta(va, vb)
    for kind in ("filtered", "quarantined"):
        ca, cb = (getattr(ta, kind) if ta else {}), (getattr(tb, kind) if tb else {})
        reasons = {
            r: count_delta(ca.get(r, 0), cb.get(r, 0))
            for r in sorted(ca.keys() | cb.keys())
            if ca.get(r, 0) != cb.get(r, 0)
        }
        if reasons:
            out[kind] = reasons
    return out


def table_delta(a: dict[str, int], b: dict[str, int]) -> dict[str, dict[str, int]]:
    return {
        k: count_delta(a.get(k, 0), b.get(k, 0))
        for k in sorted(a.keys() | b.keys())
        if a.get(k, 0) != b.get(k, 0)
    }


def _last_doc_stage(view: BuildView) -> StageManifest | None:
    for m in reversed(view.stages):
        if holds_documents(view.stage_dir(m.stage), m):
            return m
    return None


def _final_by(view: BuildView, axis: int) -> dict[str, int]:
    m = _last_doc_stage(view) or (view.stages[-1] if view.stages else None)
    return {k: c.docs_out for k, c in m.yield_counts().by(axis).items()} if m else {}


def _tokens_by(view: BuildView) -> dict[str, dict[str, int]]:
    t = tokens(view)
    if not t:
        return {}
    return {
        axis: {k: (v["tokens"] if isinstance(v, dict) else v) for k, v in table.items()}
        for axis, table in t["by"].items()
    }


def _doc_ids(view: BuildView, m: StageManifest, skip: set[str]) -> dict[str, str]:
    """doc_id -> url over the stage's output shards whose digest is not in ``skip``."""
    digests = {o.path: o.sha256 for o in m.outputs}
    stage_dir = view.stage_dir(m.stage)
    ids: dict[str, str] = {}
    for path in shard_paths(stage_dir, m, "shards"):
        if digests[str(path.relative_to(stage_dir))] in skip:
            continue
        for rec in iter_records(path):
            ids[rec["doc_id"]] = rec.get("url", "")
    return ids


def documents_delta(a: BuildView, b: BuildView, sample: int = SAMPLE) -> dict[str, Any] | None:
    ma, mb = _last_doc_stage(a), _last_doc_stage(b)
    if ma is None or mb is None:
        return None
    shared = {o.sha256 for o in ma.outputs} & {o.sha256 for o in mb.outputs}
    ida, idb = _doc_ids(a, ma, shared), _doc_ids(b, mb, shared)
    added, removed = sorted(idb.keys() - ida.keys()), sorted(ida.keys() - idb.keys())
    # the same URL under a new doc_id: its text changed (e.g. line dedup removed other lines), not a new page
    changed = sorted({ida[d] for d in removed if ida[d]} & {idb[d] for d in added if idb[d]})
    return {
        "stage_a": ma.stage,
        "stage_b": mb.stage,
        "shards_shared": len(shared),
        "added": len(added),
        "removed": len(removed),
        "changed_text": len(changed),
        "changed_text_sample": changed[:sample],
        "added_sample": [{"doc_id": d, "url": idb[d]} for d in added[:sample]],
        "removed_sample": [{"doc_id": d, "url": ida[d]} for d in removed[:sample]],
    }


def _selected(view: BuildView) -> dict[str, Any]:
    counts = version_counts(view) or {}
    reasons = (view.version.manifest or {}).get("policy_reasons", {}) if view.version else {}
    return {
        "selected_docs": counts.get("selected_docs"),
        "selected_tokens": counts.get("selected_tokens"),
        **({"policy_rejects": reasons} if reasons else {}),
    }


def shards_shared(a: BuildView, b: BuildView) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if a.snapshot and b.snapshot:
        sa, sb = {s.sha256 for s in a.snapshot.shards}, {s.sha256 for s in b.snapshot.shards}
        out["snapshot"] = {"shared": len(sa & sb), "only_a": len(sa - sb), "only_b": len(sb - sa)}
    for name in [m.stage for m in a.stages if b.stage(m.stage)]:
        oa = {o.sha256 for o in a.stage(name).outputs}
        ob = {o.sha256 for o in b.stage(name).outputs}
        out[name] = {"shared": len(oa & ob), "only_a": len(oa - ob), "only_b": len(ob - oa)}
    return out


def diff_builds(a: BuildView, b: BuildView, sample: int = SAMPLE) -> dict[str, Any]:
    """Every difference between two builds, as a JSON-able dict; ``identical`` says whether there is any."""
    if a.snapshot_id and b.snapshot_id:
        identical = a.snapshot_id == b.snapshot_id
    else:
        identical = [m.digest for m in a.stages] == [m.digest for m in b.stages] and (a.snapshot is None) == (
            b.snapshot is None
        )
    names = [m.stage for m in a.stages] + [m.stage for m in b.stages if not a.stage(m.stage)]
    va, vb = a.stage_versions(), b.stage_versions()
    versions = []
    for s in sorted(va.keys() | vb.keys(), key=lambda s: names.index(s) if s in names else len(names)):
        ea, eb = va.get(s), vb.get(s)
        if ea is None or eb is None:
            versions.append({"stage": s, "only_in": "b" if ea is None else "a"})
            continue
        # the manifest digest follows from everything else, the config hash is shown key by key below
        derived = ("manifest", "config_hash")
        for c in changes(
            {k: v for k, v in ea.items() if k not in derived},
            {k: v for k, v in eb.items() if k not in derived},
        ):
            versions.append({"stage": s, **c})
    config: list[dict[str, Any]] = []
    for s in names:
        ma, mb = a.stage(s), b.stage(s)
        if ma and mb:
            config += changes(ma.config, mb.config, prefix=f"{s}.")
    stage_tables = set(names)
    config += changes(
        {k: v for k, v in a.build_config.items() if k not in stage_tables},
        {k: v for k, v in b.build_config.items() if k not in stage_tables},
        prefix="build.",
    )
    counts = {}
    for s in names:
        c = stage_count_changes(a.stage(s), b.stage(s))
        if c:
            counts[s] = c
    ta, tb = _tokens_by(a), _tokens_by(b)
    return {
        "a": {"path": str(a.path), "snapshot_id": a.snapshot_id},
        "b": {"path": str(b.path), "snapshot_id": b.snapshot_id},
        "identical": identical,
        # the default versions: what each build selects of its candidates, and why its policy rejects
        "version": changes(_selected(a), _selected(b)),
        "stage_versions": versions,
        "config": config,
        "tokenizer": changes(
            a.snapshot.tokenizer if a.snapshot else {}, b.snapshot.tokenizer if b.snapshot else {}
        ),
        "counts": counts,
        "final_docs_by_source": table_delta(_final_by(a, 0), _final_by(b, 0)),
        "final_docs_by_lang": table_delta(_final_by(a, 1), _final_by(b, 1)),
        "tokens": {
            axis: d
            for axis in sorted(ta.keys() | tb.keys())
            if (d := table_delta(ta.get(axis, {}), tb.get(axis, {})))
        },
        "documents": None if identical else documents_delta(a, b, sample),
        "shards": shards_shared(a, b),
    }


def _v(x: Any) -> str:
    return (
        repr(x) if isinstance(x, str) else str(x).replace("'", '"') if isinstance(x, list | dict) else str(x)
    )


def _delta_line(name: str, d: dict[str, int]) -> str:
    return f"{name} {d['a']:,} -> {d['b']:,} ({d['delta']:+,})"


def summary_text(d: dict[str, Any]) -> str:
    """The diff as a person reads it: what changed first, then what it did to the data."""
    lines = [
        f"A: {d['a']['path']}  {d['a']['snapshot_id'] or '(no snapshot)'}",
        f"B: {d['b']['path']}  {d['b']['snapshot_id'] or '(no snapshot)'}",
    ]
    if d["identical"]:
        lines.append("identical: same snapshot id, same stages, same configs")
        return "\n".join(lines)
    lines.append("the builds differ")
    evals = [v for v in d["stage_versions"] if "eval" in v.get("key", "")]
    toks = [v for v in d["stage_versions"] if "tokenizer" in v.get("key", "")]
    for title, items in (
        ("stage versions", [v for v in d["stage_versions"] if v not in evals + toks]),
        ("tokenizer", toks + [{"stage": "snapshot", **t} for t in d["tokenizer"]]),
        ("eval registry", evals),
    ):
        lines.append(f"\n{title}:" + ("" if items else " same"))
        for v in items:
            lines.append(
                f"  {v['stage']}: only in {v['only_in'].upper()}"
                if "only_in" in v
                else f"  {v['stage']}.{v['key']}: {_v(v['a'])} -> {_v(v['b'])}"
            )
    lines.append("\nconfig:" + ("" if d["config"] else " same"))
    lines += [f"  {c['key']}: {_v(c['a'])} -> {_v(c['b'])}" for c in d["config"]]
    lines.append("\ndefault version (A -> B):" + ("" if d["version"] else " same selection counts"))
    lines += [f"  {c['key']}: {_v(c['a'])} -> {_v(c['b'])}" for c in d["version"]]
    lines.append("\ncounts per stage (A -> B):" + ("" if d["counts"] else " same"))
    for stage, c in d["counts"].items():
        parts = [_delta_line(k, c[k]) for k in ("in", "out") if k in c]
        for kind in ("filtered", "quarantined"):
            parts += [_delta_line(f"{kind} {r}", v) for r, v in c.get(kind, {}).items()]
        if not parts:
            parts = [_delta_line(k, c[k]) for k in ("bytes_in", "bytes_out") if k in c]
        lines.append(f"  {stage}: " + "; ".join(parts))
    for key, title in (
        ("final_docs_by_source", "final documents per source"),
        ("final_docs_by_lang", "final documents per language"),
    ):
        if d[key]:
            lines.append(f"\n{title}:")
            lines += [f"  {_delta_line(k, v)}" for k, v in d[key].items()]
    for axis, table in d["tokens"].items():
        lines.append(f"\ntokens per {axis}:")
        lines += [f"  {_delta_line(k, v)}" for k, v in table.items()]
    docs = d["documents"]
    if docs:
        lines.append(
            f"\ndocuments ({docs['stage_a']} vs {docs['stage_b']}): {docs['removed']:,} removed, "
            f"{docs['added']:,} added by doc_id ({docs['shards_shared']} shards identical, not read)"
        )
        if docs["changed_text"]:
            lines.append(
                f"  of these, {docs['changed_text']:,} URLs are in both with changed text (a new doc_id)"
            )
            lines += [f"  ~ {u}" for u in docs["changed_text_sample"]]
        lines += [f"  - {x['doc_id']} {x['url']}" for x in docs["removed_sample"]]
        lines += [f"  + {x['doc_id']} {x['url']}" for x in docs["added_sample"]]
    if d["shards"]:
        lines.append("\nshards shared (byte-identical):")
        for name, s in d["shards"].items():
            lines.append(f"  {name}: {s['shared']} shared, {s['only_a']} only in A, {s['only_b']} only in B")
    return "\n".join(lines)
