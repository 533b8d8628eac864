"""Reciprocal rank fusion of ranked id lists (several queries x several retrievers):
score(d) = sum over lists of 1 / (k + rank(d)), ranks from 1; ties by first appearance
(the list order, then the rank), so the result is deterministic."""

from __future__ import annotations

from collections.abc import Sequence


def rrf(rankings: Sequence[Sequence[str]], k: int = 60, weights: Sequence[float] | None = None) -> list[tuple[str, float]]:
    """(id, fused score), best first."""
    if weights is not None and len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    first: dict[str, tuple[int, int]] = {}
    for li, ranking in enumerate(rankings):
        w = 1.0 if weights is None else float(weights[li])
        for rank, doc in enumerate(ranking, 1):
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank)
            first.setdefault(doc, (rank, li))
    return sorted(scores.items(), key=lambda item: (-item[1], first[item[0]]))
