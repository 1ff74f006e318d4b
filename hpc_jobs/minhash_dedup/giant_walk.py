"""Steps 2-4 of distributed verification (``hpc_jobs.minhash_dedup.giant``): every verified member's
band rows sorted across ranks by range (splitters from a deterministic sample), each rank's buckets
walked in node order with the leader rule (``corpus.dedup.verify.scan_leaders``), the first bucket of
each block walked after the leaders the previous rank ended it with. docs/dedup.md "Giant clusters".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from corpus.dedup.records import NODE, band_member_dtype
from corpus.dedup.verify import CHUNK, scan_leaders
from hpc_jobs.minhash_dedup.spill import SpilledRows
from mpi_kernels.shuffle_array import shuffle_array
from mpi_kernels.union_find import owner_of, pair_dtype

if TYPE_CHECKING:
    from hpc_jobs.minhash_dedup.giant import Settings, ShardMembers, Stats

W = NODE.itemsize
#: leaders per bucket (the rule of ``corpus.dedup.verify``)
MAX_LEADERS = 8
#: members sampled per component for the splitters (or 64 per rank), while the sample of every large
#: component together fits in an eighth of the budget at rank 0 (down to 16 per rank)
SAMPLES = 2048
_CHAIN_TAG = 11
#: a (component, band) block: the first fields of a ``band_member_dtype`` row, its key's prefix
BLOCK = np.dtype([("label", f"V{W}"), ("band", ">u2")])


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


def splitters(
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
        head = dtype.fields["value"][1]  # bytes of (label, band): a block
        first = np.zeros(len(labels) * cfg.bands, dtype=dtype)  # each block's smallest key
        first["label"] = np.repeat(labels, cfg.bands)
        first["band"] = np.tile(np.arange(cfg.bands, dtype=">u2"), len(labels))
        starts = first.view(np.uint8).reshape(len(first), -1)
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
        self.group = self.dtype.fields["node"][1]  # bytes of (label, band, value): a bucket's key
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
        g, h = self.group, BLOCK.itemsize
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


def scan_buckets(
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
        block = np.frombuffer(block_key, dtype=BLOCK)[0]
        return index[block["label"].tobytes()] * cfg.bands + int(block["band"])

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
