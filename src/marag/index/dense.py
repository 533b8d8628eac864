"""Dense retrieval: unit-length chunk vectors, ranked by inner product (= cosine).

`ann="exact"` scores every chunk with one matrix product (batched for search_batch);
exact, and fast enough for a few hundred thousand chunks. `ann="hnsw"` answers from a
faiss HNSW graph instead (approximate; optional dependency). A retriever restricted to a
subset always searches that subset exactly: collections are small, and a filtered
graph walk would be both slower and less accurate there.

On disk (`dense/`): `vectors.npy` (float32, one row per chunk, in chunk order),
`dense.json` (embedder name, dim, model hash, ANN parameters), `hnsw.faiss` when built.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from marag.corpus.models import Chunk
from marag.errors import IndexFormatError, MaragError
from marag.index.base import Hit
from marag.index.embed import Embedder, embedder_info, get_embedder
from marag.index.traced import BaseRetriever, index_text, top_positions

if TYPE_CHECKING:
    from marag.index.config import IndexConfig

VECTORS_FILE = "vectors.npy"
META_FILE = "dense.json"
HNSW_FILE = "hnsw.faiss"
_REBUILD = "rebuild the index with `marag index ... --overwrite`"


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


class DenseRetriever(BaseRetriever):
    """Inner-product search over `vectors` (row i = chunk i).

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
        ef_search: int = 64,
        expected_model_sha256: str | None = None,
        name: str | None = None,
        query_block: int = 64,
    ):
        super().__init__(chunks, name)
        if vectors.ndim != 2 or vectors.shape[0] != len(chunks):
            raise IndexFormatError(
                f"dense vectors have shape {vectors.shape} but there are {len(chunks)} chunks", hint=_REBUILD
            )
        if ann not in ("exact", "hnsw"):
            raise ValueError(f"ann must be 'exact' or 'hnsw', got {ann!r}")
        if ann == "hnsw" and hnsw is None:
            hnsw = build_hnsw(vectors)
        self.vectors = vectors
        self.ann = ann
        self.hnsw = hnsw
        self.ef_search = ef_search
        self.query_block = query_block
        self._expected_sha = expected_model_sha256
        # Shared by restricted copies (copy.copy keeps the reference), so many
        # collection retrievers load one embedding model, not one each.
        self._slot = _EmbedderSlot(embedder)
        if self._slot.embedder is not None:
            self._check_embedder(self._slot.embedder)
        self._rows: np.ndarray | None = None
        self._sub: np.ndarray | None = None
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
        ef_search: int = 64,
        progress: bool = False,
    ) -> "DenseRetriever":
        if not chunks:
            raise ValueError("cannot build a dense index over zero chunks")
        vectors = np.ascontiguousarray(
            embedder.embed([index_text(c) for c in chunks], progress=progress), dtype=np.float32
        )
        hnsw = build_hnsw(vectors, hnsw_m, ef_construction) if ann == "hnsw" else None
        r = cls(
            chunks,
            vectors,
            embedder,
            ann=ann,
            hnsw=hnsw,
            ef_search=ef_search,
            expected_model_sha256=getattr(embedder, "model_sha256", None),
        )
        r._hnsw_params = {"m": hnsw_m, "ef_construction": ef_construction}
        return r

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / VECTORS_FILE, np.asarray(self.vectors, dtype=np.float32))
        meta: dict[str, Any] = {
            "embedder": embedder_info(self.embedder),
            "dim": self.dim,
            "count": int(self.vectors.shape[0]),
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
            name, options = emb_meta.get("name"), dict(embedder_options or {})
            embedder = lambda: get_embedder(name, **options)  # noqa: E731 - loaded on first query
        try:
            vectors = np.load(directory / VECTORS_FILE, mmap_mode="r" if mmap else None)
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
            ef_search=ef_search or meta.get("ef_search", 64),
            expected_model_sha256=emb_meta.get("model_sha256"),
        )

    # -- the index-directory protocol (see marag.index.hybrid.RETRIEVERS) ----------------
    @classmethod
    def build(
        cls, chunks: Sequence[Chunk], directory: Path, config: "IndexConfig", progress: bool = True
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

    def _matrix(self) -> tuple[np.ndarray, np.ndarray | None]:
        if self._rows is None:
            return self.vectors, None
        with self._sub_lock:
            if self._sub is None:
                self._sub = np.ascontiguousarray(self.vectors[self._rows])
        return self._sub, self._rows

    def embed_queries(self, queries: list[str]) -> np.ndarray:
        return np.asarray(self.embedder.embed(queries), dtype=np.float32)

    def _search_batch(self, queries: list[str], k: int, offset: int) -> list[list[Hit]]:
        q = self.embed_queries(queries)
        want = offset + k
        if self.hnsw is not None and self._rows is None:
            return self._search_hnsw(q, want, offset)
        matrix, rows = self._matrix()
        results: list[list[Hit]] = []
        for start in range(0, len(q), self.query_block):
            scores = q[start : start + self.query_block] @ matrix.T  # (block, n_chunks)
            for row in scores:
                ranked = top_positions(row, want)[offset:]
                positions = ranked if rows is None else rows[ranked]
                results.append([self._hit(int(p), row[r]) for p, r in zip(positions, ranked)])
        return results

    def _search_hnsw(self, q: np.ndarray, want: int, offset: int) -> list[list[Hit]]:
        faiss = import_faiss()
        n = min(want, len(self.chunks))
        params = faiss.SearchParametersHNSW(efSearch=max(self.ef_search, n))
        dist, ids = self.hnsw.search(q, n, params=params)
        results = []
        for d, i in zip(dist, ids):
            keep = i >= 0
            d, i = d[keep], i[keep]
            order = np.lexsort((i, -d))  # deterministic order among equal scores
            results.append(
                [self._hit(int(p), float(s)) for p, s in zip(i[order][offset:], d[order][offset:])]
            )
        return results
