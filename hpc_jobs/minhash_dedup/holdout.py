"""Near copies of the eval holdout's pages (``corpus.decont.holdout``), found in the bucket parts.

Held-out pages are signed (``holdout_signatures``) but never enter the graph: each bucket part
matches its candidates' band keys against theirs and keeps the pairs whose signatures agree on at
least ``verify_threshold``; step ``holdout`` routes the best agreement per candidate to its shard's
part. Clusters, representatives and every other output are as without them. docs/dedup.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from corpus.decont.holdout import HoldoutFile
from corpus.dedup.candidates import concat
from corpus.dedup.records import BAND_KEY_BYTES, NODE, shard_numbers
from hpc_jobs.minhash_dedup.phase import BUCKETS, HOLDOUT, Run, group_units, signature_rows
from hpc_jobs.minhash_dedup.signatures import HELD_TAG
from runtime.global_phase import PartWriter

#: a candidate that matched a held-out page in one bucket part, with the best agreement found there
HIT = np.dtype([("node", NODE), ("agree", ">u2")])
#: a HIT on its way to the candidate's shard part, and what that part writes (ordinal ascending)
HIT_ROUTE = np.dtype([("part", ">u4"), ("ordinal", ">u4"), ("agree", ">u2")])
NEAR = np.dtype([("ordinal", ">u4"), ("agree", ">u2")])
HITS = ".holdout_hits"
NEAR_ROWS = ".holdout"
#: candidate/held-out pairs verified at once (two signatures each in memory)
PAIR_BATCH = 1 << 14


def holdout_hits(run: Run, rows: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, int]:
    """The candidates of a bucket part's band ``rows`` that share a bucket with a held-out page
    (``held``: the held-out pages' band rows of the part) and agree with it on at least
    ``verify_threshold`` of their signatures: HIT rows, one per candidate (its best agreement),
    node ascending; and the number of distinct (candidate, held-out page) pairs checked."""
    if not len(rows) or not len(held):
        return np.empty(0, HIT), 0
    hkey = np.ascontiguousarray(held["key"]).view(f"V{BAND_KEY_BYTES}").reshape(-1)
    order = np.argsort(hkey, kind="stable")
    hkey, hnode = hkey[order], held["node"][order]
    ckey = np.ascontiguousarray(rows["key"]).view(f"V{BAND_KEY_BYTES}").reshape(-1)
    lo, hi = np.searchsorted(hkey, ckey, "left"), np.searchsorted(hkey, ckey, "right")
    count = hi - lo
    match = np.flatnonzero(count)
    if not len(match):
        return np.empty(0, HIT), 0
    n = count[match]
    first = np.repeat(np.cumsum(n) - n, n)
    pairs = np.empty(int(n.sum()), dtype=[("node", NODE), ("held", NODE)])
    pairs["node"] = rows["node"][np.repeat(match, n)]
    pairs["held"] = hnode[np.repeat(lo[match], n) + np.arange(len(pairs)) - first]
    pairs = np.unique(pairs.view(f"V{pairs.dtype.itemsize}").reshape(-1)).view(pairs.dtype)
    k = run.config.num_perm
    agree = np.empty(len(pairs), dtype=np.int64)
    held_names = [HELD_TAG + name for name in run.held_names]
    for at in range(0, len(pairs), PAIR_BATCH):
        p = pairs[at : at + PAIR_BATCH]
        c = signature_rows(run.text.parts, p["node"], run.shards)
        h = signature_rows(run.held_parts, p["held"], held_names)
        agree[at : at + len(p)] = (c == h).sum(axis=1)
    good = agree / k >= run.config.verify_threshold
    if not good.any():
        return np.empty(0, HIT), len(pairs)
    nodes, agree = pairs["node"][good], agree[good]
    # pairs are sorted by (candidate node, held-out node): each candidate's rows are one run
    raw = np.ascontiguousarray(nodes).view(np.uint8).reshape(len(nodes), -1)
    starts = np.flatnonzero(np.append(True, np.any(raw[1:] != raw[:-1], axis=1)))
    hits = np.empty(len(starts), dtype=HIT)
    hits["node"] = nodes[starts]
    hits["agree"] = np.maximum.reduceat(agree, starts)
    return hits, len(pairs)


def route_holdout(run: Run) -> None:
    """Step ``holdout``: every bucket part's hits to the part of their candidate's shard, which
    writes its NEAR rows (ordinal ascending, the best agreement over every part)."""
    phase, shards = run.phase, run.shards
    units = group_units(run.text.groups)

    def send(unit: Any) -> Iterator[np.ndarray]:
        hits = np.fromfile(phase.part(BUCKETS, unit.name).path(HITS), dtype=HIT)
        rows = np.empty(len(hits), dtype=HIT_ROUTE)
        rows["part"] = shard_numbers(hits["node"]["shard_tag"], shards)
        rows["ordinal"] = hits["node"]["ordinal"]
        rows["agree"] = hits["agree"]
        yield rows

    def reduce(_: int, batches: Iterator[np.ndarray], writer: PartWriter) -> dict[str, Any]:
        got = [b for b in batches if len(b)]
        rows = concat(got, HIT_ROUTE) if got else np.empty(0, HIT_ROUTE)
        # sorted by (ordinal, agree): the last row of each ordinal has its best agreement
        last = np.flatnonzero(np.append(rows["ordinal"][1:] != rows["ordinal"][:-1], len(rows) > 0))
        out = np.empty(len(last), dtype=NEAR)
        out["ordinal"], out["agree"] = rows["ordinal"][last], rows["agree"][last]
        writer.open(NEAR_ROWS).write(out.tobytes())
        return {"holdout_near_docs": len(out)}

    phase.exchange_rows(
        HOLDOUT, shards, units, send, reduce, dtype=HIT_ROUTE, order_fields=("ordinal", "agree")
    )


def near_holdout(phase_root: Path, held: list[HoldoutFile], shard_name: str) -> dict[int, int]:
    """ordinal -> agreement with the closest held-out page, for a shard's candidates that matched one."""
    if not held:
        return {}
    rows = np.fromfile(phase_root / HOLDOUT / f"{shard_name}{NEAR_ROWS}", dtype=NEAR)
    return dict(zip(rows["ordinal"].tolist(), rows["agree"].tolist(), strict=True))
