"""A Bloom filter over 64-bit key hashes, vectorized in numpy, with a byte-exact file format.

Used by the dedup index (:mod:`corpus.formats.dedup_index`, one filter per partition per generation) so
that most keys absent from an index are rejected without touching its sorted file. A filter only says
"absent" or "maybe": every "maybe" is confirmed by a lookup, so a false positive costs a lookup and never
changes an answer. Sizing is in integers (millibits per key, ``k`` hashes: :class:`BloomSpec`); the ``k``
positions come from one mixed hash per key by double hashing in wrapping uint64 arithmetic (no float,
the same bits on any machine); the file is :data:`HEADER` then the bit array. Sizing, hashing and file:
docs/incremental.md (*Probing and the Bloom filters*).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAGIC = b"CPBLOOM1"
HEADER = np.dtype([("magic", "S8"), ("bits", ">u8"), ("hashes", ">u8"), ("keys", ">u8")])
#: names the hashing scheme in manifests (changing mix64, SEED or the positions changes it)
SCHEME = "splitmix64-double-hashing/1"
SEED = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
#: keys hashed at a time when filling or querying (bounds the temporaries to a few MB)
CHUNK = 1 << 16


def mix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer of each uint64 (a bijection whose output bits all depend on every
    input bit); wrapping integer arithmetic."""
    x = np.asarray(x, dtype=np.uint64)
    x = x ^ (x >> _S30)
    x = x * _C1
    x = x ^ (x >> _S27)
    x = x * _C2
    return x ^ (x >> _S31)


@dataclass(frozen=True)
class BloomSpec:
    """How filters are sized: millibits per key and number of hash functions (integers only)."""

    millibits_per_key: int
    hashes: int

    @classmethod
    def from_fp_rate(cls, p: float) -> BloomSpec:
        if not 0.0 < p < 1.0:
            raise ValueError(f"a Bloom false-positive rate must be in (0, 1), got {p}")
        bits_per_key = -math.log(p) / (math.log(2) ** 2)
        return cls(math.ceil(1000 * bits_per_key), max(1, round(-math.log2(p))))

    def bits_for(self, n: int) -> int:
        m = max(64, -(-n * self.millibits_per_key // 1000))
        return -(-m // 64) * 64

    def to_dict(self) -> dict[str, int | str]:
        return {"millibits_per_key": self.millibits_per_key, "hashes": self.hashes, "hash": SCHEME}

    @classmethod
    def from_dict(cls, d: dict) -> BloomSpec:
        if d.get("hash", SCHEME) != SCHEME:
            raise ValueError(f"Bloom hash scheme {d.get('hash')!r} is not {SCHEME!r}")
        return cls(int(d["millibits_per_key"]), int(d["hashes"]))


def expected_fp_rate(n: int, bits: int, hashes: int) -> float:
    """(1 - e^(-k n / m))^k: the false-positive rate a filter of ``bits`` with ``n`` keys should show."""
    return (1.0 - math.exp(-hashes * n / bits)) ** hashes if n else 0.0


class BloomFilter:
    """``bits`` (multiple of 64) bits, ``hashes`` positions per key; ``keys``: how many were added."""

    def __init__(self, bits: int, hashes: int, array: np.ndarray | None = None, keys: int = 0) -> None:
        if bits < 64 or bits % 64 or hashes < 1:
            raise ValueError(
                f"a Bloom filter needs a positive multiple of 64 bits and k >= 1, got {bits}, {hashes}"
            )
        self.bits = bits
        self.hashes = hashes
        self.keys = keys
        self.array = np.zeros(bits // 8, dtype=np.uint8) if array is None else array
        if self.array.shape != (bits // 8,) or self.array.dtype != np.uint8:
            raise ValueError("the bit array does not match the filter's size")

    @classmethod
    def for_keys(cls, n: int, spec: BloomSpec) -> BloomFilter:
        return cls(spec.bits_for(n), spec.hashes)

    def _positions(self, h: np.ndarray) -> np.ndarray:
        """(k, len(h)) bit positions of the hashes ``h``."""
        h1 = np.asarray(h, dtype=np.uint64)
        h2 = mix64(h1 ^ SEED) | np.uint64(1)
        i = np.arange(self.hashes, dtype=np.uint64)[:, None]
        return (h1[None, :] + i * h2[None, :]) % np.uint64(self.bits)

    def add(self, h: np.ndarray) -> None:
        """Sets the positions of each hash of ``h`` (uint64)."""
        h = np.asarray(h, dtype=np.uint64)
        for at in range(0, len(h), CHUNK):
            pos = self._positions(h[at : at + CHUNK]).reshape(-1)
            masks = np.left_shift(np.uint8(1), (pos & np.uint64(7)).astype(np.uint8))
            np.bitwise_or.at(self.array, (pos >> np.uint64(3)).astype(np.intp), masks)
        self.keys += len(h)

    def might_contain(self, h: np.ndarray) -> np.ndarray:
        """False where a hash was certainly never added; True where it may have been."""
        h = np.asarray(h, dtype=np.uint64)
        out = np.empty(len(h), dtype=bool)
        for at in range(0, len(h), CHUNK):
            pos = self._positions(h[at : at + CHUNK])
            byte = self.array[(pos >> np.uint64(3)).astype(np.intp)]
            bit = (byte >> (pos & np.uint64(7)).astype(np.uint8)) & np.uint8(1)
            out[at : at + CHUNK] = bit.all(axis=0)
        return out

    def to_bytes(self) -> bytes:
        header = np.array([(MAGIC, self.bits, self.hashes, self.keys)], dtype=HEADER)
        return header.tobytes() + self.array.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> BloomFilter:
        if len(data) < HEADER.itemsize:
            raise ValueError("a Bloom filter file is shorter than its header")
        head = np.frombuffer(data, dtype=HEADER, count=1)[0]
        if head["magic"] != MAGIC:
            raise ValueError("not a Bloom filter file (magic)")
        bits, hashes, keys = int(head["bits"]), int(head["hashes"]), int(head["keys"])
        if len(data) != HEADER.itemsize + bits // 8:
            raise ValueError(f"a Bloom filter of {bits} bits has {len(data) - HEADER.itemsize} bytes of bits")
        array = np.frombuffer(data, dtype=np.uint8, offset=HEADER.itemsize).copy()
        return cls(bits, hashes, array, keys)
