"""extract's known-bad check: a text's exact key, and where the list has near entries its MinHash
signature, against the list (:mod:`corpus.text.known_bad`).

The near entries use fixed MinHash parameters (:data:`NEAR_PARAMS`: the corpus's defaults, seed 0),
not the build's, so one list serves every build. A text is a near match when it shares a band with
an entry (the LSH candidate) and at least ``threshold`` of the two signatures' values are equal (the
estimated Jaccard similarity of their word 5-grams), the same test minhash_dedup verifies a pair by.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corpus.model.digest import sha256_hex
from corpus.text.known_bad import NEAR_PERM, KnownBad
from corpus.text.normalize import KEY_VERSION, text_key
from mpi_kernels.minhash import MinHasher, MinHashParams, is_empty

#: the near entries' parameters (a list made with others would never match: fixed here, not configured)
NEAR_PARAMS = MinHashParams()
if NEAR_PARAMS.num_perm != NEAR_PERM:
    raise RuntimeError(f"near entries hold {NEAR_PERM} values, the MinHash default is {NEAR_PARAMS.num_perm}")


@dataclass(frozen=True)
class Match:
    """Why a text is known-bad: the entry it matched, as a hash, and how."""

    kind: str  #: "exact" or "near"
    entry: str  #: the exact key, or the sha256 of the near entry's signature
    similarity: float


class KnownBadCheck:
    """The list, with its near entries' band keys indexed (built once per process)."""

    def __init__(self, known: KnownBad, threshold: float) -> None:
        self.known, self.threshold = known, threshold
        self.hasher = MinHasher(NEAR_PARAMS) if len(known.near) else None
        self.bands: dict[bytes, list[int]] = {}
        if self.hasher is not None:
            for row, keys in enumerate(self.hasher.band_keys(known.near)):
                for key in keys:
                    self.bands.setdefault(key.tobytes(), []).append(row)

    def match(self, text: str) -> Match | None:
        key = text_key(text)
        if key in self.known.keys:
            return Match("exact", f"{KEY_VERSION}:{key.hex()}", 1.0)
        if self.hasher is None:
            return None
        sig = self.hasher.signatures([text])
        if is_empty(sig)[0]:
            return None
        rows = {r for k in self.hasher.band_keys(sig)[0] for r in self.bands.get(k.tobytes(), ())}
        if not rows:
            return None
        near = self.known.near[sorted(rows)]
        similarity = (near == sig[0]).mean(axis=1)
        best = int(np.argmax(similarity))
        if similarity[best] < self.threshold:
            return None
        entry = sha256_hex(near[best].astype(">u8").tobytes())[:32]
        return Match("near", f"near:{entry}", float(similarity[best]))
