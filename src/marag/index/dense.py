"""Dense retrieval: unit-length vectors, ranked by inner product (= cosine).

Vectors belong to the distinct texts of the chunks (a passage that occurs several times
is embedded, stored and scored once; its copies tie exactly and are ordered by
position). Embedding models read a limited number of tokens (MiniLM: 256, ~190 words)
and chunks are often longer (512 words by default), so with `window_overlap` set, an
embedder that offers `embed_windows` embeds each text as overlapping windows it reads
whole, and a text scores the best of its windows (max pooling), in exact and HNSW
search alike. A text that fits has one vector, the same one truncation would give.

`ann="exact"` scores every vector with one matrix product (batched for search_batch);
exact, and fast enough for a few hundred thousand vectors. `ann="hnsw"` answers from a
faiss HNSW graph over the vectors instead (approximate; optional dependency). A
retriever restricted to a subset always searches that subset exactly: collections are
small, and a filtered graph walk would be both slower and less accurate there.

On disk (`dense/`): `vectors.npy` (float32, one row per window of each distinct text),
`windows.npy` (int64, texts + 1: text u owns rows windows[u] .. windows[u+1]-1),
`texts.npy` (int64, one per chunk: its text), `dense.json` (embedder name, dim, model
hash, layout, ANN parameters), `hnsw.faiss` when built.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from marag.corpus.models import Chunk
from marag.errors import IndexFormatError, MaragError
from marag.index.config import IndexConfig
from marag.index.embed import Embedder, embedder_info, get_embedder
from marag.index.base import Hit
from marag.index.kinds import RETRIEVERS
from marag.index.retriever import BaseRetriever
from marag.index.traced import Ranked, index_text, kernels

VECTORS_FILE = "vectors.npy"
WINDOWS_FILE = "windows.npy"
TEXTS_FILE = "texts.npy"
META_FILE = "dense.json"
HNSW_FILE = "hnsw.faiss"
_REBUILD = "rebuild the index with `marag index ... --overwrite`"
# HNSW candidate list length: IndexConfig's default, where the measurements behind it are.
DEFAULT_EF_SEARCH: int = IndexConfig.model_fields["hnsw_ef_search"].default


def import_faiss():
    try:
        import faiss
    except ImportError:
        raise MaragError(
            "HNSW search needs faiss, which is not installed",
            hint="pip install 'marag[faiss]'  (or use ann='exact')",
        ) from None
    return faiss


def build_hnsw(vectors: np.ndarray, m: int = 32, ef_construction: int = 100):
    faiss = import_faiss()
    index = faiss.IndexHNSWFlat(vectors.shape[1], m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


class _EmbedderSlot:
    """An embedder, or the factory that makes it on first use (thread-safe)."""

    def __init__(self, source: Embedder | Callable[[], Embedder]):
        self.embedder: Embedder | None = source if isinstance(source, Embedder) else None
        self._factory = None if self.embedder is not None else source
        self._lock = threading.Lock()

    def get(self, check: Callable[[Embedder], None]) -> Embedder:
        if self.embedder is None:
            with self._lock:
                if self.embedder is None:
                    emb = self._factory()  # type: ignore[misc]
                    check(emb)
                    self.embedder = emb
        return self.embedder


@dataclass(frozen=True)
class Layout:
    """Which vectors are whose: text u owns rows windows[u] .. windows[u+1]-1 of the
    vectors, chunk c has text texts[c]."""

    windows: np.ndarray  # (n_texts + 1,) int64
    texts: np.ndarray  # (n_chunks,) int64

    @classmethod
    def simple(cls, n_chunks: int) -> "Layout":
        """One vector per chunk, every chunk its own text."""
        return cls(np.arange(n_chunks + 1, dtype=np.int64), np.arange(n_chunks, dtype=np.int64))

    @property
    def n_texts(self) -> int:
        return len(self.windows) - 1

    def check(self, n_vectors: int, n_chunks: int) -> None:
        w, t = self.windows, self.texts
        ok = (
            w.ndim == 1
            and t.shape == (n_chunks,)
            and len(w) >= 1
            and w[0] == 0
            and w[-1] == n_vectors
            and bool(np.all(np.diff(w) >= 1))
            and (n_chunks == 0 or (t.min() >= 0 and t.max() < len(w) - 1))
        )
        if not ok:
            raise IndexFormatError(
                f"the dense layout (windows {w.shape}, texts {t.shape}) does not fit {n_vectors} vectors and "
                f"{n_chunks} chunks (every text needs one or more vectors, every chunk a text)",
                hint=_REBUILD,
            )

    def rows_of(self, texts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(vector rows, windows) of the given texts, in their order."""
        counts = np.diff(self.windows)[texts]
        windows = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(counts, out=windows[1:])
        rows = np.repeat(self.windows[texts] - windows[:-1], counts) + np.arange(windows[-1])
        return rows, windows

    def subset(self, chunks: np.ndarray) -> tuple[np.ndarray, "Layout"]:
        """(vector rows, layout) for the given chunk positions only."""
        kept, texts = np.unique(self.texts[chunks], return_inverse=True)
        rows, windows = self.rows_of(kept)
        return rows, Layout(windows, texts.astype(np.int64))

    def text_chunks(self) -> tuple[np.ndarray, np.ndarray]:
        """(ptr, chunks): the chunks of text u, in position order, are chunks[ptr[u]:ptr[u+1]]."""
        chunks = np.argsort(self.texts, kind="stable")
        ptr = np.zeros(self.n_texts + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.texts, minlength=self.n_texts), out=ptr[1:])
        return ptr, chunks

    def row_texts(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_texts, dtype=np.int64), np.diff(self.windows))


def embed_chunks(
    embedder: Embedder, chunk_texts: list[str], window_overlap: int | None, progress: bool = False
) -> tuple[np.ndarray, Layout, dict[str, Any]]:
    """(vectors, layout, record): each distinct text embedded once, as windows when
    asked for and the embedder offers them (embedders without an input limit read every
    text whole anyway), else as one vector. `record` goes into dense.json."""
    first: dict[str, int] = {}
    texts = np.fromiter((first.setdefault(t, len(first)) for t in chunk_texts), np.int64, len(chunk_texts))
    distinct = list(first)
    split = getattr(embedder, "embed_windows", None)
    if window_overlap is None or split is None:
        vectors, windows = embedder.embed(distinct, progress=progress), np.arange(len(distinct) + 1)
        window_overlap = None
    else:
        vectors, windows = split(distinct, overlap=window_overlap, progress=progress)
    layout = Layout(np.asarray(windows, dtype=np.int64), texts)
    record = {
        "chunks": len(chunk_texts),
        "distinct_texts": len(distinct),
        "vectors": int(len(vectors)),
        "window_overlap": window_overlap,
        "max_tokens": getattr(embedder, "max_length", None),
        "texts_with_several_windows": int((np.diff(layout.windows) > 1).sum()),
    }
    return np.ascontiguousarray(vectors, dtype=np.float32), layout, record


@RETRIEVERS.register("dense")
class DenseRetriever(BaseRetriever):
    """Inner-product search over `vectors`, which `layout` assigns to chunks (default:
    row i is chunk i's only vector).

    `embedder` is an Embedder or a zero-argument factory, called on the first query, so
    opening an index never loads the embedding model unless dense search is used.
    """

    kind = "dense"

    def __init__(
        self,
        chunks: Sequence[Chunk],
        vectors: np.ndarray,
        embedder: Embedder | Callable[[], Embedder],
        ann: str = "exact",
        hnsw: Any = None,
        ef_search: int = DEFAULT_EF_SEARCH,
        expected_model_sha256: str | None = None,
        name: str | None = None,
        query_block: int | None = None,
        layout: Layout | None = None,
        record: dict[str, Any] | None = None,
    ):
        super().__init__(chunks, name)
        layout = layout or Layout.simple(len(chunks))
        layout.check(vectors.shape[0] if vectors.ndim == 2 else -1, len(chunks))
        if ann not in ("exact", "hnsw"):
            raise ValueError(f"ann must be 'exact' or 'hnsw', got {ann!r}")
        if ann == "hnsw" and hnsw is None:
            hnsw = build_hnsw(vectors)
        self.vectors = vectors
        self.layout = layout
        self.record = record  # how the vectors were made (dense.json "layout")
        self.ann = ann
        self.hnsw = hnsw
        self.ef_search = ef_search
        # Queries per matrix product: big blocks make the product efficient, and the
        # score block (queries x windows, float32) is held to ~32 MB.
        self.query_block = query_block or int(np.clip(8_000_000 // max(1, vectors.shape[0]), 16, 1024))
        self._expected_sha = expected_model_sha256
        # Shared by restricted copies (copy.copy keeps the reference), so many
        # collection retrievers load one embedding model, not one each.
        self._slot = _EmbedderSlot(embedder)
        if self._slot.embedder is not None:
            self._check_embedder(self._slot.embedder)
        self._hnsw_maps: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # made on first use
        self._search_params: dict[int, Any] = {}  # efSearch -> faiss parameters
        self._hnsw_scratch = threading.local()  # per thread: one -inf per text (see pool_candidates)
        self._direct: bool | None = None  # whether graph rows are chunk positions (made on first use)
        self._rows: np.ndarray | None = None
        self._sub: tuple[np.ndarray, Layout] | None = None
        self._sub_lock = threading.Lock()

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def embedder(self) -> Embedder:
        """The query embedder, loaded on first use and checked against the index."""
        return self._slot.get(self._check_embedder)

    def _check_embedder(self, emb: Embedder) -> None:
        if emb.dim != self.dim:
            raise IndexFormatError(
                f"embedder {emb.name!r} makes {emb.dim}-dim vectors but the index holds {self.dim}-dim vectors",
                hint=_REBUILD,
            )
        sha = getattr(emb, "model_sha256", None)
        if self._expected_sha and sha and sha != self._expected_sha:
            raise IndexFormatError(
                f"the installed {emb.name!r} model (sha256 {sha[:12]}...) is not the one this index "
                f"was built with ({self._expected_sha[:12]}...)",
                hint=_REBUILD,
            )

    # -- building and persistence ---------------------------------------------------------
    @classmethod
    def from_chunks(
        cls,
        chunks: Sequence[Chunk],
        embedder: Embedder,
        ann: str = "exact",
        hnsw_m: int = 32,
        ef_construction: int = 100,
        ef_search: int = DEFAULT_EF_SEARCH,
        progress: bool = False,
        window_overlap: int | None = None,
    ) -> "DenseRetriever":
        """Embed the distinct texts of `chunks` (as windows overlapping by
        `window_overlap` tokens when given and the embedder has an input limit; else one
        vector each, truncated)."""
        if not chunks:
            raise ValueError("cannot build a dense index over zero chunks")
        vectors, layout, record = embed_chunks(embedder, [index_text(c) for c in chunks], window_overlap, progress)
        hnsw = build_hnsw(vectors, hnsw_m, ef_construction) if ann == "hnsw" else None
        r = cls(
            chunks,
            vectors,
            embedder,
            ann=ann,
            hnsw=hnsw,
            ef_search=ef_search,
            expected_model_sha256=getattr(embedder, "model_sha256", None),
            layout=layout,
            record=record,
        )
        r._hnsw_params = {"m": hnsw_m, "ef_construction": ef_construction}
        return r

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / VECTORS_FILE, np.asarray(self.vectors, dtype=np.float32))
        np.save(directory / WINDOWS_FILE, self.layout.windows)
        np.save(directory / TEXTS_FILE, self.layout.texts)
        meta: dict[str, Any] = {
            "embedder": embedder_info(self.embedder),
            "dim": self.dim,
            "count": len(self.chunks),
            "layout": self.record or {"chunks": len(self.chunks), "vectors": int(self.vectors.shape[0])},
            "ann": self.ann,
            "ef_search": self.ef_search,
        }
        if self.hnsw is not None:
            faiss = import_faiss()
            faiss.write_index(self.hnsw, str(directory / HNSW_FILE))
            meta["hnsw"] = {**getattr(self, "_hnsw_params", {}), "faiss": faiss.__version__}
        (directory / META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")
        return directory

    @staticmethod
    def read_meta(directory: str | Path) -> dict[str, Any]:
        path = Path(directory) / META_FILE
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise IndexFormatError(
                f"dense index at {directory} is incomplete ({path.name}: {exc})", hint=_REBUILD
            ) from None

    @classmethod
    def load_dir(
        cls,
        directory: str | Path,
        chunks: Sequence[Chunk],
        embedder: Embedder | Callable[[], Embedder] | None = None,
        ef_search: int | None = None,
        mmap: bool = True,
        embedder_options: dict[str, Any] | None = None,
    ) -> "DenseRetriever":
        directory = Path(directory)
        meta = cls.read_meta(directory)
        emb_meta = meta.get("embedder", {})
        if embedder is None:
            name = emb_meta.get("name")
            # Queries are embedded one or two at a time, while the local model computes on
            # the same cores: one onnxruntime thread that sleeps when idle. Measured
            # (benchmarks/threads.py, llama.cpp on 2 threads, a search every 50 ms beside
            # it): generation 23.5 tok/s with 2 spinning threads, 55.0 with 1 sleeping,
            # 176 with no search.
            options = ({"threads": 1, "spin": False} if name == "minilm" else {}) | dict(embedder_options or {})
            embedder = lambda: get_embedder(name, **options)  # noqa: E731 - loaded on first query
        try:
            vectors = np.load(directory / VECTORS_FILE, mmap_mode="r" if mmap else None)
            layout = Layout(np.load(directory / WINDOWS_FILE), np.load(directory / TEXTS_FILE))
        except (OSError, ValueError) as exc:
            raise IndexFormatError(
                f"cannot read dense vectors at {directory}: {exc}", hint=_REBUILD
            ) from None
        if vectors.dtype != np.float32 or vectors.ndim != 2 or vectors.shape[1] != meta.get("dim"):
            raise IndexFormatError(
                f"dense vectors at {directory} are {vectors.dtype}{vectors.shape}, expected float32 with dim {meta.get('dim')}",
                hint=_REBUILD,
            )
        hnsw = None
        if meta.get("ann") == "hnsw":
            faiss = import_faiss()
            try:
                hnsw = faiss.read_index(str(directory / HNSW_FILE))
            except RuntimeError as exc:
                raise IndexFormatError(
                    f"cannot read the HNSW graph at {directory}: {exc}", hint=_REBUILD
                ) from None
        return cls(
            chunks,
            vectors,
            embedder,
            ann=meta.get("ann", "exact"),
            hnsw=hnsw,
            ef_search=ef_search or meta.get("ef_search", DEFAULT_EF_SEARCH),
            expected_model_sha256=emb_meta.get("model_sha256"),
            layout=layout,
            record=meta.get("layout"),
        )

    # -- the index-directory protocol (see marag.index.kinds) -------------------------------
    @classmethod
    def build(
        cls, chunks: Sequence[Chunk], directory: Path, config: IndexConfig, progress: bool = True
    ) -> dict[str, Any]:
        embedder = get_embedder(config.embedder)
        r = cls.from_chunks(
            chunks,
            embedder,
            ann=config.ann,
            hnsw_m=config.hnsw_m,
            ef_construction=config.hnsw_ef_construction,
            ef_search=config.hnsw_ef_search,
            progress=progress,
            window_overlap=config.dense_window_overlap if config.dense_long_chunks == "windows" else None,
        )
        r.save(directory)
        return cls.read_meta(directory)

    @classmethod
    def load(cls, index: Any) -> "DenseRetriever":
        return cls.load_dir(
            Path(index.path) / cls.kind,
            index.chunks,
            ef_search=index.config.hnsw_ef_search,
            embedder_options=getattr(index, "embedder_options", None),
        )

    # -- search ---------------------------------------------------------------------------
    def _restricted(self) -> None:
        self._rows = np.flatnonzero(self._allowed)
        self._sub = None  # copied on first search
        self._sub_lock = threading.Lock()

    def _view(self) -> tuple[np.ndarray, Layout]:
        """(vectors, layout) of the chunks this retriever may return, in their order."""
        if self._rows is None:
            return self.vectors, self.layout
        with self._sub_lock:
            if self._sub is None:
                rows, layout = self.layout.subset(self._rows)
                self._sub = (np.ascontiguousarray(self.vectors[rows]), layout)
        return self._sub

    def chunk_vectors(self) -> np.ndarray:
        """One unit vector per chunk this retriever may return (in position order): the
        mean of the chunk's window vectors. For clustering a collection (RopMura's
        knowledge boundaries) without embedding its texts again."""
        vectors, layout = self._view()
        sums = np.add.reduceat(vectors.astype(np.float32), layout.windows[:-1], axis=0)
        per_text = sums / np.linalg.norm(sums, axis=1, keepdims=True).clip(1e-12)
        return per_text[layout.texts]

    def embed_queries(self, queries: list[str]) -> np.ndarray:
        return np.asarray(self.embedder.embed(queries), dtype=np.float32)

    def _search_batch(self, queries: list[str], k: int, offset: int) -> list[Sequence[Hit]]:
        if len(queries) == 1 and self._graph_rows_are_chunks():
            hits = self._graph_page(queries[0], k, offset)
            if hits is not None:
                return [hits]
        return super()._search_batch(queries, k, offset)

    def _graph_rows_are_chunks(self) -> bool:
        """Whether this retriever searches its graph and the graph's row i is chunk i (one
        vector per text, one text per chunk, in order: an index of short distinct
        passages)."""
        if self.hnsw is None or self._rows is not None:
            return False
        if self._direct is None:
            n = len(self.layout.texts)
            self._direct = np.array_equal(self.layout.windows, np.arange(n + 1)) and np.array_equal(self.layout.texts, np.arange(n))
        return self._direct

    def _graph_page(self, query: str, k: int, offset: int) -> list[Hit] | None:
        """One query's hits straight from the graph's answer, when its rows are the chunks;
        None when the graph found fewer than asked (the general path asks again).

        What `_rank_hnsw` computes for such an index, without the arrays in between: a
        single search on a small corpus spends most of its time in the graph walk, and
        what runs after it runs on caches the walk has just emptied, so each numpy or
        numba call there cost several microseconds (the kernel call 9-11 us, the arrays
        to hits ~20 us, of ~210 us on the benchmark's pools; issue 28)."""
        want = max(1, min(offset + k, len(self.chunks)))
        dist, ids = self._graph_search(self.embed_queries([query]), want)
        positions, scores = ids[0].tolist(), dist[0].tolist()
        if positions[-1] < 0:  # (-1 fills the end of a short answer)
            return None
        for i in range(want - 1):
            if scores[i] == scores[i + 1]:
                # equal scores by position, as everywhere (the graph leaves their order open)
                order = sorted(range(want), key=lambda j: (-scores[j], positions[j]))
                positions, scores = [positions[j] for j in order], [scores[j] for j in order]
                break
        return self._hits_at(positions[offset:], scores[offset:])

    def _graph_search(self, q: np.ndarray, fetch: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, vector rows) of each query's `fetch` best vectors in the graph."""
        ef = max(self.ef_search, fetch)
        params = self._search_params.get(ef)
        if params is None:  # made once per efSearch value: building one costs ~10 us
            params = self._search_params[ef] = import_faiss().SearchParametersHNSW(efSearch=ef)
        return self.hnsw.search(q, fetch, params=params)

    def _rank(self, queries: list[str], want: int) -> Ranked:
        q = self.embed_queries(queries)
        if self.hnsw is not None and self._rows is None:
            return self._rank_hnsw(q, want)
        matrix, layout = self._view()
        block = self.query_block
        parts = [
            kernels().dense_topk(s, layout.windows, layout.texts, want, self._cuts(s, layout, want))
            for s in (q[a : a + block] @ matrix.T for a in range(0, len(q), block))
        ]
        ranked = Ranked(*parts[0]) if len(parts) == 1 else Ranked(*map(np.concatenate, zip(*parts)))
        if self._rows is not None and ranked.positions.size:
            positions = np.where(ranked.positions >= 0, self._rows[ranked.positions], -1)
            ranked = ranked._replace(positions=positions)
        return ranked

    @staticmethod
    def _cuts(scores: np.ndarray, layout: Layout, want: int) -> np.ndarray:
        """Per row, a score all of its best `want` chunks reach, or NaN for "none known".

        A deep page of a small corpus (the hybrid asks each member for its best 100) is
        cheaper to select by numpy's partition and a sort of what lies above the cut
        than by a heap of `want` in the kernel. With one vector per text, the want-th
        best text score is such a cut: every text has at least one chunk."""
        n_texts = scores.shape[1]
        if want * 16 <= len(layout.texts) or want >= n_texts or n_texts != layout.n_texts or not np.isfinite(scores).all():
            # (a non-finite score among the best would leave fewer than `want` above it)
            return np.full(len(scores), np.nan, dtype=scores.dtype)
        return np.partition(scores, n_texts - want, axis=1)[:, n_texts - want]

    def _rank_hnsw(self, q: np.ndarray, want: int) -> Ranked:
        """Chunks from the graph's best vectors. Several windows of one text can fill the
        candidate list, so rows left with fewer than `want` chunks ask again for twice as
        many vectors, until every vector has been asked for."""
        n_chunks, n_vectors = len(self.chunks), self.vectors.shape[0]
        want = max(1, min(want, n_chunks))
        fetch = min(n_vectors, math.ceil(want * n_vectors / n_chunks))
        ranked = Ranked(*self._hnsw_chunks(q, fetch, want))
        if len(q) == 1 and ranked.counts[0] >= want:  # one query (search()), answered
            return ranked
        short = np.flatnonzero(ranked.counts < want)
        while short.size and fetch < n_vectors:
            fetch = min(n_vectors, fetch * 2)
            again = self._hnsw_chunks(q[short], fetch, want)
            for field, value in zip(ranked, again):
                field[short] = value
            short = short[again[2] < want]
        return ranked

    def _hnsw_chunks(self, q: np.ndarray, fetch: int, want: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._hnsw_maps is None:
            self._hnsw_maps = (self.layout.row_texts(), *self.layout.text_chunks())
        row_texts, ptr, text_chunks = self._hnsw_maps
        dist, ids = self._graph_search(q, fetch)
        best = getattr(self._hnsw_scratch, "best", None)
        if best is None or best.dtype != dist.dtype:
            best = self._hnsw_scratch.best = np.full(self.layout.n_texts, -np.inf, dist.dtype)
        return kernels().pool_candidates(ids, dist, row_texts, self.layout.texts, ptr, text_chunks, want, best)
