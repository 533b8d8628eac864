"""Hybrid retrieval by weighted reciprocal rank fusion.

    score(c) = sum_i  w_i / (rrf_k + rank_i(c))        rank_i starts at 1

over the chunks each member returns in its top `max(depth, offset + k)`. Fusion is per
chunk (not per document); equal fused scores are ordered by chunk position in the index.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np

from marag.corpus.models import Chunk
from marag.errors import IndexFormatError
from marag.index.base import Hit, Retriever
from marag.index.kinds import HYBRID, RETRIEVERS
from marag.index.retriever import BaseRetriever
from marag.index.traced import Ranked, as_mask, kernels

if TYPE_CHECKING:
    from marag.index.config import IndexConfig


# Fused scores are sums of small fractions; summing the same terms in another order can
# differ in the last bits, which must not decide the order of what are really ties.
_TIE_DECIMALS = 12


@RETRIEVERS.register(HYBRID)
class HybridRetriever(BaseRetriever):
    """Weighted RRF over `retrievers` (a name -> retriever mapping, or a list, named by
    their `name`). `weights` by member name (default 1.0 each; 0 leaves a member out)."""

    kind = HYBRID

    def __init__(
        self,
        retrievers: Mapping[str, Retriever] | Sequence[Retriever],
        weights: Mapping[str, float] | None = None,
        rrf_k: int = 60,
        depth: int = 100,
        chunks: Sequence[Chunk] | None = None,
        name: str | None = None,
    ):
        if isinstance(retrievers, Mapping):
            members = dict(retrievers)
        else:
            members = {}
            for r in retrievers:
                key = r.name
                if key in members:
                    raise ValueError(
                        f"two hybrid members are both named {key!r}; pass a dict of name -> retriever"
                    )
                members[key] = r
        if not members:
            raise ValueError("a hybrid retriever needs at least one member retriever")
        weights = dict(weights) if weights is not None else {n: 1.0 for n in members}
        unknown = set(weights) - set(members)
        if unknown:
            raise ValueError(
                f"weights name retrievers that are not members: {sorted(unknown)} (members: {sorted(members)})"
            )
        if any(w < 0 or not math.isfinite(w) for w in weights.values()):
            raise ValueError(f"hybrid weights must be finite and >= 0, got {weights}")
        if rrf_k < 0:
            raise ValueError(f"rrf_k must be >= 0, got {rrf_k}")
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        if chunks is None:
            chunks = next((m.chunks for m in members.values() if isinstance(m, BaseRetriever)), [])
        super().__init__(chunks, name)
        self.members = members
        self.weights = {n: float(weights.get(n, 0.0)) for n in members}
        if not any(self.weights.values()):
            raise ValueError("at least one hybrid weight must be > 0")
        self.rrf_k = rrf_k
        self.depth = depth
        self._positions: dict[str, int] | None = None

    def _position(self, chunk_id: str) -> int | None:
        if self._positions is None:
            self._positions = {c.id: i for i, c in enumerate(self.chunks)}
        return self._positions.get(chunk_id)

    # -- the index-directory protocol ---------------------------------------------------
    @classmethod
    def build(
        cls, chunks: Sequence[Chunk], directory: Path, config: "IndexConfig", progress: bool = True
    ) -> dict[str, Any]:
        return {}  # nothing of its own on disk: it fuses the other parts at query time

    @classmethod
    def load(cls, index: Any) -> "HybridRetriever":
        config = index.config
        names = [n for n, w in config.hybrid_weights.items() if w > 0 and n != cls.kind and index.has(n)]
        if len(names) < 2:
            raise IndexFormatError(
                f"hybrid search fuses two or more parts, but the index at {index.path} has only "
                f"{names or 'none'} of {sorted(config.hybrid_weights)}",
                hint="search one part directly (retriever='bm25' or 'dense'), or rebuild with both parts",
            )
        members = {n: index.retriever(n) for n in names}
        return cls(
            members,
            weights={n: config.hybrid_weights[n] for n in names},
            rrf_k=config.rrf_k,
            depth=config.hybrid_depth,
            chunks=index.chunks,
        )

    # -- restriction ----------------------------------------------------------------------
    def restrict(self, selection: np.ndarray | Iterable[int], label: str | None = None) -> "HybridRetriever":
        if not isinstance(selection, np.ndarray):
            selection = np.asarray(list(selection))
        members = {}
        for n, m in self.members.items():
            if not hasattr(m, "restrict"):
                raise TypeError(f"hybrid member {n!r} ({type(m).__name__}) cannot be restricted to a subset")
            members[n] = m.restrict(selection, label)  # type: ignore[attr-defined]
        clone = HybridRetriever(
            members, self.weights, self.rrf_k, self.depth, chunks=self.chunks, name=self.name
        )
        clone._positions = self._positions
        if label:
            clone.name = f"{self.name}[{label}]"
        clone._allowed = as_mask(selection, len(self.chunks)) if len(self.chunks) else None
        return clone

    # -- search ---------------------------------------------------------------------------
    def _rank(self, queries: list[str], want: int) -> Ranked:
        _kernels = kernels()
        rankings, extra = self._member_rankings(queries, max(self.depth, want))
        width = max(1, max(r.positions.shape[1] for r in rankings))
        positions = np.full((len(rankings), len(queries), width), -1, dtype=np.int64)
        for m, r in enumerate(rankings):
            positions[m, :, : r.positions.shape[1]] = r.positions
        counts = np.stack([r.counts for r in rankings]).astype(np.int64)
        weights = np.array([self.weights[n] for n in self.members if self.weights[n] > 0], dtype=np.float64)
        fused = _kernels.rrf_fuse(
            positions, counts, weights, self.rrf_k, len(self.chunks) + len(extra), want, _TIE_DECIMALS
        )
        return Ranked(*fused, extra=extra)

    def _member_rankings(self, queries: list[str], n: int) -> tuple[list[Ranked], tuple[Hit, ...]]:
        """Each weighted member's top `n`, as positions in this retriever's chunks.

        Built-in members over the same chunks hand over their arrays (no hits are made,
        and one hybrid search is one record in the trace rather than three). Others
        return hits, placed by chunk id; a chunk id this index does not hold gets a
        position past the end, numbered in chunk id order so that ties among them fall
        as they always have."""
        rankings: list[Ranked] = []
        foreign: dict[str, tuple[int, Hit]] = {}  # chunk not in self.chunks -> (number, first hit)
        for name, member in self.members.items():
            if self.weights[name] == 0:
                continue
            if isinstance(member, BaseRetriever) and member.ranks() and member.chunks is self.chunks:
                ranked = member._rank(queries, n)
                if not ranked.extra:
                    rankings.append(ranked)
                    continue
                hits = member._pages(ranked)
            elif isinstance(member, BaseRetriever):
                hits = member._search_batch(queries, n, 0)
            else:
                hits = member.search_batch(queries, k=n, offset=0)
            rankings.append(self._placed(hits, foreign))
        if not foreign:
            return rankings, ()
        # Provisional positions follow first appearance; renumber by chunk id.
        size = len(self.chunks)
        by_id = sorted(foreign)
        final = np.empty(len(by_id), dtype=np.int64)
        for rank, chunk_id in enumerate(by_id):
            final[foreign[chunk_id][0]] = size + rank
        for r in rankings:
            beyond = r.positions >= size
            r.positions[beyond] = final[r.positions[beyond] - size]
        return rankings, tuple(foreign[chunk_id][1] for chunk_id in by_id)

    def _placed(self, results: list[list[Hit]], foreign: dict[str, tuple[int, Hit]]) -> Ranked:
        size = len(self.chunks)
        counts = np.array([len(hits) for hits in results], dtype=np.int64)
        positions = np.full((len(results), max(1, int(counts.max(initial=0)))), -1, dtype=np.int64)
        for i, hits in enumerate(results):
            for rank, hit in enumerate(hits):
                p = self._position(hit.chunk_id)
                if p is None:
                    p = size + foreign.setdefault(hit.chunk_id, (len(foreign), hit))[0]
                positions[i, rank] = p
        return Ranked(positions, np.zeros(positions.shape), counts)
