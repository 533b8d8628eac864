"""The shared half of every built-in retriever: argument checks, tracing, restriction.

A subclass implements `_rank(queries, want)`, which returns the positions and scores of
each query's best `want` chunks among those it may see (`self._allowed`, None meaning
all) as arrays (`Ranked`); hits are made from them only for the page asked for, and the
hybrid fuses members' arrays without making hits at all. A subclass may instead
implement `_search_batch(queries, k, offset)` and return hits directly. Everything a caller relies on regardless of the
backend lives here, so the backends cannot drift apart on it:

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
from typing import Any, Callable, Iterable, NamedTuple, Sequence, TypeVar

import numpy as np
from pydantic import BaseModel

from marag.corpus.models import Chunk
from marag.index.base import Hit
from marag.trace.records import SearchCall, record_search

M = TypeVar("M", bound=BaseModel)


def index_text(chunk: Chunk) -> str:
    """The text a chunk is indexed under: its title (when it has one), then its text."""
    return f"{chunk.title}\n{chunk.text}" if chunk.title else chunk.text


class Ranked(NamedTuple):
    """Ranked chunks for a batch of queries: row i holds query i's best chunks, best
    first, equal scores by position; only the first `counts[i]` entries are valid.

    Positions index the retriever's chunks; a position `len(chunks) + j` stands for
    `extra[j]`, a hit outside them (only a hybrid with a foreign member makes those)."""

    positions: np.ndarray  # (n_queries, width) int64, -1 past counts[i]
    scores: np.ndarray  # (n_queries, width)
    counts: np.ndarray  # (n_queries,) int64
    extra: tuple[Hit, ...] = ()


def trusted_constructor(model: type[M], probe: dict[str, Any]) -> Callable[[dict[str, Any]], M]:
    """A function values -> `model` instance that skips pydantic validation.

    For values this module builds from already validated records (a Chunk's fields, a
    float score), validating again only costs time: `Hit(...)` takes ~2.7 us, and ten
    hits plus the trace record cost more than the BM25 engine's whole search on small
    corpora. `values` must give every field, with the right types. The fast path fills
    the model's slots the way pydantic's `model_construct` does; it is used only if an
    instance built from `probe` that way is indistinguishable from a validated one, so
    a pydantic release that changes its internals falls back to validation instead of
    producing broken objects."""
    fields = frozenset(model.model_fields)
    new = model.__new__
    set_slot = object.__setattr__

    def fast(values: dict[str, Any]) -> M:
        obj = new(model)
        set_slot(obj, "__dict__", values)
        set_slot(obj, "__pydantic_fields_set__", set(fields))
        set_slot(obj, "__pydantic_extra__", None)
        set_slot(obj, "__pydantic_private__", None)
        return obj

    def validated(values: dict[str, Any]) -> M:
        return model(**values)

    try:
        a, b = fast(dict(probe)), validated(dict(probe))
        same = a == b and a.model_dump() == b.model_dump() and a.model_fields_set == b.model_fields_set
    except Exception:  # noqa: BLE001 - any surprise means: validate
        same = False
    return fast if same and set(probe) == fields else validated


_new_hit = trusted_constructor(
    Hit, {"doc_id": "d", "chunk_id": "d#0", "score": 1.5, "text": "t", "title": "x"}
)
_new_search_call = trusted_constructor(
    SearchCall,
    {
        "retriever": "r",
        "query": "q",
        "k": 1,
        "offset": 0,
        "hits": [{"doc_id": "d", "chunk_id": "d#0", "score": 1.5}],
        "latency_s": 0.5,
    },
)


def hit_of(chunk: Chunk, score: float) -> Hit:
    """The hit for `chunk` with `score` (a Python float)."""
    return _new_hit(
        {"doc_id": chunk.doc_id, "chunk_id": chunk.id, "score": score, "text": chunk.text, "title": chunk.title}
    )


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

    # -- to implement (one of the two) ---------------------------------------------------
    def _rank(self, queries: list[str], want: int) -> Ranked:
        """Each query's best `want` chunks (fewer when fewer match) as arrays."""
        raise NotImplementedError

    def _search_batch(self, queries: list[str], k: int, offset: int) -> list[list[Hit]]:
        ranked = self._rank(queries, offset + k)
        return [self._hits(ranked, i, offset) for i in range(len(queries))]

    @classmethod
    def ranks(cls) -> bool:
        """Whether this class implements `_rank` (the hybrid then fuses its arrays)."""
        return cls._rank is not BaseRetriever._rank

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
                _new_search_call(
                    {
                        "retriever": self.name,
                        "query": query,
                        "k": int(k),
                        "offset": int(offset),
                        "hits": [{"doc_id": h.doc_id, "chunk_id": h.chunk_id, "score": h.score} for h in hits],
                        "latency_s": round(latency, 6),
                    }
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
        return hit_of(self.chunks[position], float(score))

    def _hits(self, ranked: Ranked, row: int, offset: int = 0) -> list[Hit]:
        """Hits for query `row` of `ranked`, from rank `offset` on."""
        end = int(ranked.counts[row])
        # tolist() turns numpy scalars into Python ints and floats in one call.
        positions = ranked.positions[row, offset:end].tolist()
        scores = ranked.scores[row, offset:end].tolist()
        chunks = self.chunks
        if not ranked.extra:
            return [hit_of(chunks[p], s) for p, s in zip(positions, scores)]
        size = len(chunks)
        return [
            hit_of(chunks[p], s) if p < size else ranked.extra[p - size].model_copy(update={"score": s})
            for p, s in zip(positions, scores)
        ]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, chunks={self.size})"
