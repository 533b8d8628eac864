"""Hybrid retrieval by weighted reciprocal rank fusion, and the registry of retriever kinds.

    score(c) = sum_i  w_i / (rrf_k + rank_i(c))        rank_i starts at 1

over the chunks each member returns in its top `max(depth, offset + k)`. Fusion is per
chunk (not per document); equal fused scores are ordered by chunk position in the index.

RETRIEVERS maps a kind name to a class that an index directory can build and open:

    kind.build(chunks, directory, config, progress) -> dict   (written into the manifest)
    kind.load(index) -> Retriever                              (index: marag.index.store.Index)

Third-party kinds register under the entry-point group `marag.retrievers`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, Sequence

import numpy as np

from marag.corpus.models import Chunk
from marag.errors import IndexFormatError
from marag.index.base import Hit, Retriever
from marag.index.bm25 import BM25Retriever
from marag.index.dense import DenseRetriever
from marag.index.traced import BaseRetriever, as_mask
from marag.registry import Registry

if TYPE_CHECKING:
    from marag.index.config import IndexConfig


class RetrieverKind(Protocol):
    kind: str

    @classmethod
    def build(
        cls, chunks: Sequence[Chunk], directory: Path, config: "IndexConfig", progress: bool = True
    ) -> dict[str, Any]: ...

    @classmethod
    def load(cls, index: Any) -> Retriever: ...


RETRIEVERS: Registry[Any] = Registry("retrievers")
RETRIEVERS.register("bm25")(BM25Retriever)
RETRIEVERS.register("dense")(DenseRetriever)

# Fused scores are sums of small fractions; summing the same terms in another order can
# differ in the last bits, which must not decide the order of what are really ties.
_TIE_DECIMALS = 12


@RETRIEVERS.register("hybrid")
class HybridRetriever(BaseRetriever):
    """Weighted RRF over `retrievers` (a name -> retriever mapping, or a list, named by
    their `name`). `weights` by member name (default 1.0 each; 0 leaves a member out)."""

    kind = "hybrid"

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

    def _position(self, chunk_id: str) -> float:
        if self._positions is None:
            self._positions = {c.id: i for i, c in enumerate(self.chunks)}
        return self._positions.get(chunk_id, math.inf)

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
    def _member_results(self, queries: list[str], n: int) -> dict[str, list[list[Hit]]]:
        out = {}
        for name, member in self.members.items():
            if self.weights[name] == 0:
                continue
            # Built-in members are asked directly, so one hybrid search is one record in
            # the trace rather than three.
            if isinstance(member, BaseRetriever):
                out[name] = member._search_batch(queries, n, 0)
            else:
                out[name] = member.search_batch(queries, k=n, offset=0)
        return out

    def _search_batch(self, queries: list[str], k: int, offset: int) -> list[list[Hit]]:
        n = max(self.depth, offset + k)
        per_member = self._member_results(queries, n)
        results = []
        for qi in range(len(queries)):
            fused: dict[str, float] = {}
            first_hit: dict[str, Hit] = {}
            for name, res in per_member.items():
                w = self.weights[name]
                for rank, hit in enumerate(res[qi], start=1):
                    fused[hit.chunk_id] = fused.get(hit.chunk_id, 0.0) + w / (self.rrf_k + rank)
                    first_hit.setdefault(hit.chunk_id, hit)
            order = sorted(fused, key=lambda c: (-round(fused[c], _TIE_DECIMALS), self._position(c), c))
            results.append(
                [first_hit[c].model_copy(update={"score": fused[c]}) for c in order[offset : offset + k]]
            )
        return results
