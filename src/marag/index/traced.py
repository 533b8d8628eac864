"""The shared half of every built-in retriever: argument checks, tracing, restriction.

A subclass implements one method, `_search_batch(queries, k, offset)`, which returns
for each query the hits ranked `offset .. offset+k-1` among the chunks it may see
(`self._allowed`, None meaning all). Everything a caller relies on regardless of the
backend lives here, so the backends cannot drift apart on it:

- `k >= 1` and `offset >= 0`, or a ValueError saying which one is wrong;
- one `SearchCall` per query in the current trace (the ports write the trace, agents
  never do);
- equal scores are ordered by chunk position in the index (`top_positions`), so a
  question asked twice gets the same evidence in the same order;
- `restrict(...)` returns a retriever over a subset of the chunks (RopMura's knowledge
  agents each search only their own collection).
"""

from __future__ import annotations

import copy
import time
from typing import Iterable, Sequence

import numpy as np

from marag.corpus.models import Chunk
from marag.index.base import Hit
from marag.trace.records import SearchCall, record_search


def index_text(chunk: Chunk) -> str:
    """The text a chunk is indexed under: its title (when it has one), then its text."""
    return f"{chunk.title}\n{chunk.text}" if chunk.title else chunk.text


def top_positions(scores: np.ndarray, n: int) -> np.ndarray:
    """Positions of the `n` highest finite scores, best first, ties by lower position.

    `-inf` marks positions that must not be returned (outside a restriction).
    Runs in O(len(scores)) plus O(n log n): a partition, then a sort of the survivors.
    """
    scores = np.asarray(scores)
    size = scores.shape[0]
    n = min(n, size)
    if n <= 0:
        return np.empty(0, dtype=np.int64)
    if n < size:
        # The n-th best value is the threshold; everything strictly above it is in, and
        # the remaining slots go to the lowest positions among those equal to it. Plain
        # argpartition would pick among equal values arbitrarily.
        threshold = scores[np.argpartition(-scores, n - 1)[n - 1]]
        above = np.flatnonzero(scores > threshold)
        equal = np.flatnonzero(scores == threshold)[: n - above.size]
        candidates = np.concatenate([above, equal])
    else:
        candidates = np.arange(size)
    candidates = candidates[np.isfinite(scores[candidates])]
    # lexsort sorts by the last key first: score descending, then position ascending.
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order]


def as_mask(selection: np.ndarray | Iterable[int], size: int) -> np.ndarray:
    """A boolean mask over `size` positions from a mask or from chunk positions."""
    arr = np.asarray(selection if isinstance(selection, np.ndarray) else list(selection))
    if arr.dtype == bool:
        if arr.shape != (size,):
            raise ValueError(
                f"a restriction mask must have one entry per chunk ({size}), got shape {arr.shape}"
            )
        return arr.copy()
    mask = np.zeros(size, dtype=bool)
    if arr.size:
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError("restrict() takes a boolean mask or integer chunk positions")
        if arr.min() < 0 or arr.max() >= size:
            raise ValueError(f"chunk positions must lie in 0..{size - 1}")
        mask[arr] = True
    return mask


def check_paging(k: int, offset: int) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1 (the number of hits to return), got {k!r}")
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or offset < 0:
        raise ValueError(f"offset must be an integer >= 0 (how many top hits to skip), got {offset!r}")


class BaseRetriever:
    """Base for retrievers over a fixed, ordered list of chunks (see module docstring)."""

    #: Registry name of the kind; instances may carry a more specific `name`.
    kind: str = "retriever"

    def __init__(self, chunks: Sequence[Chunk], name: str | None = None):
        self.chunks = chunks
        self.name = name or self.kind
        # None = every chunk; otherwise a boolean mask over chunk positions.
        self._allowed: np.ndarray | None = None

    # -- to implement -----------------------------------------------------------------
    def _search_batch(self, queries: list[str], k: int, offset: int) -> list[list[Hit]]:
        raise NotImplementedError

    # -- the Retriever protocol ---------------------------------------------------------
    def search(self, query: str, k: int = 10, offset: int = 0) -> list[Hit]:
        return self.search_batch([query], k=k, offset=offset)[0]

    def search_batch(self, queries: Sequence[str], k: int = 10, offset: int = 0) -> list[list[Hit]]:
        check_paging(k, offset)
        if isinstance(queries, str):
            raise TypeError("search_batch() takes a list of queries; use search() for one query")
        queries = list(queries)
        for q in queries:
            if not isinstance(q, str):
                raise TypeError(f"queries must be strings, got {type(q).__name__}")
        if not queries:
            return []
        t0 = time.perf_counter()
        results = self._search_batch(queries, int(k), int(offset))
        # A batch runs as one computation; each query is charged an equal share of it.
        latency = (time.perf_counter() - t0) / len(queries)
        for query, hits in zip(queries, results):
            record_search(
                SearchCall(
                    retriever=self.name,
                    query=query,
                    k=int(k),
                    offset=int(offset),
                    hits=[{"doc_id": h.doc_id, "chunk_id": h.chunk_id, "score": h.score} for h in hits],
                    latency_s=round(latency, 6),
                )
            )
        return results

    # -- restriction ----------------------------------------------------------------------
    def restrict(self, selection: np.ndarray | Iterable[int], label: str | None = None):
        """A retriever that only returns chunks in `selection` (a boolean mask over chunk
        positions, or the positions themselves). The copy shares the index data; a
        restriction of a restricted retriever keeps the intersection."""
        mask = as_mask(selection, len(self.chunks))
        if self._allowed is not None:
            mask &= self._allowed
        clone = copy.copy(self)
        clone._allowed = mask
        if label:
            clone.name = f"{self.name}[{label}]"
        clone._restricted()
        return clone

    def _restricted(self) -> None:
        """Hook: a fresh restricted copy may precompute per-subset data here."""

    @property
    def size(self) -> int:
        """How many chunks this retriever can return."""
        return len(self.chunks) if self._allowed is None else int(self._allowed.sum())

    # -- helpers for subclasses -----------------------------------------------------------
    def _hit(self, position: int, score: float) -> Hit:
        c = self.chunks[position]
        return Hit(doc_id=c.doc_id, chunk_id=c.id, score=float(score), text=c.text, title=c.title)

    def _page(self, scores: np.ndarray, k: int, offset: int) -> list[Hit]:
        """Hits ranked offset..offset+k-1 from a full score vector (restriction applied)."""
        if self._allowed is not None:
            scores = np.where(self._allowed, scores, -np.inf)
        ranked = top_positions(scores, offset + k)[offset:]
        return [self._hit(int(p), scores[p]) for p in ranked]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, chunks={self.size})"
