"""Source tiers: how much a source is trusted, which decides who wins when documents collide.

Dedup keeps the copy from the most trusted tier (curated before known-good web before general web),
and the snapshot's mixture buckets default to the tier, so mixtures are chosen per source category.
"""

from __future__ import annotations

#: Tiers from most to least trusted. A source declares one of these when it is ingested.
TIERS: tuple[str, ...] = ("curated", "books", "code", "known_good_web", "web")


def source_rank(tier: str) -> int:
    """0 for the most trusted tier; unknown tiers rank last (never first)."""
    try:
        return TIERS.index(tier)
    except ValueError:
        return len(TIERS)


def check_tier(tier: str) -> str:
    if tier not in TIERS:
        raise ValueError(f"unknown source tier {tier!r}; tiers: {', '.join(TIERS)}")
    return tier
