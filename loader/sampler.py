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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from corpus.digest import stable_hash64

#: Bumped whenever any function here changes what a rank reads; a checkpoint from another version is refused.
SAMPLER_VERSION = "loader-sampler/1"

_TWO64 = float(1 << 64)


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
    keys = [stable_hash64("shard-order", seed, bucket, epoch, k) for k in shard_keys]
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


def epoch_chunks(shards: Sequence[tuple[int, str, int]], seed: int, bucket: str, epoch: int,
                 chunk_tokens: int, cut_world: int = 0) -> list[Piece]:
    """Every chunk of one bucket epoch, in reading order.

    ``shards`` are ``(manifest_index, sha256, stream_len)`` of the bucket's shards. Shards come in keyed
    order; within a shard the chunks stay in file order, so a rank reading consecutive positions of
    a chunk reads the file sequentially. ``cut_world`` > 0: the bucket was cut for that many ranks
    (:func:`shard_cuts`), each shard into nearly equal pieces instead of ``chunk_tokens`` chunks.
    """
    if chunk_tokens <= 0:
        raise ValueError("chunk_tokens must be positive")
    cuts = shard_cuts([s[2] for s in shards], chunk_tokens, cut_world) if cut_world else None
    perm = shard_permutation([s[1] for s in shards], seed, bucket, epoch)
    out: list[Piece] = []
    for i in perm:
        index, _, stream_len = shards[i]
        if cuts is None:
            bounds = [*range(0, stream_len, chunk_tokens), stream_len]
        else:
            bounds = [j * stream_len // cuts[i] for j in range(cuts[i] + 1)] if cuts[i] else [0]
        for start, end in zip(bounds, bounds[1:], strict=False):
            out.append(Piece(epoch, len(out), index, start, end))
    return out


def strided(n: int, rank: int, world: int) -> range:
    """Indices of ``n`` items that ``rank`` owns: ``rank, rank + world, ...`` (strided, not blocked).

    Strided assignment spreads every part of the keyed order over all ranks, so no rank's share is
    biased to one end of it, and a change of world size moves every rank's share evenly.
    """
    return range(rank, n, world)


def run_of(step: int, run_len: int) -> int:
    return step // run_len


def run_offset(seed: int, run: int) -> float:
    """A uniform number in [0, 1) for one run of steps: the mixture's only randomness."""
    return stable_hash64("bucket-run", seed, run) / _TWO64


def rank_point(seed: int, run: int, rank: int, world: int) -> float:
    """Where rank ``rank`` samples the mixture during ``run``: one shared offset, ranks spread by 1/world.

    Ranks are stratified over [0, 1), so at every step about ``weight * world`` ranks read each bucket
    (decorrelated: they never all hit one bucket at once unless it is the only one), and over runs each
    rank still sees every bucket with its target frequency.
    """
    return (run_offset(seed, run) + rank / world) % 1.0


def choose_bucket(point: float, weights: Mapping[str, float], active: set[str] | frozenset[str]) -> str | None:
    """The bucket whose slice of the cumulative weights (buckets in name order, active ones only) holds ``point``.

    Exhausted buckets (epoch cap reached) are left out, and the rest are renormalized; ``None`` when
    no bucket is active.
    """
    names = [b for b in sorted(weights) if b in active and weights[b] > 0]
    if not names:
        return None
    total = sum(weights[b] for b in names)
    acc = 0.0
    for b in names:
        acc += weights[b] / total
        if point < acc:
            return b
    return names[-1]
