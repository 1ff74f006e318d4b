"""Work dealt to ranks by size: largest first, each item to the rank with the least so far.

Why not round-robin by digest: items differ in size, and a rank dealt the larger ones keeps the others
waiting at the stage's barrier (a one-file crawl's 16 units on 2 ranks: annotate's ranks got 18.4 and
15.8 MB of text, decontaminate's 18.1 and 14.7). Who does an item depends on the rank count, never
what the item yields, so outputs stay the same on any rank count.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


def largest_first(sizes: Sequence[int], ranks: int) -> list[list[int]]:
    """The item numbers of each rank, each rank's in the order it takes them (largest first): items in
    order of (size descending, number), each to the rank with the smallest total so far, ties to the
    lower rank. ``sizes`` come in the caller's canonical order (by content digest), so equal sizes are
    dealt as round-robin deals them. O(items log ranks)."""
    owned: list[list[int]] = [[] for _ in range(ranks)]
    loads = [(0, r) for r in range(ranks)]
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, r = heapq.heappop(loads)
        owned[r].append(i)
        heapq.heappush(loads, (load + sizes[i], r))
    return owned
