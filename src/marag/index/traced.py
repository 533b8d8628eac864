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
import sys
import threading
import time
from itertools import accumulate
from typing import Any, Callable, Iterable, NamedTuple, Sequence, TypeVar

import numpy as np
from pydantic import BaseModel

from marag.collector import held_collections
from marag.corpus.models import Chunk
from marag.index.base import Hit
from marag.trace.records import SearchCall, _current_step, current_trace, record_search

M = TypeVar("M", bound=BaseModel)
_NEW = object.__new__
_HELD = held_collections()
# Bound once: a `with` statement makes a bound method of `__enter__` on every entry, a
# tracked object allocated while the collector is still on, and at the threshold that
# allocation is what starts a collection (a full one, when the young collections run at
# the ends of earlier searches had made one due): seen as 5 full collections in 1,000
# single searches once hits stopped allocating a dict each.
_hold, _release = _HELD.__enter__, _HELD.__exit__
_BUILDING = threading.Lock()


def kernels():
    """`marag.index._kernels`, imported on first use: importing numba takes a few hundred
    milliseconds that callers who never rank need not pay. After that a dict lookup, where
    `from marag.index import _kernels` inside a function cost ~0.7 us on every call."""
    module = sys.modules.get("marag.index._kernels")
    if module is None:
        from marag.index import _kernels as module
    return module


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


class TrustedConstructor:
    """Build `model` instances from values without pydantic validation: `make(values)`
    for one, `make.many(rows)` for a list (one Python call for a whole batch).

    For values this module builds from already validated records (the search records
    of a trace: a query, hits' ids and scores), validating again only costs time: a
    validated record took longer than the BM25 engine's whole search on small corpora.
    `values` must give every field, with the right types. The fast path fills the
    model's slots the way pydantic's `model_construct` does; it is used only if an
    instance built from `probe` that way is indistinguishable from a validated one, so
    a pydantic release that changes its internals falls back to validation instead of
    producing broken objects."""

    def __init__(self, model: type[M], probe: dict[str, Any]):
        self.model = model
        fields = frozenset(model.model_fields)
        try:
            # The slots' own descriptors: calling them skips the attribute lookup that
            # object.__setattr__ repeats on every call (~30% of a hit's cost).
            self._setters = tuple(
                _slot_setter(model, name)
                for name in ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
            )
        except LookupError:
            self._setters = None
        # Every instance gets every field, so all share one fields-set: pydantic only
        # ever adds names to it (on assignment), and they are all in it already;
        # copies (model_copy, pickle) take their own.
        self._all_set = set(fields)
        if self._setters is not None:
            try:
                a, b = self._fast([dict(probe)])[0], model(**probe)
                same = a == b and a.model_dump() == b.model_dump() and a.model_fields_set == b.model_fields_set
            except Exception:  # noqa: BLE001 - any surprise means: validate
                same = False
            if not (same and set(probe) == fields):
                self._setters = None

    @property
    def fast(self) -> bool:
        """Whether instances skip validation (False: pydantic validates each)."""
        return self._setters is not None

    def _fast(self, rows: Iterable[dict[str, Any]]) -> list[M]:
        set_dict, set_fields, set_extra, set_private = self._setters  # type: ignore[misc]
        new, model, all_set, out = _NEW, self.model, self._all_set, []
        append = out.append
        for values in rows:
            obj = new(model)
            set_dict(obj, values)
            set_fields(obj, all_set)
            set_extra(obj, None)
            set_private(obj, None)
            append(obj)
        return out

    def many(self, rows: Iterable[dict[str, Any]]) -> list[M]:
        if self._setters is None:
            return [self.model(**values) for values in rows]
        return self._fast(rows)

    def __call__(self, values: dict[str, Any]) -> M:
        return self.many((values,))[0]


def trusted_constructor(model: type[M], probe: dict[str, Any]) -> TrustedConstructor:
    """See `TrustedConstructor`."""
    return TrustedConstructor(model, probe)


def _slot_setter(model: type, name: str) -> Callable[[Any, Any], None]:
    for klass in model.__mro__:
        if name in vars(klass):
            return vars(klass)[name].__set__
    raise LookupError(name)


_new_search_call = trusted_constructor(
    SearchCall,
    {
        "retriever": "r",
        "query": "q",
        "k": 1,
        "offset": 0,
        "hits": [{"doc_id": "d", "chunk_id": "d#0", "score": 1.5}],
        "latency_s": 0.5,
        "started": 1.0,
    },
)


def recording() -> bool:
    """Whether `record_search` would keep a record: a trace is active or a step is open
    (a step opened outside any trace still collects its own records).

    Building the records of a batch costs about a quarter of a small BM25 search, so
    searches outside any trace (benchmarks, evaluation with tracing off) skip it. The
    trace layer exposes no public test for an open step, hence its private variable."""
    return current_trace() is not None or _current_step.get() is not None


def hit_of(chunk: Chunk, score: float) -> Hit:
    """The hit for `chunk` with `score` (a Python float)."""
    return Hit.many(((chunk.doc_id, chunk.id, chunk.text, chunk.title),), (score,))[0]


def hit_record(hit: Hit) -> dict[str, Any]:
    """A hit as the trace keeps it: ids and score, and the title when it says more than
    the document id (the viewer shows titles; HotpotQA's ids are their titles)."""
    record = {"doc_id": hit.doc_id, "chunk_id": hit.chunk_id, "score": hit.score}
    if hit.title and hit.title != hit.doc_id:
        record["title"] = hit.title
    return record


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


def _paged(hits: list[Hit], sizes: list[int]) -> list[list[Hit]]:
    """A batch's hits, end to end, cut into its queries' pages of `sizes`."""
    return [hits[end - n : end] for end, n in zip(accumulate(sizes), sizes)]


class _Flat:
    """The ranked positions and scores of a whole batch, end to end, the size of each
    query's page, and the retriever that makes hits of them: what the batch's `LazyHits`
    share."""

    __slots__ = ("owner", "positions", "scores", "sizes", "pages")

    def __init__(self, owner: "BaseRetriever", positions: list[int], scores: list[float], sizes: list[int]):
        self.owner, self.positions, self.scores, self.sizes = owner, positions, scores, sizes
        self.pages: list[list[Hit]] | None = None

    def page(self, i: int) -> list[Hit]:
        """Query i's hits. Every page is made at the first call: a caller who reads one
        page almost always reads them all, and one pass is cheaper than one per page; no
        collection starts while they are made (see `search_batch`)."""
        if self.pages is None:
            with _BUILDING, _HELD:  # two threads reading one batch: the hits are made once
                if self.pages is None:
                    self.pages = _paged(self.owner._hits_at(self.positions, self.scores), self.sizes)
                    self.positions = self.scores = None
        return self.pages[i]


class LazyHits(Sequence[Hit]):
    """One query's page of a search batch, as a read-only sequence of `Hit`s made the
    first time any of them is read (then kept). It behaves as the list it stands for:
    indexing, slices (lists), iteration, `len`, `==` with lists, `+`, pickling (as a
    list, so it crosses to Ray workers and back unchanged); `list(page)` gives a list to
    change. Why: ranking is what a search computes; making thousands of pydantic objects
    from it costs as much again on small corpora (issue 28), and a bulk caller that only
    counts the pages or drops them should not pay for them. The first page read makes
    the whole batch's hits (a caller who reads one page almost always reads them all)."""

    __slots__ = ("_flat", "_i", "_n", "_hits")

    def __init__(self, flat: _Flat, i: int, n: int):
        self._flat, self._i, self._n, self._hits = flat, i, n, None

    def _list(self) -> list[Hit]:
        hits = self._hits
        if hits is None:
            hits = self._hits = self._flat.page(self._i)
            self._flat = None
        return hits

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index):  # type: ignore[override]
        return self._list()[index]

    def __iter__(self):
        return iter(self._list())

    def __reversed__(self):
        return reversed(self._list())

    def __contains__(self, item: object) -> bool:
        return item in self._list()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, LazyHits)):
            return self._list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment] # equal to lists, which do not hash

    def __add__(self, other: object) -> list[Hit]:
        if isinstance(other, (list, LazyHits)):
            return self._list() + list(other)
        return NotImplemented

    def __radd__(self, other: object) -> list[Hit]:
        if isinstance(other, list):
            return other + self._list()
        return NotImplemented

    def __reduce__(self):
        return (list, (self._list(),))

    def __repr__(self) -> str:
        return repr(self._list())

    def copy(self) -> list[Hit]:
        return list(self._list())


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
                _new_search_call(
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
            return _paged(self._hits_at(flat_positions, flat_scores), sizes)
        # A batch's hits are made when they are first read (`LazyHits`): the ranking is
        # the search; the hits of 700 queries cost about as much again on small corpora.
        batch = _Flat(self, flat_positions, flat_scores, sizes)
        return [LazyHits(batch, i, n) for i, n in enumerate(sizes)]

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
