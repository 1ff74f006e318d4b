"""What changes from one version of a build to another: selection keys, tombstones, documents and tokens.

See docs/versions.md ("Versions": ``corpus diff``).
"""

from __future__ import annotations

import json
from typing import Any

import duckdb
import numpy as np

from corpus.model.errors import UserError
from corpus.select.selection import Selection
from corpus.version.open import StoredShard, Version


def _groups(shard: StoredShard) -> dict[str, np.ndarray]:
    """Per document of one shard: its source, lang and tokens (read from the shard's metadata file;
    a shard deleted under a tombstone counts as source and lang "(tombstoned)", its tokens unknown)."""
    if not shard.metadata.is_file():
        unknown = np.full(shard.docs, "(tombstoned)", dtype=object)
        return {"source": unknown, "lang": unknown, "tokens": np.zeros(shard.docs, dtype=np.int64)}
    rows = (
        duckdb.connect()
        .execute('SELECT source, lang, tokens FROM read_parquet(?) ORDER BY "index"', [str(shard.metadata)])
        .fetchnumpy()
    )
    return {"source": rows["source"], "lang": rows["lang"], "tokens": rows["tokens"]}


def diff_versions(a: Version, b: Version) -> dict[str, Any]:
    """What changes from version ``a`` to version ``b`` of one build: the selection's keys, the
    tombstones and takedowns, and the documents and tokens added and removed per bucket, source and
    language."""
    if a.base.snapshot_id != b.base.snapshot_id:
        raise UserError(
            f"versions of different builds ({a.base.snapshot_id} and {b.base.snapshot_id}): "
            f"compare the builds with corpus diff BUILD_A BUILD_B"
        )
    nothing = Selection().canonical()  # the build itself, compared key by key as the empty selection
    sel_a = (a.manifest or {}).get("selection", nothing)
    sel_b = (b.manifest or {}).get("selection", nothing)
    keys = sorted(sel_a.keys() | sel_b.keys())
    selection = [
        {"key": k, "a": sel_a.get(k), "b": sel_b.get(k)} for k in keys if sel_a.get(k) != sel_b.get(k)
    ]
    if (a.manifest is None) != (b.manifest is None):
        selection.insert(
            0,
            {
                "key": "(version)",
                "a": "the build" if a.manifest is None else "a selection",
                "b": "the build" if b.manifest is None else "a selection",
            },
        )
    tomb_a, tomb_b = a.tombstones, b.tombstones
    delta: dict[str, dict[str, dict[str, int]]] = {"bucket": {}, "source": {}, "lang": {}}
    for shard in a.shards:
        bits_a, bits_b = a.selected(shard), b.selected(shard)
        if np.array_equal(bits_a, bits_b):
            continue
        groups = _groups(shard)
        for sign, mask in (("added", bits_b & ~bits_a), ("removed", bits_a & ~bits_b)):
            for axis in ("bucket", "source", "lang"):
                keys_of = (
                    np.full(shard.docs, shard.bucket, dtype=object) if axis == "bucket" else groups[axis]
                )
                for key in sorted(set(keys_of[mask].tolist())):
                    m = mask & (keys_of == key)
                    cell = delta[axis].setdefault(
                        str(key), {"added_docs": 0, "added_tokens": 0, "removed_docs": 0, "removed_tokens": 0}
                    )
                    cell[f"{sign}_docs"] += int(m.sum())
                    cell[f"{sign}_tokens"] += int(groups["tokens"][m].sum())
    return {
        "a": a.snapshot_id,
        "b": b.snapshot_id,
        "identical": a.snapshot_id == b.snapshot_id,
        "selection": selection,
        "tombstones": {
            "added": [tomb_b[n] for n in sorted(tomb_b.keys() - tomb_a.keys())],
            "removed": [tomb_a[n] for n in sorted(tomb_a.keys() - tomb_b.keys())],
        },
        "takedowns": {
            "added": [t for t in b.takedowns if t not in a.takedowns],
            "removed": [t for t in a.takedowns if t not in b.takedowns],
        },
        "documents": {axis: dict(sorted(rows.items())) for axis, rows in delta.items()},
    }


def diff_text(d: dict[str, Any]) -> str:
    lines = [f"a {d['a']}", f"b {d['b']}", "identical" if d["identical"] else "different"]
    for c in d["selection"]:
        lines.append(f"selection {c['key']}: {json.dumps(c['a'])} -> {json.dumps(c['b'])}")
    for t in d["tombstones"]["added"]:
        lines.append(f"tombstone added: {t['name']} ({t['reason']})")
    for t in d["tombstones"]["removed"]:
        lines.append(f"tombstone removed: {t['name']}")
    for sign in ("added", "removed"):
        for t in d["takedowns"][sign]:
            lines.append(f"takedown {sign}: {len(t['doc_ids'])} document(s) of {t['name']} ({t['reason']})")
    for axis, rows in d["documents"].items():
        for key, c in rows.items():
            lines.append(
                f"{axis} {key}: +{c['added_docs']:,} docs / +{c['added_tokens']:,} tokens, "
                f"-{c['removed_docs']:,} docs / -{c['removed_tokens']:,} tokens"
            )
    return "\n".join(lines)
