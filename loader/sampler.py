"""The sampler's pure functions: which chunk of which shard a rank reads, and from which bucket.

Nothing here does I/O or keeps state; everything is a function of the manifest's shard list, the seed,
the bucket, the epoch, the step, the rank and the world size. The dataset composes these functions and
the checkpoint state records only where each rank's cursor stands.

Units. A shard's *stream* is its documents back to back, each followed by EOS when the loader appends
one; ``stream_len = tokens + docs`` (or ``tokens`` without appended EOS), known from the manifest alone.
A *chunk* is a contiguous range of at most ``chunk_tokens`` stream positions of one shard, the unit of
work a rank is assigned.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import overload

import numpy as np

from corpus.model.digest import stable_hash64, stable_hash64_each

#: Bumped whenever any function here changes what a rank reads; a checkpoint from another version is refused.
#: 2: the bucket schedule is a golden-ratio (Weyl) sequence over runs instead of a hash per run.
SAMPLER_VERSION = "loader-sampler/2"


@dataclass(frozen=True, order=True)
class Piece:
    """A contiguous range ``[start, end)`` of one shard's stream, as part of one bucket epoch.

    ``order`` is the chunk's position in its epoch's keyed order; it sorts remainders deterministically
    when unfinished work is redistributed.
    """

    epoch: int
    order: int
    shard: int  # index into the manifest's shard list
    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start

    def to_list(self) -> list[int]:
        return [self.epoch, self.order, self.shard, self.start, self.end]

    @classmethod
    def from_list(cls, v: Sequence[int]) -> Piece:
        return cls(*(int(x) for x in v))


def shard_permutation(shard_keys: Sequence[str], seed: int, bucket: str, epoch: int) -> list[int]:
    """Positions of ``shard_keys`` (the shards' sha256) in a keyed random order for one bucket epoch.

    Sorting by a keyed hash of the content digest makes the order independent of how the list was
    produced and reproducible everywhere; a new epoch is a new, independent order.
    """
    keys = stable_hash64_each(("shard-order", seed, bucket, epoch), shard_keys)
    return sorted(range(len(shard_keys)), key=lambda i: (keys[i], shard_keys[i]))


def shard_cuts(stream_lens: Sequence[int], chunk_tokens: int, world: int) -> tuple[int, ...] | None:
    """Pieces per shard for a bucket with fewer ``chunk_tokens`` chunks than ranks; None when it has enough.

    Chunks are dealt out strided, so with fewer chunks than ranks some ranks would get none of the
    bucket and drop it from their mixture (a 2-chunk bucket at weight 0.5 on 8 ranks would deliver
    0.125). Such a bucket is instead cut into about ``world`` nearly equal pieces, each shard into a
    number proportional to its length (at least one per non-empty shard), so every rank gets a share.
    A pure function of the shard sizes and the world size: the checkpoint records it (the world it
    was cut for), so a record is read back with the cut it was taken under. A bucket with fewer
    stream positions than ranks cannot feed every rank; it is cut to single positions.
    """
    if sum(-(-n // chunk_tokens) for n in stream_lens) >= world:
        return None
    total = sum(stream_lens)
    return tuple(min(n, -(-n * world // total)) if n else 0 for n in stream_lens)


class EpochChunks(Sequence[Piece]):
    """Every chunk of one bucket epoch, in reading order, as a sequence whose items are made when asked
    for: the shards' keyed order and the running count of their chunks are held (O(shards)), never the
    chunks (O(tokens / chunk_tokens): 15 M of them at 15 T tokens and 1 M-token chunks, 3 GB of
    ``Piece`` objects a rank, where a rank reads one chunk in ``world``). Chunk ``k`` is found by
    bisection.

    ``shards`` are ``(manifest_index, sha256, stream_len)`` of the bucket's shards. Shards come in keyed
    order; within a shard the chunks stay in file order, so a rank reading consecutive positions of
    a chunk reads the file sequentially. ``cut_world`` > 0: the bucket was cut for that many ranks
    (:func:`shard_cuts`), each shard into nearly equal pieces instead of ``chunk_tokens`` chunks.
    """

    def __init__(
        self,
        shards: Sequence[tuple[int, str, int]],
        seed: int,
        bucket: str,
        epoch: int,
        chunk_tokens: int,
        cut_world: int = 0,
    ) -> None:
        if chunk_tokens <= 0:
            raise ValueError("chunk_tokens must be positive")
        cuts = shard_cuts([s[2] for s in shards], chunk_tokens, cut_world) if cut_world else None
        perm = shard_permutation([s[1] for s in shards], seed, bucket, epoch)
        self.epoch, self.chunk_tokens = epoch, chunk_tokens
        self._index = [shards[i][0] for i in perm]
        self._lens = [shards[i][2] for i in perm]
        # a shard's pieces: chunk_tokens long (the last shorter), or its cut into nearly equal ones
        self._cuts = None if cuts is None else [cuts[i] for i in perm]
        counts = [-(-n // chunk_tokens) for n in self._lens] if self._cuts is None else self._cuts
        self._ends = np.cumsum(np.asarray(counts, dtype=np.int64))

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def _piece(self, k: int, p: int, j: int) -> Piece:
        """Chunk ``k`` of the epoch: piece ``j`` of the shard at place ``p`` of the keyed order."""
        n = self._lens[p]
        if self._cuts is None:
            start = j * self.chunk_tokens
            return Piece(self.epoch, k, self._index[p], start, min(start + self.chunk_tokens, n))
        c = self._cuts[p]
        return Piece(self.epoch, k, self._index[p], j * n // c, (j + 1) * n // c)

    @overload
    def __getitem__(self, k: int) -> Piece: ...
    @overload
    def __getitem__(self, k: slice) -> list[Piece]: ...
    def __getitem__(self, k: int | slice) -> Piece | list[Piece]:
        if isinstance(k, slice):
            return [self[i] for i in range(len(self))[k]]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(f"chunk {k} of an epoch of {len(self)}")
        p = int(np.searchsorted(self._ends, k, side="right"))
        return self._piece(k, p, k - (int(self._ends[p - 1]) if p else 0))

    def __iter__(self) -> Iterator[Piece]:
        k = 0
        for p, end in enumerate(self._ends.tolist()):
            for j in range(end - k):
                yield self._piece(k + j, p, j)
            k = end


def strided(n: int, rank: int, world: int) -> range:
    """Indices of ``n`` items that ``rank`` owns: ``rank, rank + world, ...`` (strided, not blocked).

    Strided assignment spreads every part of the keyed order over all ranks, so no rank's share is
    biased to one end of it, and a change of world size moves every rank's share evenly.
    """
    return range(rank, n, world)


# --- the mixture schedule ---------------------------------------------------------------------------
#
# Steps come in runs of ``run_len``; in run ``u`` rank ``r`` of ``W`` reads the bucket whose slice of the
# cumulative weights holds its point. All arithmetic on points is on integers: a point is ``P / (W·2^64)``
# with ``P`` an integer in ``[0, W·2^64)``, so nothing depends on the magnitude of the run number.
#
#   T(u)    = h(seed)·W + u·S_W                    S_W = m_W·2^64 + GOLDEN_STEP   (run_step)
#   P(u, r) = (T(u) + r·2^64) mod W·2^64           point(u, r) = P(u, r) / (W·2^64)
#
# Per run the W points are one shared offset plus r/W (stratified: every stratum [s/W, (s+1)/W) holds
# exactly one rank), and all of them sit at the same place y(u) = (h·W + u·GOLDEN_STEP) mod 2^64 of their
# stratum, since S_W ≡ GOLDEN_STEP (mod 2^64). How many ranks read bucket b in run u is therefore
# ``n_b + [y(u) ∈ J_b]``, with n_b = floor(w_b·W) and J_b a fixed arc of length frac(w_b·W) (mod 2^64):
# over R runs the slots (rank, run) of b miss w_b·W·R by the discrepancy of the golden-ratio sequence
# y(0), y(1), ... in one arc, which is below 2 per Ostrowski segment (:func:`schedule_bound`), whatever W.
# Each rank on its own walks the Weyl sequence of step S_W / (W·2^64); m_W in [0, W) is the one that makes
# that step's continued fraction smallest (:func:`run_step`), so each rank also sees every bucket at its
# weight with an error of a few runs (:func:`rank_bound`).

#: The odd integer nearest 2^64·(√5−1)/2 (= 2^64/φ): the golden-ratio step of the schedule.
GOLDEN_STEP = 0x9E3779B97F4A7C15

#: :func:`run_step` optimizes each rank's sequence for this many runs (2^24 runs of 8 steps: 1.3·10^8 steps).
STEP_HORIZON = 1 << 24

_ONE = 1 << 64
_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


def run_of(step: int, run_len: int) -> int:
    return step // run_len


def cf_quotients(num: int, den: int, horizon: int = STEP_HORIZON) -> list[int]:
    """Partial quotients a_1, a_2, … of ``num/den`` in (0, 1), up to the first convergent whose denominator
    exceeds ``horizon`` (all of them if the fraction ends first)."""
    out: list[int] = []
    q0, q1 = 0, 1
    num %= den
    while num and q1 <= horizon:
        a, rest = divmod(den, num)
        out.append(a)
        q0, q1 = q1, a * q1 + q0
        den, num = num, rest
    return out


@functools.cache
def run_step(world: int) -> int:
    """``S_W = m·2^64 + GOLDEN_STEP``: how far the schedule moves per run on ``world`` ranks, in 1/(W·2^64).

    Any ``m`` keeps the ranks' shared place in their strata the golden-ratio sequence; ``m`` in ``[0, W)``
    is chosen to minimize the sum of the continued-fraction quotients of ``S_W / (W·2^64)`` up to
    :data:`STEP_HORIZON` (smallest ``m`` on ties), which bounds how far each single rank's bucket counts
    stray from the weights (:func:`rank_bound`). W = 1: m = 0, the golden ratio itself.
    """
    if world < 1:
        raise ValueError("world must be positive")
    den = world << 64
    best, best_m = None, 0
    for m in range(world):
        num, d, total, q0, q1 = (m << 64) + GOLDEN_STEP, den, 0, 0, 1
        while num and q1 <= STEP_HORIZON:
            a, rest = divmod(d, num)
            total += a
            if best is not None and total >= best:
                break
            q0, q1 = q1, a * q1 + q0
            d, num = num, rest
        else:
            best, best_m = total, m
    return (best_m << 64) + GOLDEN_STEP


def run_offset(seed: int, run: int, world: int) -> int:
    """``T(run) mod W·2^64``: where rank 0 samples the mixture during ``run``, in units of 1/(W·2^64)."""
    return (stable_hash64("bucket-run", seed) * world + run * run_step(world)) % (world << 64)


@functools.lru_cache(maxsize=256)
def rank_point(seed: int, run: int, rank: int, world: int) -> Fraction:
    """Where rank ``rank`` samples the mixture during ``run``: the shared offset plus ``rank / world``, exact.

    Ranks are stratified over [0, 1): at every step ``floor`` or ``ceil`` of ``w_b · world`` of them read
    bucket ``b`` (they never all hit one bucket at once unless it is the only one), and the schedule
    (above) keeps both the total and every single rank's share of each bucket within a few runs of its
    weight, at any step.
    """
    return Fraction((run_offset(seed, run, world) + (rank << 64)) % (world << 64), world << 64)


def bucket_bounds(weights: Mapping[str, float], active: set[str] | frozenset[str]) -> list[tuple[str, float]]:
    """The active buckets with weight > 0 in name order, each with the upper end of its slice of [0, 1)."""
    names = [b for b in sorted(weights) if b in active and weights[b] > 0]
    total = sum(weights[b] for b in names)
    acc = 0.0
    out = []
    for b in names:
        acc += weights[b] / total
        out.append((b, acc))
    return out


def choose_bucket(
    point: float | Fraction, weights: Mapping[str, float], active: set[str] | frozenset[str]
) -> str | None:
    """The bucket whose slice of the cumulative weights (buckets in name order, active ones only) holds ``point``.

    Exhausted buckets (epoch cap reached) are left out, and the rest are renormalized; ``None`` when
    no bucket is active. A :class:`~fractions.Fraction` point is compared exactly with the slices' ends.
    """
    bounds = bucket_bounds(weights, active)
    if not bounds:
        return None
    for b, acc in bounds:
        if point < acc:
            return b
    return bounds[-1][0]


# --- the same, vectorized over runs (what ``corpus mixture-audit`` replays) ----------------------------


def run_points(seed: int, world: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank 0's point in runs ``start .. stop-1`` as (stratum int64, place in the stratum uint64), exact.

    Rank ``r``'s point in run ``u`` is ``(((stratum[u] + r) mod W)·2^64 + place[u]) / (W·2^64)``, equal to
    :func:`rank_point` (tested). Needs ``stop - start <= 2^32``.
    """
    if not 0 <= start <= stop or stop - start > 1 << 32:
        raise ValueError(f"bad run range {start}..{stop}")
    base = run_offset(seed, start, world)
    s_base, y_base = divmod(base, _ONE)
    m = (run_step(world) >> 64) % world
    u = np.arange(stop - start, dtype=np.uint64)
    # y_base + u·GOLDEN_STEP in 32-bit halves, so that no product leaves uint64
    low = u * np.uint64(GOLDEN_STEP & 0xFFFFFFFF) + np.uint64(y_base & 0xFFFFFFFF)
    mid = u * np.uint64(GOLDEN_STEP >> 32) + np.uint64(y_base >> 32) + (low >> _S32)
    place = ((mid & _M32) << _S32) | (low & _M32)
    w = np.uint64(world)
    stratum = (np.uint64(s_base) + (u % w) * np.uint64(m) % w + (mid >> _S32)) % w
    return stratum.astype(np.int64), place


def bucket_thresholds(
    weights: Mapping[str, float], active: set[str] | frozenset[str], world: int
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The buckets :func:`choose_bucket` chooses from, and the integer ends ``T`` of all but the last slice
    as (stratum, place) pairs: a point ``P / (W·2^64) < acc`` exactly when ``P < T = ceil(acc·W·2^64)``."""
    bounds = bucket_bounds(weights, active)
    ends = [math.ceil(Fraction(acc) * (world << 64)) for _, acc in bounds[:-1]]
    return (
        [b for b, _ in bounds],
        np.array([t >> 64 for t in ends], dtype=np.int64),
        np.array([t % _ONE for t in ends], dtype=np.uint64),
    )


def choose_buckets(stratum: np.ndarray, place: np.ndarray, ends: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """:func:`choose_bucket` for many points at once: the index of the chosen bucket in the threshold list."""
    ts, tp = ends
    out = np.zeros(stratum.shape, dtype=np.int64)
    for s, p in zip(ts.tolist(), tp.tolist(), strict=True):
        out += (stratum > s) | ((stratum == s) & (place >= np.uint64(p)))
    return out


def ranks_per_bucket(place: np.ndarray, ends: tuple[np.ndarray, np.ndarray], world: int) -> np.ndarray:
    """How many of the ``world`` ranks read each bucket in each run (all ranks with the same active buckets):
    shape (buckets, runs). Depends only on the place in the stratum (see the schedule above)."""
    ts, tp = ends
    below = [
        np.minimum(s + (place < np.uint64(p)), world) for s, p in zip(ts.tolist(), tp.tolist(), strict=True)
    ]
    edges = [np.zeros(place.shape, dtype=np.int64), *below, np.full(place.shape, world, dtype=np.int64)]
    return np.diff(np.stack(edges), axis=0)


def max_segments(num: int, den: int, n: int) -> int:
    """The most Ostrowski segments any ``N <= n`` splits into, for the Weyl sequence of step ``num/den``.

    ``N = Σ b_i q_i`` (``q_i`` the denominators of the step's convergents, ``0 <= b_i <= a_{i+1}``,
    ``b_0 < a_1``, and ``b_{i-1} = 0`` where ``b_i = a_{i+1}``) cuts the first ``N`` terms of the sequence
    into ``Σ b_i`` stretches of ``q_i`` consecutive terms. Such a stretch puts exactly one point in each of
    ``q_i`` equal cells (``|q_i·step − p_i| < 1/q_{i+1}``), so it misses any arc's share by less than 2.
    Digit strings compare like the numbers they write, so the maximum over ``N <= n`` is a digit walk.
    """
    quotients = cf_quotients(num, den, max(n, 1))
    qs, prev = [1], 0
    for a in quotients:
        qs, prev = [*qs, a * qs[-1] + prev], qs[-1]
    if qs[-1] <= n:
        raise ValueError(f"the step {num}/{den} is periodic within {n} terms")
    top = max(i for i, q in enumerate(qs) if q <= max(n, 1))
    digits, rest = [], n
    for i in range(top, -1, -1):
        digits.append(rest // qs[i])
        rest -= digits[-1] * qs[i]
    # the best digit sum so far, by (digits equal to n's so far, the last digit was full)
    best: dict[tuple[bool, bool], int] = {(True, False): 0}
    for pos, i in enumerate(range(top, -1, -1)):
        cap = quotients[0] - 1 if i == 0 else quotients[i]  # b_0 < a_1, b_i <= a_{i+1}
        nxt: dict[tuple[bool, bool], int] = {}
        for (tight, full), total in best.items():
            hi = 0 if full else min(cap, digits[pos]) if tight else cap
            for d in {hi, max(hi - 1, 0)}:  # any smaller digit leads where hi - 1 does, with less
                key = (tight and d == digits[pos], i > 0 and d == quotients[i])
                nxt[key] = max(nxt.get(key, -1), total + d)
        best = nxt
    return max(best.values())


@functools.lru_cache(maxsize=256)
def schedule_bound(runs: int) -> int:
    """Bound (exclusive) on ``|slots of b − w_b·W·R|`` after ``R <= runs`` runs, for every bucket and any world
    size, while every rank has the same buckets active: 2 per Ostrowski segment of the golden-ratio
    sequence of places. It holds at every step, not only at run ends (in between, the count moves
    linearly from one run end to the next)."""
    return 2 * max_segments(GOLDEN_STEP, _ONE, runs)


@functools.lru_cache(maxsize=256)
def rank_bound(world: int, runs: int) -> int:
    """The same for one rank on its own: ``|runs of rank r on b − w_b·R|`` after ``R <= runs`` runs (exclusive)."""
    return 2 * max_segments(run_step(world), world << 64, runs)
