"""The paper's pairwise ranking (DuoT5's aggregation), used for passages (step 3) and
facets (step 5): every pair of the top items asked in both orders, items ordered by
their wins. Our cheaper scheme, one bubble pass, is an aid (`aids.bubble`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

Prefer = Callable[[int, int], Awaitable[bool]]  # (a, b) -> True when the item shown first, a, is preferred


def all_pairs_depth(n: int, max_calls: int) -> int:
    """How many of `n` items all-pairs comparison can cover: the largest d <= n with
    d(d-1) ordered comparisons within `max_calls`."""
    d = min(n, int((1 + (1 + 4 * max_calls) ** 0.5) / 2))
    while d > 1 and d * (d - 1) > max_calls:
        d -= 1
    return max(d, 1)


async def all_pairs(n: int, prefer: Prefer) -> tuple[list[int], int]:
    """DuoT5's aggregation with votes: every ordered pair (a, b) of the n items asked
    once, so each pair in both orders; an item scores a win each time it is preferred;
    items ordered by wins, ties by their position. A judge that always picks the same
    position gives every item n-1 wins: the order stays. Returns (order, comparisons)."""
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    verdicts = await asyncio.gather(*(prefer(a, b) for a, b in pairs))
    wins = [0] * n
    for (a, b), first in zip(pairs, verdicts):
        wins[a if first else b] += 1
    return sorted(range(n), key=lambda i: (-wins[i], i)), len(pairs)


async def duot5(n: int, max_calls: int, prefer: Prefer) -> tuple[int, list[int], int]:
    """The paper's scheme over the top of `n` items: all pairs of as many of them as
    `max_calls` allows. Returns (depth, order of the first `depth`, comparisons)."""
    depth = all_pairs_depth(n, max_calls)
    order, calls = await all_pairs(depth, prefer)
    return depth, order, calls
