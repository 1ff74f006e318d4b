"""A delta build's candidates take over its base's: shards, copies and doc_id indexes, by reference.

``base`` in the candidates directory is a relative link to the base's candidates and the listed paths go
through it (``base/shards/…``), so they never say where the builds lie; a base that was itself a delta
passes its own base's on (``base/base/…``), oldest first. See docs/snapshot.md ("The snapshot") and
docs/incremental.md.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from corpus.model import SnapshotManifest, SnapshotShard
from corpus.model.errors import UserError
from corpus.model.facts import BaseCandidates, MissingFacts, ShardNumbering, SnapshotFacts
from corpus.model.layout import BASE_CANDIDATES, MANIFEST, base_build_of, candidates_dir
from corpus.version.open import as_taken_down
from corpus.version.takedown import read_log


@dataclass(frozen=True)
class Inherited:
    """What a delta's candidates take over from its base's candidates, paths through the delta's
    ``base`` link: the shards (the base's first), the exact copies' provenance files, the
    doc_id indexes (oldest first, each as (parts, prefix bits)) and ``extra.base``."""

    base: BaseCandidates
    shards: list[SnapshotShard]
    copies: list[dict[str, Any]]
    doc_indexes: list[tuple[list[dict[str, Any]], int]]
    #: the documents taken down of the base's shards (``corpus takedown``, and what the base inherited)
    takedowns: list[dict[str, Any]]


def inherit_base(
    build_dir: Path, snap: Path, numbered: ShardNumbering | None, tokenizer: dict[str, Any]
) -> Inherited | None:
    """The base candidates of a build made with ``--base`` (found through the build layout), or None;
    links ``snap/base`` to them (relative). Refused in one line when write_shards did not number its
    shards (``numbered``) after these very candidates (its doc_id index would point at other shards) or
    when the base was tokenized otherwise (one shard list holds one tokenizer's ids)."""
    found = base_build_of(build_dir)
    if found is None:
        return None
    base_dir, label = found
    base_cand = candidates_dir(base_dir)
    try:
        m = SnapshotManifest.from_dict(json.loads((base_cand / MANIFEST).read_text()), base_cand)
    except FileNotFoundError:
        raise UserError(f"the build's base {base_dir} has no candidates (moved or deleted?)") from None
    if (
        m.snapshot_id != label
        or numbered is None
        or (numbered.label, numbered.shards) != (label, len(m.shards))
    ):
        raise UserError(
            f"write_shards of {build_dir} did not number its shards after the base candidates {label} "
            f"(found {m.snapshot_id} at {base_cand}): rerun the build from write_shards"
        )
    if (m.tokenizer.get("sha256"), m.token_dtype) != (tokenizer["sha256"], tokenizer["token_dtype"]):
        raise UserError(
            f"the base {base_dir} was tokenized with {m.tokenizer.get('name')} ({m.token_dtype}), this build "
            f"with {tokenizer['name']} ({tokenizer['token_dtype']}): one candidates list holds one tokenizer's "
            "ids; rebuild without --base"
        )
    os.symlink(os.path.relpath(base_cand.resolve(), snap.resolve()), snap / BASE_CANDIDATES)

    def moved(path: str) -> str:
        return f"{BASE_CANDIDATES}/{path}"

    facts = SnapshotFacts.of(m)
    try:
        base = BaseCandidates.of(m)
        doc_indexes = [
            (
                [{**ref.to_dict(), "path": moved(ref.path), "docs": n} for ref, n in index.parts],
                index.prefix_bits,
            )
            for index in facts.doc_indexes()
        ]
    except MissingFacts as e:
        raise UserError(f"the build's base {base_dir}: {e}") from None
    log = read_log(base_cand)
    current = {t["name"]: t for t in log}  # a shard's last takedown holds the digests of its bytes now
    return Inherited(
        base=base,
        shards=[
            as_taken_down(
                replace(s, path=moved(s.path), files={r: moved(f) for r, f in s.files.items()}),
                current,
                moved,
            )
            for s in m.shards
        ],
        copies=[{**c.to_dict(), "path": moved(c.path)} for c in facts.copies],
        doc_indexes=doc_indexes,
        takedowns=[
            *m.extra.get("takedowns", []),
            *({k: t[k] for k in ("name", "doc_ids", "indices", "reason")} for t in log),
        ],
    )
