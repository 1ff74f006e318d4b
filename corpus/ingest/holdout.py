"""The eval holdout: a fixed slice of web URLs that never enters the corpus.

Chosen before anything else looks at the data, as a pure function of the URL (``stable_hash64``, not
Python's salted ``hash``), so every build and every rank carves out exactly the same pages.
"""

from __future__ import annotations

from corpus.digest import stable_hash64

HOLDOUT_SALT = "corpus-eval-holdout/1"


def in_holdout(url: str, tier: str, modulus: int, tiers: tuple[str, ...] | list[str]) -> bool:
    """``hash(url) % modulus == 0`` for documents of the web tiers; ``modulus <= 0`` disables it."""
    return modulus > 0 and tier in tiers and stable_hash64(HOLDOUT_SALT, url) % modulus == 0
