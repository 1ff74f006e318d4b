"""How a dedup stage's global phase hands its verdicts to the per-shard phase, and how it is checkpointed.

The global phase (collective, in ``Stage.prepare``) ends by routing every verdict to the rank that owns
its input shard's name and writing one decision file per input shard, ``work/decisions/NAME.json``:
canonical JSON ``{document key: verdict}``. Every shard gets a file, empty when nothing happened to it,
so a stale file from an earlier run is always replaced. ``work/global.json`` is written last by rank 0,
keyed by the stage version, config and input digests: while it matches, a rerun (after a killed rank,
say) skips the global phase and gets the same digest, so the runner skips the shards already written.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from itertools import chain, groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

from corpus.digest import canonical_json, file_sha256, json_digest
from corpus.docshard import atomic_write_bytes, atomic_write_json, iter_docs
from corpus.model import Document
from mpi_kernels.shuffle import shuffle_by_key
from runtime.runner import assign

DECISIONS = "decisions"
CHECKPOINT = "global.json"
SPILL = "spill"


def decisions_path(work_dir: Path, shard_name: str) -> Path:
    return Path(work_dir) / DECISIONS / f"{shard_name}.json"


def decided_docs(work_dir: Path, shard: Any) -> Iterator[tuple[Document, int, Any]]:
    """Each document of an input shard with its UTF-8 size and the global phase's verdict on it
    (None: the phase had nothing to say, the document is kept as it is)."""
    p = decisions_path(work_dir, shard.name)
    if not p.exists():
        raise FileNotFoundError(f"{p}: the global dedup phase did not write this shard's decisions")
    decisions = json.loads(p.read_bytes())
    for i, doc in enumerate(iter_docs(shard.path)):
        yield doc, len(doc.text.encode("utf-8")), decisions.get(str(i))


def route_decisions(
    comm: Any,
    verdicts: Iterable[tuple[str, str, Any]],
    shards_read_here: Iterable[str],
    work_dir: Path,
    memory_budget_bytes: int = 256 << 20,
) -> int:
    """Collective: send each (shard name, document key, verdict) to the owner of the shard name, which
    writes the shard's decision file. Every shard must be named in exactly one rank's ``shards_read_here``.
    Returns how many decision files this rank wrote."""
    sentinels = ((name.encode(), b"") for name in shards_read_here)
    records = ((shard.encode(), canonical_json([key, v])) for shard, key, v in verdicts)
    received = shuffle_by_key(
        comm,
        chain(sentinels, records),
        memory_budget_bytes=memory_budget_bytes,
        spill_dir=Path(work_dir) / "spill",
    )
    written = 0
    for shard, group in groupby(received, key=itemgetter(0)):
        table = dict(json.loads(payload) for _, payload in group if payload)
        atomic_write_bytes(decisions_path(work_dir, shard.decode()), canonical_json(table))
        written += 1
    return written


class GlobalCheckpoint:
    """The marker that a stage's global phase is complete, valid only for the same key."""

    def __init__(self, work_dir: Path, key: dict[str, Any]) -> None:
        self.work_dir = Path(work_dir)
        self.path = self.work_dir / CHECKPOINT
        self.key = key

    def load(self) -> dict[str, Any] | None:
        if not self.path.exists():
            return None
        data = json.loads(self.path.read_text())
        return data if data.get("key") == self.key else None

    def invalidate(self) -> None:
        self.path.unlink(missing_ok=True)

    def save(
        self, shard_names: list[str], facts: dict[str, Any], extra_files: Iterable[Path] = ()
    ) -> dict[str, Any]:
        """Digest every decision file (and any other global artifact) with the facts; remove decision
        files of shards no longer among the inputs. Rank 0 only, after a barrier."""
        names = set(shard_names)
        d = self.work_dir / DECISIONS
        for p in sorted(d.glob("*.json")) if d.is_dir() else []:
            if p.name[: -len(".json")] not in names:
                p.unlink()
        files = {
            f"{DECISIONS}/{n}.json": file_sha256(decisions_path(self.work_dir, n)) for n in sorted(names)
        }
        for p in extra_files:
            files[str(Path(p).relative_to(self.work_dir))] = file_sha256(p)
        body = {"key": self.key, "files": files, "facts": facts}
        data = {**body, "digest": json_digest(body)}
        atomic_write_json(self.path, data)
        return data


def progress(ctx: Any, stage: str, msg: str) -> None:
    """A per-rank progress line on stderr, in the runner's format."""
    print(f"{time.strftime('%H:%M:%S')} [{stage} r{ctx.rank}/{ctx.size}] {msg}", file=sys.stderr, flush=True)


def global_phase_key(stage: Any, inputs: Iterable[Any], **extra: Any) -> dict[str, Any]:
    """What a stage's global phase depends on: code version, config and every input shard's digest."""
    from corpus.config import config_hash

    return {
        "stage": stage.name,
        "version": stage.version,
        "config_hash": config_hash(stage.config),
        "inputs": sorted([s.name, s.sha256] for s in inputs),
        **extra,
    }


def checkpointed_global_phase(
    ctx: Any,
    key: dict[str, Any],
    inputs: list[Any],
    compute: Any,
    merge_facts: Any,
    *,
    decisions: bool = True,
    artifacts: Iterable[Path] = (),
) -> str:
    """Run ``compute(my_shards) -> facts`` collectively unless the checkpoint for ``key`` exists; rank 0
    merges every rank's facts with ``merge_facts(list)`` and writes the checkpoint. Returns its digest,
    which covers the per-shard decision files (when ``decisions``) and the other ``artifacts``."""
    comm = ctx.comm
    ckpt = GlobalCheckpoint(ctx.work_dir, key)
    done = ckpt.load() if ctx.rank == 0 else None
    done = comm.bcast(done, root=0)
    if done is not None:
        if ctx.rank == 0:
            progress(ctx, key["stage"], f"global phase complete already ({done['digest'][:19]}…): reused")
        return done["digest"]
    if ctx.rank == 0:
        ckpt.invalidate()
        shutil.rmtree(Path(ctx.work_dir) / SPILL, ignore_errors=True)  # runs left by a killed rank
    comm.Barrier()
    t0 = time.monotonic()
    facts = compute(assign(inputs, ctx.rank, ctx.size))
    progress(ctx, key["stage"], f"global phase done on this rank in {time.monotonic() - t0:.1f}s")
    gathered = comm.gather(facts, root=0)
    comm.Barrier()
    digest = None
    if ctx.rank == 0:
        names = [s.name for s in inputs] if decisions else []
        digest = ckpt.save(names, merge_facts(gathered), artifacts)["digest"]
    return comm.bcast(digest, root=0)


def global_facts(ctx: Any, key: dict[str, Any]) -> dict[str, Any]:
    data = GlobalCheckpoint(ctx.work_dir, key).load()
    if data is None:
        raise FileNotFoundError(f"{ctx.work_dir / CHECKPOINT}: the global phase has not completed")
    return data["facts"]
