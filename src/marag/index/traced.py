"""What retrievers share besides their base class (`marag.index.retriever`): ranked
arrays (`Ranked`), hits and their trace records, paging checks, restriction masks, and
a batch's pages, made when first read under a collector hold (`LazyHits`).
"""

from __future__ import annotations

import sys
import threading
from itertools import accumulate
from typing import Any, Callable, Iterable, NamedTuple, Sequence, TypeVar

import numpy as np
from pydantic import BaseModel

from marag.collector import held_collections
from marag.corpus.models import Chunk
from marag.index.base import Hit
from marag.trace.records import SearchCall, _current_step, current_trace

M = TypeVar("M", bound=BaseModel)
_NEW = object.__new__
_HELD = held_collections()
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


new_search_call = trusted_constructor(
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


def paged(hits: list[Hit], sizes: list[int]) -> list[list[Hit]]:
    """A batch's hits, end to end, cut into its queries' pages of `sizes`."""
    return [hits[end - n : end] for end, n in zip(accumulate(sizes), sizes)]


class _Flat:
    """The ranked positions and scores of a whole batch, end to end, the size of each
    query's page, and the retriever that makes hits of them: what the batch's `LazyHits`
    share."""

    __slots__ = ("owner", "positions", "scores", "sizes", "pages")

    def __init__(self, owner: Any, positions: list[int], scores: list[float], sizes: list[int]):
        self.owner, self.positions, self.scores, self.sizes = owner, positions, scores, sizes
        self.pages: list[list[Hit]] | None = None

    def page(self, i: int) -> list[Hit]:
        """Query i's hits. Every page is made at the first call: a caller who reads one
        page almost always reads them all, and one pass is cheaper than one per page; no
        collection starts while they are made (see `search_batch`)."""
        if self.pages is None:
            with _BUILDING, _HELD:  # two threads reading one batch: the hits are made once
                if self.pages is None:
                    self.pages = paged(self.owner._hits_at(self.positions, self.scores), self.sizes)
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


def lazy_pages(owner: Any, positions: list[int], scores: list[float], sizes: list[int]) -> list[LazyHits]:
    """One `LazyHits` page per query of a batch, end to end in `positions` and `scores`
    and cut by `sizes`; `owner._hits_at(positions, scores)` makes the hits when a page is
    first read."""
    batch = _Flat(owner, positions, scores, sizes)
    return [LazyHits(batch, i, n) for i, n in enumerate(sizes)]
