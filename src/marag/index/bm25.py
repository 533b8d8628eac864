"""Sparse retrieval: BM25 (Lucene variant) on bm25s with its numba backend.

Text is lower-cased, split into runs of two or more word characters, stripped of the
English stop words Lucene uses, and Snowball-stemmed (PyStemmer). The same function
tokenises documents and queries, and is what the exact reference in the tests uses.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from marag.corpus.models import Chunk
from marag.errors import IndexFormatError
from marag.index.base import Hit
from marag.index.traced import BaseRetriever, index_text, top_positions

if TYPE_CHECKING:
    import bm25s

    from marag.index.config import IndexConfig

_TOKEN = re.compile(r"(?u)\b\w\w+\b")
# Written next to the bm25s files; a saved index whose tokenizer differs from this
# code's would silently mismatch query and document terms, so loading checks it.
TOKENIZER_SPEC = {
    "pattern": _TOKEN.pattern,
    "lowercase": True,
    "stopwords": "lucene-en",
    "stemmer": "english",
}
TOKENIZER_FILE = "marag_tokenizer.json"


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


class _Analyzer:
    """Tokeniser shared by indexing and querying. PyStemmer objects are not thread-safe,
    so stemming holds a lock (it is a small part of the cost)."""

    def __init__(self) -> None:
        import Stemmer

        self._stemmer = Stemmer.Stemmer("english")
        self._stop = _stopwords()
        self._lock = threading.Lock()

    def __call__(self, texts: Sequence[str]) -> list[list[str]]:
        out = []
        for text in texts:
            words = [w for w in _TOKEN.findall(text.lower()) if w not in self._stop]
            with self._lock:
                out.append(self._stemmer.stemWords(words))
        return out


_analyzer: _Analyzer | None = None
_analyzer_lock = threading.Lock()


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """Tokens of each text, exactly as the BM25 index sees them."""
    global _analyzer
    if _analyzer is None:
        with _analyzer_lock:
            if _analyzer is None:
                _analyzer = _Analyzer()
    return _analyzer(texts)


class BM25Retriever(BaseRetriever):
    """BM25 over `chunks` (title + text). Build with `from_chunks`, persist with
    `save`/`load_dir`. `n_threads > 1` scores a batch of queries in parallel (numba)."""

    kind = "bm25"

    def __init__(
        self, chunks: Sequence[Chunk], model: "bm25s.BM25", n_threads: int = 1, name: str | None = None
    ):
        super().__init__(chunks, name)
        if model.scores["num_docs"] != len(chunks):
            raise IndexFormatError(
                f"the BM25 index holds {model.scores['num_docs']} documents but {len(chunks)} chunks were given",
                hint="the index directory is inconsistent; rebuild it with `marag index ... --overwrite`",
            )
        self.model = model
        self.n_threads = n_threads
        self._weights: np.ndarray | None = None

    @property
    def k1(self) -> float:
        return float(self.model.k1)

    @property
    def b(self) -> float:
        return float(self.model.b)

    # -- building and persistence ---------------------------------------------------------
    @classmethod
    def from_chunks(
        cls,
        chunks: Sequence[Chunk],
        k1: float = 1.5,
        b: float = 0.75,
        progress: bool = False,
        n_threads: int = 1,
    ) -> "BM25Retriever":
        import bm25s

        if not chunks:
            raise ValueError("cannot build a BM25 index over zero chunks")
        from tqdm.auto import tqdm

        tokens: list[list[str]] = []
        step = 10_000
        with tqdm(total=len(chunks), desc="bm25", unit="chunk", disable=not progress, leave=False) as bar:
            for start in range(0, len(chunks), step):
                tokens += tokenize([index_text(c) for c in chunks[start : start + step]])
                bar.update(min(step, len(chunks) - start))
        model = bm25s.BM25(k1=k1, b=b, method="lucene", backend="numba")
        # bm25s's own four progress bars would only repeat ours
        model.index(tokens, show_progress=False)
        return cls(chunks, model, n_threads=n_threads)

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save(directory, show_progress=False)
        (directory / TOKENIZER_FILE).write_text(json.dumps(TOKENIZER_SPEC, indent=2), encoding="utf-8")
        return directory

    @classmethod
    def load_dir(
        cls, directory: str | Path, chunks: Sequence[Chunk], mmap: bool = False, n_threads: int = 1
    ) -> "BM25Retriever":
        import bm25s

        directory = Path(directory)
        spec_file = directory / TOKENIZER_FILE
        try:
            spec = json.loads(spec_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise IndexFormatError(
                f"BM25 index at {directory} is incomplete ({spec_file.name}: {exc})",
                hint="rebuild the index with `marag index ... --overwrite`",
            ) from None
        if spec != TOKENIZER_SPEC:
            raise IndexFormatError(
                f"BM25 index at {directory} was built with another tokenizer ({spec})",
                hint="rebuild the index with `marag index ... --overwrite`",
            )
        try:
            model = bm25s.BM25.load(directory, mmap=mmap, backend="numba", show_progress=False)
        except (OSError, ValueError, KeyError) as exc:
            raise IndexFormatError(
                f"cannot read the BM25 index at {directory}: {exc}",
                hint="rebuild the index with `marag index ... --overwrite`",
            ) from None
        return cls(chunks, model, n_threads=n_threads)

    # -- the index-directory protocol (see marag.index.hybrid.RETRIEVERS) ----------------
    @classmethod
    def build(
        cls, chunks: Sequence[Chunk], directory: Path, config: "IndexConfig", progress: bool = True
    ) -> dict[str, Any]:
        import bm25s

        retriever = cls.from_chunks(chunks, k1=config.bm25_k1, b=config.bm25_b, progress=progress)
        retriever.save(directory)
        return {
            "k1": retriever.k1,
            "b": retriever.b,
            "method": "lucene",
            "vocabulary": len(retriever.model.vocab_dict),
            "tokenizer": TOKENIZER_SPEC,
            "bm25s": bm25s.__version__,
        }

    @classmethod
    def load(cls, index: Any) -> "BM25Retriever":
        return cls.load_dir(Path(index.path) / cls.kind, index.chunks)

    # -- search ---------------------------------------------------------------------------
    def _search_batch(self, queries: list[str], k: int, offset: int) -> list[list[Hit]]:
        num_docs = self.model.scores["num_docs"]
        want = offset + k
        # One extra hit tells whether a run of equal scores crosses the page boundary;
        # only then does the order among ties decide *which* chunks are returned.
        fetch = min(num_docs, want + 1)
        token_ids = [self.model.get_tokens_ids(toks) for toks in tokenize(queries)]
        results: list[list[Hit]] = [[] for _ in queries]
        active = [i for i, ids in enumerate(token_ids) if ids]  # no known term: no hits
        if not active:
            return results
        docs, scores = self._topk([token_ids[i] for i in active], fetch)
        for row, i in enumerate(active):
            d, s = docs[row], scores[row]
            if fetch > want and s[want - 1] > 0 and s[want - 1] == s[want]:
                # Rare: rank every chunk, then take ties by position.
                all_d, all_s = self._topk([token_ids[i]], num_docs)
                full = np.full(num_docs, -np.inf, dtype=np.float64)
                full[all_d[0]] = all_s[0]
                full[full <= 0] = -np.inf
                d = top_positions(full, want)
                s = full[d]
            else:
                keep = s > 0  # chunks sharing no term with the query are not hits
                d, s = d[keep], s[keep]
                order = np.lexsort((d, -s))
                d, s = d[order], s[order]
            results[i] = [self._hit(int(p), float(v)) for p, v in zip(d[offset:want], s[offset:want])]
        return results

    def _mask_weights(self) -> np.ndarray:
        # Always a mask (all ones when unrestricted): numba compiles one specialisation
        # per argument type, and None vs array would mean two multi-second compiles.
        if self._weights is None or self._weights.shape[0] != self.model.scores["num_docs"]:
            allowed = (
                self._allowed if self._allowed is not None else np.ones(self.model.scores["num_docs"], bool)
            )
            self._weights = allowed.astype(self.model.dtype)
        return self._weights

    def _restricted(self) -> None:
        self._weights = None

    def _topk(self, token_ids: list[list[int]], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(positions, scores) of the k best chunks per query, best first (ties arbitrary)."""
        weights = self._mask_weights()
        kernel = _cached_kernel() if self.n_threads <= 1 else None
        if kernel is None:
            docs, scores = self.model.retrieve(
                token_ids,
                k=k,
                sorted=True,
                show_progress=False,
                n_threads=self.n_threads,
                weight_mask=weights,
            )
            return np.asarray(docs), np.asarray(scores)
        m = self.model
        int_dtype = np.dtype(m.int_dtype)
        pointers = np.cumsum([0] + [len(q) for q in token_ids]).astype(int_dtype)
        flat = np.concatenate([np.asarray(q, dtype=int_dtype) for q in token_ids])
        scores, docs = kernel(
            flat,
            pointers,
            k,
            True,
            np.dtype(m.dtype),
            int_dtype,
            m.scores["data"],
            m.scores["indptr"],
            m.scores["indices"],
            m.scores["num_docs"],
            None,
            weights,
        )
        return docs, scores


_kernel: Any = None
_kernel_lock = threading.Lock()


def _cached_kernel() -> Any:
    """bm25s's numba retrieval kernel, compiled with an on-disk cache.

    bm25s compiles its kernel anew in every process (5-7 s on first query, paid by every
    `marag ask`); the same function compiled with `cache=True` loads in well under a
    second after the first run. Returns None (use `BM25.retrieve`) when this bm25s
    version does not expose the kernel."""
    global _kernel
    if _kernel is None:
        with _kernel_lock:
            if _kernel is None:
                try:
                    from bm25s.numba.retrieve_utils import _retrieve_internal_jitted
                    from numba import njit

                    _kernel = njit(cache=True, nogil=True)(_retrieve_internal_jitted)
                except Exception:  # noqa: BLE001 - any failure: use the public API
                    _kernel = False
    return _kernel or None
