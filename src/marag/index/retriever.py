"""`BaseRetriever`, the shared half of every built-in retriever: argument checks,
tracing, restriction.

A subclass implements `_rank(queries, want)`, which returns the positions and scores of
each query's best `want` chunks among those it may see (`self._allowed`, None meaning
all) as arrays (`Ranked`); hits are made from them only for the page asked for, and the
hybrid fuses members' arrays without making hits at all. A subclass may instead
implement `_search_batch(queries, k, offset)` and return hits directly. Everything a
caller relies on regardless of the backend lives here, so the backends cannot drift
apart on it:

- `k >= 1` and `offset >= 0`, or a ValueError saying which one is wrong;
- one `SearchCall` per query in the current trace (the ports write the trace, agents
  never do);
- equal scores are ordered by chunk position in the index, so a question asked twice
  gets the same evidence in the same order;
- `restrict(...)` returns a retriever over a subset of the chunks (RopMura's knowledge
  agents each search only their own collection).
"""

from __future__ import annotations

import copy
import time
from typing import Iterable, Sequence

import numpy as np

from marag.collector import held_collections
from marag.corpus.models import Chunk
from marag.index.base import Hit
from marag.index.traced import Ranked, as_mask, check_paging, hit_of, hit_record, lazy_pages, new_search_call, paged, recording
from marag.trace.records import record_search

_HELD = held_collections()
# Bound once: a `with` statement makes a bound method of `__enter__` on every entry, a
# tracked object allocated while the collector is still on, and at the threshold that
# allocation is what starts a collection (a full one, when the young collections run at
# the ends of earlier searches had made one due): seen as 5 full collections in 1,000
# single searches once hits stopped allocating a dict each.
_hold, _release = _HELD.__enter__, _HELD.__exit__


class BaseRetriever:
    """Base for retrievers over a fixed, ordered list of chunks (see module docstring)."""

    #: Registry name of the kind; instances may carry a more specific `name`.
    kind: str = "retriever"

    def __init__(self, chunks: Sequence[Chunk], name: str | None = None):
        self.chunks = chunks
        self.name = name or self.kind
        # None = every chunk; otherwise a boolean mask over chunk positions.
        self._allowed: np.ndarray | None = None
        # Per chunk position: its hit's fields but the score, made on first use (see
        # _hits_at). Restricted copies share the list.
        self._templates: list[tuple[str, str, str, str] | None] | None = None

    # -- to implement (one of the two) ---------------------------------------------------
    def _rank(self, queries: list[str], want: int) -> Ranked:
        """Each query's best `want` chunks (fewer when fewer match) as arrays."""
        raise NotImplementedError

    def _search_batch(self, queries: list[str], k: int, offset: int) -> list[Sequence[Hit]]:
        return self._pages(self._rank(queries, offset + k), offset)

    @classmethod
    def ranks(cls) -> bool:
        """Whether this class implements `_rank` (the hybrid then fuses its arrays)."""
        return cls._rank is not BaseRetriever._rank

    # -- the Retriever protocol ---------------------------------------------------------
    def search(self, query: str, k: int = 10, offset: int = 0) -> list[Hit]:
        # search_batch's path for one query, without its list handling: on a small
        # corpus a search takes tens of microseconds, and the wrapping was a tenth of it
        check_paging(k, offset)
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, got {type(query).__name__}")
        _hold()
        try:
            return self._timed([query], int(k), int(offset))[0]
        finally:
            _release()

    def search_batch(self, queries: Sequence[str], k: int = 10, offset: int = 0) -> list[Sequence[Hit]]:
        check_paging(k, offset)
        if isinstance(queries, str):
            raise TypeError("search_batch() takes a list of queries; use search() for one query")
        queries = list(queries)
        for q in queries:
            if not isinstance(q, str):
                raise TypeError(f"queries must be strings, got {type(q).__name__}")
        if not queries:
            return []
        # The hits (and trace records) of a batch all stay alive and form no cycles: a
        # collection in the middle of making them would free nothing, and a full one walks
        # every object in the process (see marag.collector). Single searches too: one that
        # happened to set off a full collection cost a round of 200 of them 4x its time.
        with _HELD:
            return self._timed(queries, int(k), int(offset))

    def _timed(self, queries: list[str], k: int, offset: int) -> list[Sequence[Hit]]:
        if not recording():  # nothing to time for
            return self._search_batch(queries, k, offset)
        t0, wall = time.perf_counter(), time.time()
        results = self._search_batch(queries, k, offset)
        # A batch runs as one computation; each query is charged an equal share of it.
        self._record(queries, k, offset, results, (time.perf_counter() - t0) / len(queries), wall)
        return results

    def _record(self, queries: list[str], k: int, offset: int, results: list[list[Hit]], latency: float, started: float = 0.0) -> None:
        for query, hits in zip(queries, results):
            record_search(
                new_search_call(
                    {
                        "retriever": self.name,
                        "query": query,
                        "k": k,
                        "offset": offset,
                        "hits": [hit_record(h) for h in hits],
                        "latency_s": round(latency, 6),
                        "started": round(started, 4),
                    }
                )
            )

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
        return hit_of(self.chunks[position], float(score))

    def _pages(self, ranked: Ranked, offset: int = 0) -> list[Sequence[Hit]]:
        """Each query's hits in `ranked`, from rank `offset` on: a list for one query or a
        traced batch, otherwise a `LazyHits` page per query, made when first read."""
        if ranked.extra:
            # tolist() turns numpy scalars into Python ints and floats in one call.
            counts = ranked.counts.tolist()
            positions = ranked.positions[:, offset:].tolist()
            scores = ranked.scores[:, offset:].tolist()
            size = len(self.chunks)
            return [
                [
                    self._hit(p, s) if p < size else ranked.extra[p - size].model_copy(update={"score": s})
                    for p, s in zip(ps[: max(0, n - offset)], ss)
                ]
                for ps, ss, n in zip(positions, scores, counts)
            ]
        width = max(0, ranked.positions.shape[1] - offset)
        sizes = [min(max(0, n - offset), width) for n in ranked.counts.tolist()]
        if len(sizes) == 1:  # one query (search()): as few numpy calls as possible
            flat_positions = ranked.positions[0, offset : offset + sizes[0]].tolist()
            flat_scores = ranked.scores[0, offset : offset + sizes[0]].tolist()
        elif min(sizes) == width:
            flat_positions = ranked.positions[:, offset:].ravel().tolist()
            flat_scores = ranked.scores[:, offset:].ravel().tolist()
        else:
            valid = np.arange(width) < np.array(sizes)[:, None]
            flat_positions = ranked.positions[:, offset:][valid].tolist()
            flat_scores = ranked.scores[:, offset:][valid].tolist()
        if not flat_positions:
            return [[] for _ in sizes]
        if len(sizes) == 1:
            return [self._hits_at(flat_positions, flat_scores)]
        if recording():
            # The trace records every hit at once: no point in waiting.
            return paged(self._hits_at(flat_positions, flat_scores), sizes)
        # A batch's hits are made when they are first read (`LazyHits`): the ranking is
        # the search; the hits of 700 queries cost about as much again on small corpora.
        return lazy_pages(self, flat_positions, flat_scores, sizes)

    def _hits_at(self, positions: list[int], scores: list[float]) -> list[Hit]:
        """The hits of chunk `positions` with `scores` (Python ints and floats)."""
        # A hit's fields but the score are its chunk's: each chunk's are read once (on its
        # first hit) into a tuple that later hits reuse; a whole batch in one loop (per
        # query, the Python calls would cost more than the hits).
        if self._templates is None:
            self._templates = [None] * len(self.chunks)
        templates = self._templates
        rows = list(map(templates.__getitem__, positions))
        if None in rows:
            chunks = self.chunks
            for p in set(positions):
                if templates[p] is None:
                    c = chunks[p]
                    templates[p] = (c.doc_id, c.id, c.text, c.title)
            rows = list(map(templates.__getitem__, positions))
        return Hit.many(rows, scores)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, chunks={self.size})"
