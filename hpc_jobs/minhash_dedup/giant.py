"""Components too large for one part, verified across every rank: O(N / ranks) of a component per rank.

A template shared by millions of pages is one component (the 14 bands stitch its hot buckets' pieces
together, as they should). ``minhash_dedup`` verifies a component of up to ``distribute_components_above``
members at one part (``clusters`` step); a larger one is verified here, by every rank together, with the
rule of :func:`corpus.dedup.verify.verified_roots` unchanged: inside the component, the members of each
bucket (one band value) are walked in node order, each joined to every one of the bucket's leaders (up to
8: its earliest members that matched no earlier leader) it agrees with on ``verify_threshold``; clusters
are the connected components of the joins; a cluster's representative is its smallest member record,
its id the smallest doc_id. Collective, recomputed while any part of the step it feeds is missing (as
connected components are):

1. **Members at their owners.** Each rank reads the members of its shards (label and signature parts)
   and sends (node, component, representative key) to the owner of the node (``owner_of``, as connected
   components do): a rank holds the members it owns, N / ranks of a component.
2. **Splitters.** Every verified member's band rows (component, band, band value, node) are sorted
   across ranks by range: a deterministic sample of the members (by a hash of the node) goes to rank 0,
   which cuts each (component, band) block into ``ranks`` slices of about equal size. A bucket is
   contiguous in that order and may span ranks.
3. **Buckets.** The rows go to their slice's rank (``shuffle_array``, spilled beyond the budget) and
   arrive sorted; each rank walks its buckets with :func:`corpus.dedup.verify.scan_leaders`, reading
   signatures from the signature parts by location, and writes the joins to its spill directory. A
   bucket of two is compared in one array operation with all the others of its batch.
4. **Bucket leaders along the rank chain.** Only the first bucket of each block on a rank can have
   begun on an earlier rank; its rows wait (spilled) until rank r - 1 sends the block's last bucket
   and its leaders (nodes only, at most 8; sent as soon as its walk closes the block), then it is
   walked from those leaders, and a rank whose slice lies inside one bucket passes the leaders on. A
   bucket spanning k ranks is walked by them one after another (each over its own slice), the other
   blocks meanwhile: time O(bucket), memory O(bucket / ranks).
5. **Clusters** are the connected components of the joins (``mpi_kernels.union_find``; every member
   in it with a self-loop, so a member that joined nobody is its own cluster; a component not to be
   verified is one cluster: its members are linked to its label).
6. **Representatives** by a two-level reduce: each rank's smallest member record and count per
   cluster go to the cluster's owner, whose totals go back to the ranks that hold its members.
7. **Verdicts** (or, per component cut into several clusters, a fact row) leave as
   ``GIANT_VERDICT`` rows, which the stage sends to the part of their shard.

What a rank holds of one component: its owned members (steps 1, 5, 6), its slice of each band's rows
(steps 3-4, spilled beyond the shuffle's budget, walked a batch at a time; the first bucket of each
slice waits, spilled beyond an eighth of the budget); the counts are in :class:`Stats`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from corpus.dedup.records import (
    CLUSTER_PIECE,
    CLUSTER_TOTAL,
    DOC_ID_BYTES,
    DUP,
    GIANT,
    GIANT_VERDICT,
    KEPT,
    MEMBER,
    MEMBER_AT,
    NODE,
    REP_KEY_BYTES,
    SPLIT,
    band_member_dtype,
)
from corpus.dedup.verify import CHUNK, scan_leaders
from mpi_kernels.shuffle import shuffle_array
from mpi_kernels.union_find import connected_components, owner_of, pair_dtype

W = NODE.itemsize
#: leaders per bucket (the rule of ``corpus.dedup.verify``)
MAX_LEADERS = 8
#: members sampled per component for the splitters (or 64 per rank), while the sample of every large
#: component together fits in an eighth of the budget at rank 0 (down to 16 per rank)
SAMPLES = 2048
_CHAIN_TAG = 11


@dataclass(frozen=True)
class Settings:
    bands: int
    rows: int
    num_perm: int
    threshold: float
    verify_above: int
    memory_budget_bytes: int
    spill_dir: Path


@dataclass(frozen=True)
class ShardMembers:
    """One shard's members of distributed components: nodes (NODE bytes), their components' labels, their
    representative keys, and where their signatures are (``sigs[ordinals]``, memory-mapped)."""

    nodes: np.ndarray
    labels: np.ndarray
    rep: np.ndarray
    ordinals: np.ndarray
    sigs: Any


@dataclass
class Stats:
    """What this rank held of one component, counted: its owned members (steps 1, 5, 6) and its rows of
    one (component, band) block (steps 3, 4), the largest of each over the components."""

    components: int = 0
    largest_component: int = 0
    most_members_here: int = 0
    most_band_rows_here: int = 0
    band_rows_here: int = 0
    joins_here: int = 0

    def reduced(self, comm: Any) -> dict[str, int]:
        from mpi4py import MPI

        return {
            "components": self.components,
            "largest_component": self.largest_component,
            "most_members_of_one_component_on_a_rank": comm.allreduce(self.most_members_here, op=MPI.MAX),
            "most_band_rows_of_one_component_and_band_on_a_rank": comm.allreduce(
                self.most_band_rows_here, op=MPI.MAX
            ),
            "most_band_rows_on_a_rank": comm.allreduce(self.band_rows_here, op=MPI.MAX),
            "joins": comm.allreduce(self.joins_here, op=MPI.SUM),
        }


class SpilledRows:
    """Records held in memory up to ``limit`` bytes, beyond that appended to a file under ``spill_dir``
    and read back memory-mapped: a giant component's records are never held whole."""

    def __init__(self, dtype: np.dtype, limit: int, spill_dir: Path) -> None:
        self.dtype, self.limit, self.spill_dir = dtype, limit, spill_dir
        self._chunks: list[bytes] = []
        self._held = 0
        self._file: Any = None
        self._path: Path | None = None
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, rows: np.ndarray) -> None:
        """Add records (an array of ``dtype``)."""
        self._chunks.append(rows.tobytes())
        self._held += rows.nbytes
        self._count += len(rows)
        if self._held > self.limit:
            self._flush()

    def _flush(self) -> None:
        if self._file is None:
            self.spill_dir.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix="component-", dir=self.spill_dir)
            self._file, self._path = os.fdopen(fd, "wb"), Path(name)
        self._file.write(b"".join(self._chunks))
        self._chunks, self._held = [], 0

    @property
    def spilled(self) -> bool:
        return self._path is not None

    def rows(self) -> np.ndarray:
        if self._file is None:
            return np.frombuffer(b"".join(self._chunks), dtype=self.dtype)
        self._flush()
        self._file.flush()
        return np.memmap(self._path, dtype=self.dtype, mode="r", shape=(self._count,))

    def __enter__(self) -> SpilledRows:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._file is not None:
            self._file.close()
            self._path.unlink(missing_ok=True)


def verify_distributed(
    comm: Any,
    giants: np.ndarray,
    members: Callable[[], Iterable[ShardMembers]],
    read_sigs: Callable[[np.ndarray], np.ndarray],
    part_of: Callable[[np.ndarray], np.ndarray],
    cfg: Settings,
) -> tuple[np.ndarray, Stats]:
    """Collective: verdicts on every member of the components ``giants`` (GIANT rows, sorted by label, the
    same on every rank) that this rank owns, as GIANT_VERDICT rows (``part_of(nodes)``: their shard's
    part), and what this rank held. ``members()`` yields this rank's shards' members (called more than
    once); ``read_sigs(nodes)`` reads signatures by location."""
    stats = Stats(components=len(giants), largest_component=int(giants["size"].max()) if len(giants) else 0)
    cfg.spill_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="giant-", dir=cfg.spill_dir))
    try:
        verified = giants[giants["size"].astype(np.int64) > cfg.verify_above]
        # 1. every member at the owner of its node
        table = _members_at_owners(comm, members, cfg, work)
        if len(table):
            _, per = np.unique(table["label"], return_counts=True)
            stats.most_members_here = int(per.max())
        # 2-4. joins of every verified component's buckets, the rank chain included
        joins = work / "joins.bin"
        with open(joins, "wb") as out:
            if len(verified):
                splitters = _splitters(comm, verified, members, cfg)
                _scan_buckets(comm, verified, members, read_sigs, splitters, cfg, out, stats, work)
        # 5. clusters: components of the joins (every member a node; an unverified component one cluster)
        clusters = _clusters(comm, table, joins, verified, cfg, work)
        # 6-7. representatives and verdicts
        return _verdicts(comm, table, clusters, part_of, cfg, work), stats
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- 1. members at their owners -----------------------------------------------------------------------
def _members_at_owners(
    comm: Any, members: Callable[[], Iterable[ShardMembers]], cfg: Settings, work: Path
) -> np.ndarray:
    def batches() -> Iterator[np.ndarray]:
        for m in members():
            rows = np.empty(len(m.nodes), dtype=MEMBER_AT)
            rows["node"], rows["label"], rows["rep"] = m.nodes, m.labels, m.rep
            yield rows

    out = shuffle_array(
        comm,
        batches(),
        dtype=MEMBER_AT,
        dest_of=lambda rows: owner_of(rows["node"]),
        order_fields=("node",),
        memory_budget_bytes=cfg.memory_budget_bytes,
        spill_dir=work,
    )
    return _gathered(out, MEMBER_AT)


def _gathered(out: Any, dtype: np.dtype) -> np.ndarray:
    got = [np.asarray(b).astype(dtype, copy=False) for b in out]
    out.close()
    return np.concatenate(got) if got else np.empty(0, dtype=dtype)


# -- 2. splitters ---------------------------------------------------------------------------------------
def _band_rows(m: ShardMembers, at: np.ndarray, cfg: Settings) -> np.ndarray:
    """The band rows (``band_member_dtype``) of members ``at`` of one shard, every band."""
    dtype = band_member_dtype(cfg.rows)
    b, r = cfg.bands, cfg.rows
    sigs = np.asarray(m.sigs[m.ordinals[at]])[:, : b * r]
    rows = np.empty(len(at) * b, dtype=dtype)
    rows["label"] = np.repeat(m.labels[at], b)
    rows["band"] = np.tile(np.arange(b, dtype=np.uint16), len(at))
    values = np.ascontiguousarray(sigs.astype(">u8")).reshape(len(at) * b, r)
    rows["value"] = values.view(np.uint8).reshape(len(at) * b, 8 * r).view(dtype["value"]).reshape(-1)
    rows["node"] = np.repeat(m.nodes[at], b)
    return rows


def _verified_members(m: ShardMembers, verified: np.ndarray) -> np.ndarray:
    """Indices of the members of ``m`` whose component is to be verified."""
    labels = verified["label"]
    at = np.minimum(np.searchsorted(labels, m.labels), max(len(labels) - 1, 0))
    return np.flatnonzero(labels[at] == m.labels) if len(labels) else np.empty(0, dtype=np.int64)


def _row_keys(rows: np.ndarray) -> np.ndarray:
    rows = np.ascontiguousarray(rows)
    return rows.view(f"V{rows.dtype.itemsize}").reshape(-1)


def _splitters(
    comm: Any, verified: np.ndarray, members: Callable[[], Iterable[ShardMembers]], cfg: Settings
) -> tuple[np.ndarray, np.ndarray]:
    """(keys, ranks): a row goes to the rank of the last key not above it. Each (component, band) block
    starts at rank 0 and is cut at the quantiles of a sample of its members (the same members in every
    band: those whose node hash falls below the component's rate), so its slices grow with the rank."""
    size = comm.Get_size()
    labels, sizes = verified["label"], verified["size"].astype(np.float64)
    want = np.minimum(sizes, max(SAMPLES, 64 * size))
    # what rank 0 gathers stays within an eighth of the budget (fewer samples: slices less even)
    room = max(1, cfg.memory_budget_bytes // (8 * cfg.bands * band_member_dtype(cfg.rows).itemsize))
    if want.sum() > room:
        want = np.maximum(want * (room / want.sum()), np.minimum(sizes, 16.0 * size))
    rate = np.minimum(1.0, want / np.maximum(sizes, 1.0))
    samples = []
    for m in members():
        at = _verified_members(m, verified)
        if not len(at):
            continue
        comp = np.searchsorted(labels, m.labels[at])
        h = (owner_of(m.nodes[at]) >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        picked = at[h < rate[comp]]
        if len(picked):
            samples.append(_band_rows(m, picked, cfg))
    dtype = band_member_dtype(cfg.rows)
    local = np.concatenate(samples) if samples else np.empty(0, dtype=dtype)
    gathered = comm.gather(local, root=0)
    table = None
    if comm.Get_rank() == 0:
        keys = np.sort(_row_keys(np.concatenate(gathered).astype(dtype, copy=False)))
        raw = keys.view(np.uint8).reshape(len(keys), -1)
        head = W + 2  # (label, band): a block
        starts = np.zeros((len(labels) * cfg.bands, dtype.itemsize), dtype=np.uint8)
        starts[:, :W] = np.repeat(labels, cfg.bands).view(np.uint8).reshape(-1, W)
        starts[:, W:head] = (
            np.tile(np.arange(cfg.bands, dtype=">u2"), len(labels)).view(np.uint8).reshape(-1, 2)
        )
        out_keys, out_ranks = [starts], [np.zeros(len(starts), dtype=np.int64)]
        if len(raw):
            new = np.ones(len(raw), dtype=bool)
            new[1:] = np.any(raw[1:, :head] != raw[:-1, :head], axis=1)
            bounds = np.append(np.flatnonzero(new), len(raw))
            for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
                cuts = [lo + (hi - lo) * j // size for j in range(1, size)]
                out_keys.append(raw[cuts])
                out_ranks.append(np.arange(1, size, dtype=np.int64))
        all_keys = np.ascontiguousarray(np.concatenate(out_keys)).view(f"V{dtype.itemsize}").reshape(-1)
        all_ranks = np.concatenate(out_ranks)
        order = np.argsort(all_keys, kind="stable")
        table = (all_keys[order], all_ranks[order])
    return comm.bcast(table, root=0)


# -- 3-4. buckets, walked in node order, along the rank chain -------------------------------------------
@dataclass
class _Block:
    """This rank's slice of one (component, band) block."""

    first: bytes  # its first bucket (the one an earlier rank may have begun)
    start: int  # where that bucket's nodes begin in the waiting rows
    waiting: int = 0
    last: bytes = b""
    last_leaders: list[bytes] = field(default_factory=list)
    single: bool = True  # the slice is one bucket: its leaders are known only after the chain
    rows: int = 0


class _BucketWalk:
    """One rank's band rows, sorted, walked bucket by bucket (a bucket: one band value in one
    component). The first bucket of each block waits in ``waiting`` (its leaders may come from the
    previous rank); every other bucket is walked as it streams by, its joins written to ``out``."""

    def __init__(
        self,
        read_sigs: Callable[[np.ndarray], np.ndarray],
        cfg: Settings,
        block_of: Callable[[bytes], int],
        out: Any,
        waiting: SpilledRows,
        ended: Callable[[int, _Block], None],
    ) -> None:
        self.read_sigs, self.cfg, self.block_of = read_sigs, cfg, block_of
        self.out, self.waiting, self.ended = out, waiting, ended
        self.dtype = band_member_dtype(cfg.rows)
        self.group = W + 2 + 8 * cfg.rows  # bytes of (label, band, value): a bucket's key
        self.blocks: dict[int, _Block] = {}
        self.key: bytes | None = None  # the open bucket
        self.block: _Block | None = None
        self.lead_nodes: list[bytes] = []
        self.lead_sigs = np.empty((0, cfg.num_perm), dtype=np.uint64)
        self.joins = 0
        self._block_key: bytes | None = None
        self._rows: dict[int, int] = {}  # rows per block

    # -- streaming
    def feed(self, batch: np.ndarray) -> None:
        batch = np.ascontiguousarray(np.asarray(batch).astype(self.dtype, copy=False))
        n = len(batch)
        if not n:
            return
        raw = batch.view(np.uint8).reshape(n, -1)
        nodes = np.ascontiguousarray(batch["node"])
        g, h = self.group, W + 2
        new = np.ones(n, dtype=bool)
        new[1:] = np.any(raw[1:, :g] != raw[:-1, :g], axis=1)
        if self.key is not None and raw[0, :g].tobytes() == self.key:
            new[0] = False
        lo = np.union1d([0], np.flatnonzero(new))
        hi = np.append(lo[1:], n)
        size = hi - lo
        block_new = np.ones(len(lo), dtype=bool)
        block_new[1:] = np.any(raw[lo[1:], :h] != raw[lo[:-1], :h], axis=1)
        if self.block is not None and raw[0, :h].tobytes() == self._block_key:
            block_new[0] = False
        block_last = np.append(block_new[1:], True)
        # rows per block
        heads = lo[block_new] if block_new[0] else np.append(0, lo[block_new])
        for b0, b1 in zip(heads.tolist(), [*heads[1:].tolist(), n], strict=True):
            b = self.block_of(raw[b0, :h].tobytes())
            self._rows[b] = self._rows.get(b, 0) + b1 - b0
        # 1. buckets in the middle of a block, of one or two rows: all at once
        bulk = new[lo] & ~block_new & ~block_last & (size <= 2)
        pairs = lo[bulk & (size == 2)]
        for c in range(0, len(pairs), CHUNK):
            first, second = pairs[c : c + CHUNK], pairs[c : c + CHUNK] + 1
            a, b = self.read_sigs(nodes[second]), self.read_sigs(nodes[first])
            agree = (a == b).sum(axis=1) / self.cfg.num_perm >= self.cfg.threshold
            self._write(nodes[second[agree]], nodes[first[agree]])
        # 2. the others in order: a bucket continued from the last batch, a block's first, its last
        for s in np.flatnonzero(~bulk).tolist():
            rows = nodes[lo[s] : hi[s]]
            if new[lo[s]]:
                if block_new[s]:
                    self._close_block()
                    self._open_block(raw[lo[s], :h].tobytes(), raw[lo[s], :g].tobytes())
                else:
                    self._open_bucket(raw[lo[s], :g].tobytes())
            self._extend(rows)

    def finish(self) -> None:
        self._close_block()
        for b, n in self._rows.items():
            self.blocks[b].rows = n

    def _open_block(self, block_key: bytes, key: bytes) -> None:
        self._block_key = block_key
        self.block = self.blocks[self.block_of(block_key)] = _Block(first=key, start=len(self.waiting))
        self.key, self.lead_nodes = key, []
        self.lead_sigs = self.lead_sigs[:0]

    def _open_bucket(self, key: bytes) -> None:
        self.block.single = False
        self.key, self.lead_nodes = key, []
        self.lead_sigs = self.lead_sigs[:0]

    def _extend(self, nodes: np.ndarray) -> None:
        if self.block.single:  # still the block's first bucket: it waits for the chain
            self.waiting.append(nodes)
            self.block.waiting += len(nodes)
        else:
            self.lead_nodes, self.lead_sigs = self.walk(nodes, self.lead_nodes, self.lead_sigs)

    def _close_block(self) -> None:
        if self.block is not None:
            self.block.last = self.key
            self.block.last_leaders = [] if self.block.single else list(self.lead_nodes)
            if not self.block.single:  # how the slice ends is known now: the next rank may go on
                self.ended(self.block_of(self._block_key), self.block)
        self.block, self.key = None, None

    # -- the rule
    def walk(
        self, nodes: np.ndarray, lead_nodes: list[bytes], lead_sigs: np.ndarray
    ) -> tuple[list[bytes], np.ndarray]:
        """Walk ``nodes`` (node order) of one bucket after its leaders so far; write the joins; return
        the leaders after them."""
        nodes = np.asarray(nodes)
        if not len(nodes):
            return lead_nodes, lead_sigs
        found, new = scan_leaders(
            lambda a, b: self.read_sigs(nodes[a:b]),
            len(nodes),
            lead_sigs,
            self.cfg.num_perm,
            self.cfg.threshold,
            MAX_LEADERS,
        )
        leaders = np.concatenate([np.array(lead_nodes, dtype=f"V{W}"), nodes[new]])
        for m, ld in found:
            self._write(nodes[m], leaders[ld])
        if len(new):
            lead_sigs = np.concatenate([lead_sigs, self.read_sigs(nodes[new])])
        return [bytes(x) for x in leaders.tolist()], lead_sigs

    def _write(self, members: np.ndarray, leaders: np.ndarray) -> None:
        if len(members):
            pairs = np.empty(len(members), dtype=pair_dtype(W))
            pairs["u"], pairs["v"] = members, leaders
            self.out.write(pairs.tobytes())
            self.joins += len(members)


def _scan_buckets(
    comm: Any,
    verified: np.ndarray,
    members: Callable[[], Iterable[ShardMembers]],
    read_sigs: Callable[[np.ndarray], np.ndarray],
    splitters: tuple[np.ndarray, np.ndarray],
    cfg: Settings,
    out: Any,
    stats: Stats,
    work: Path,
) -> None:
    dtype = band_member_dtype(cfg.rows)
    keys, ranks = splitters
    index = {bytes(lab): i for i, lab in enumerate(verified["label"].tolist())}

    def block_of(block_key: bytes) -> int:
        return index[block_key[:W]] * cfg.bands + int.from_bytes(block_key[W : W + 2], "big")

    def dest_of(rows: np.ndarray) -> np.ndarray:
        return ranks[np.searchsorted(keys, _row_keys(rows.astype(dtype, copy=False)), side="right") - 1]

    per_batch = max(1, (cfg.memory_budget_bytes // 16) // (cfg.bands * dtype.itemsize))

    def batches() -> Iterator[np.ndarray]:
        for m in members():
            at = _verified_members(m, verified)
            for c in range(0, len(at), per_batch):
                yield _band_rows(m, at[c : c + per_batch], cfg)

    received = shuffle_array(
        comm,
        batches(),
        dtype=dtype,
        dest_of=dest_of,
        order_fields=("label", "band", "value", "node"),
        memory_budget_bytes=cfg.memory_budget_bytes,
        spill_dir=work,
    )
    rank, size = comm.Get_rank(), comm.Get_size()
    chain = comm.Dup()  # step 4's messages, apart from the shuffles'
    sends: list[Any] = []

    def ended(b: int, blk: _Block) -> None:
        """A slice of several buckets is closed: rank + 1 learns at once how it ended."""
        if rank + 1 < size:
            sends.append(chain.isend((b, blk.last, blk.last_leaders), dest=rank + 1, tag=_CHAIN_TAG))

    try:
        with SpilledRows(np.dtype(f"V{W}"), max(cfg.memory_budget_bytes // 8, W), work) as waiting:
            walk = _BucketWalk(read_sigs, cfg, block_of, out, waiting, ended)
            try:
                for batch in received:
                    walk.feed(batch)
            finally:
                received.close()
            walk.finish()
            stats.band_rows_here = sum(b.rows for b in walk.blocks.values())
            stats.most_band_rows_here = max((b.rows for b in walk.blocks.values()), default=0)
            _chain(chain, len(verified) * cfg.bands, walk, waiting.rows(), sends)
            stats.joins_here = walk.joins
    finally:
        chain.Free()


def _chain(chain: Any, blocks: int, walk: _BucketWalk, waiting: np.ndarray, sends: list[Any]) -> None:
    """Step 4: rank r walks the first bucket of each of its blocks after the leaders rank r - 1 ended
    that block with (when the bucket is the same), and tells rank r + 1 how its slice of each block
    ended: (last bucket, its leaders) -- passed on from r - 1 where its slice is empty or one bucket.
    A slice of several buckets was reported as soon as the walk closed it (``sends``), so no rank waits
    on a later one, and rank r + 1 walks a block's first bucket while rank r walks the next block."""
    rank, size = chain.Get_rank(), chain.Get_size()
    inbox: dict[int, tuple[bytes | None, list[bytes]]] = {}
    for b in range(blocks):
        came: tuple[bytes | None, list[bytes]] = (None, [])
        if rank > 0:
            while b not in inbox:
                got, key, leaders = chain.recv(source=rank - 1, tag=_CHAIN_TAG)
                inbox[got] = (key, leaders)
            came = inbox.pop(b)
        blk = walk.blocks.get(b)
        if blk is None:  # nothing of this block here: pass on what came
            ends = came
        else:
            lead_nodes = came[1] if came[0] == blk.first else []
            lead_sigs = (
                walk.read_sigs(np.array(lead_nodes, dtype=f"V{W}"))
                if lead_nodes
                else (np.empty((0, walk.cfg.num_perm), dtype=np.uint64))
            )
            nodes = waiting[blk.start : blk.start + blk.waiting]
            leaders = lead_nodes
            for c in range(0, len(nodes), 1 << 16):
                leaders, lead_sigs = walk.walk(np.asarray(nodes[c : c + (1 << 16)]), leaders, lead_sigs)
            ends = (blk.first, leaders) if blk.single else None
        if rank + 1 < size and ends is not None:
            sends.append(chain.isend((b, *ends), dest=rank + 1, tag=_CHAIN_TAG))
    for req in sends:
        req.wait()


# -- 5. clusters ----------------------------------------------------------------------------------------
def _clusters(
    comm: Any, table: np.ndarray, joins: Path, verified: np.ndarray, cfg: Settings, work: Path
) -> np.ndarray:
    """Each owned member's cluster (the smallest node of its joins' component), aligned with ``table``."""
    dtype = pair_dtype(W)
    labels = verified["label"]

    def edges() -> Iterator[np.ndarray]:
        rows = np.empty(len(table), dtype=dtype)
        rows["u"] = table["node"]
        rows["v"] = table["node"]  # a self-loop: a member that joined nobody is a cluster of its own
        if len(labels):
            at = np.minimum(np.searchsorted(labels, table["label"]), len(labels) - 1)
            unverified = labels[at] != table["label"]
        else:
            unverified = np.ones(len(table), dtype=bool)
        rows["v"][unverified] = table["label"][unverified]  # an unverified component is one cluster
        yield rows
        with open(joins, "rb") as f:
            while True:
                got = np.fromfile(f, dtype=dtype, count=1 << 16)
                if not len(got):
                    return
                yield got

    found = connected_components(
        comm, edges(), width=W, memory_budget_bytes=cfg.memory_budget_bytes, spill_dir=work
    ).labels
    if len(found) != len(table) or not np.array_equal(found["u"], table["node"]):
        raise RuntimeError("distributed verification: the clusters' nodes are not the members held here")
    return np.ascontiguousarray(found["v"])


# -- 6-7. representatives and verdicts ------------------------------------------------------------------
def _member_records(table: np.ndarray) -> np.ndarray:
    """MEMBER bytes (representative key, ordinal, shard tag) of each row of ``table``."""
    raw = np.empty((len(table), MEMBER.itemsize), dtype=np.uint8)
    raw[:, :REP_KEY_BYTES] = np.ascontiguousarray(table["rep"]).view(np.uint8).reshape(-1, REP_KEY_BYTES)
    raw[:, REP_KEY_BYTES:] = (
        np.ascontiguousarray(table["node"]).view(np.uint8).reshape(-1, W)[:, DOC_ID_BYTES:]
    )
    return raw.view(f"V{MEMBER.itemsize}").reshape(-1)


def _group_starts(keys: np.ndarray) -> np.ndarray:
    if not len(keys):
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(np.append(True, keys[1:] != keys[:-1]))


def _verdicts(
    comm: Any,
    table: np.ndarray,
    clusters: np.ndarray,
    part_of: Callable[[np.ndarray], np.ndarray],
    cfg: Settings,
    work: Path,
) -> np.ndarray:
    rank = comm.Get_rank()
    budget = cfg.memory_budget_bytes
    records = _member_records(table)
    # 6a. this rank's piece of each cluster: count and smallest member record
    keyed = np.empty((len(table), W + MEMBER.itemsize), dtype=np.uint8)
    keyed[:, :W] = np.ascontiguousarray(clusters).view(np.uint8).reshape(-1, W)
    keyed[:, W:] = np.ascontiguousarray(records).view(np.uint8).reshape(-1, MEMBER.itemsize)
    order = np.argsort(keyed.view(f"V{keyed.shape[1]}").reshape(-1), kind="stable")
    c_sorted = clusters[order]
    heads = _group_starts(c_sorted)
    pieces = np.empty(len(heads), dtype=CLUSTER_PIECE)
    pieces["cluster"] = c_sorted[heads]
    pieces["label"] = table["label"][order][heads]
    pieces["count"] = np.diff(np.append(heads, len(order)))
    pieces["best"] = records[order][heads]
    pieces["rank"] = rank
    got = _gathered(
        shuffle_array(
            comm,
            [pieces],
            dtype=CLUSTER_PIECE,
            dest_of=lambda r: owner_of(r["cluster"]),
            order_fields=("cluster", "best"),
            memory_budget_bytes=budget,
            spill_dir=work,
        ),
        CLUSTER_PIECE,
    )
    # 6b. at the cluster's owner: its size and smallest record, back to every rank holding a piece
    heads = _group_starts(np.ascontiguousarray(got["cluster"]))
    sizes = np.add.reduceat(got["count"].astype(np.int64), heads) if len(heads) else np.empty(0, np.int64)
    per_piece = np.repeat(np.arange(len(heads)), np.diff(np.append(heads, len(got))))
    totals = np.empty(len(got), dtype=CLUSTER_TOTAL)
    totals["rank"] = got["rank"]
    totals["cluster"] = got["cluster"]
    totals["size"] = sizes[per_piece] if len(got) else 0
    totals["best"] = got["best"][heads][per_piece] if len(got) else got["best"]
    # a component's clusters are counted at the owner of its label: cut into several = verified apart
    cut = np.empty(len(heads), dtype=[("node", f"V{W}"), ("clusters", ">u8")])
    cut["node"], cut["clusters"] = got["label"][heads], 1
    back = _gathered(
        shuffle_array(
            comm,
            [totals],
            dtype=CLUSTER_TOTAL,
            dest_of=lambda r: r["rank"].astype(np.int64),
            order_fields=("cluster",),
            memory_budget_bytes=budget,
            spill_dir=work,
        ),
        CLUSTER_TOTAL,
    )
    per_label = _gathered(
        shuffle_array(
            comm,
            [cut],
            dtype=cut.dtype,
            dest_of=lambda r: owner_of(r["node"]),
            order_fields=("node",),
            memory_budget_bytes=budget,
            spill_dir=work,
        ),
        cut.dtype,
    )
    # 7. a verdict per member of a cluster of two or more; a fact per component cut apart
    back = back[np.unique(np.ascontiguousarray(back["cluster"]), return_index=True)[1]]
    at = np.searchsorted(np.ascontiguousarray(back["cluster"]), clusters)
    size = back["size"].astype(np.int64)[at] if len(back) else np.empty(0, np.int64)
    best = back["best"][at] if len(back) else back["best"]
    out = np.flatnonzero(size > 1)
    verdicts = np.empty(len(out), dtype=GIANT_VERDICT)
    nodes = np.ascontiguousarray(table["node"][out])
    verdicts["part"] = part_of(nodes) if len(out) else 0
    verdicts["ordinal"] = nodes.view(NODE)["ordinal"]
    verdicts["kind"] = np.where(records[out] == best[out], KEPT, DUP)
    doc_id = f"V{DOC_ID_BYTES}"
    verdicts["cluster"] = (
        np.ascontiguousarray(clusters[out])
        .view(np.uint8)
        .reshape(-1, W)[:, :DOC_ID_BYTES]
        .copy()
        .view(doc_id)
        .reshape(-1)
    )
    verdicts["size"] = size[out]
    best_raw = np.ascontiguousarray(best[out]).view(np.uint8).reshape(-1, MEMBER.itemsize)
    verdicts["rep"] = (
        np.ascontiguousarray(best_raw[:, REP_KEY_BYTES - DOC_ID_BYTES : REP_KEY_BYTES])
        .view(doc_id)
        .reshape(-1)
    )
    heads = _group_starts(np.ascontiguousarray(per_label["node"]))
    counts = (
        np.add.reduceat(per_label["clusters"].astype(np.int64), heads)
        if len(heads)
        else np.empty(0, np.int64)
    )
    split_nodes = np.ascontiguousarray(per_label["node"][heads][counts > 1])
    facts = np.zeros(len(split_nodes), dtype=GIANT_VERDICT)
    facts["part"] = part_of(split_nodes) if len(split_nodes) else 0
    facts["ordinal"] = split_nodes.view(NODE)["ordinal"]
    facts["kind"] = SPLIT
    return np.concatenate([verdicts, facts]).astype(GIANT_VERDICT)  # concatenate may go native-endian


def giant_labels(parts: Iterable[np.ndarray]) -> np.ndarray:
    """GIANT rows of every part, sorted by label (each label is in one part)."""
    got = [p for p in parts if len(p)]
    rows = np.concatenate(got) if got else np.empty(0, dtype=GIANT)
    return rows[np.argsort(np.ascontiguousarray(rows["label"]), kind="stable")]
