"""Sparse retrieval: BM25 (Lucene variant), indexed by bm25s, searched by marag's kernel.

Text is lower-cased, split into runs of two or more word characters, stripped of the
English stop words Lucene uses, and Snowball-stemmed (PyStemmer). The same function
tokenises documents and queries, and is what the exact reference in the tests uses.

bm25s builds and stores the index (its precomputed per-term scores). Search runs in
`marag.index._kernels.bm25_topk` over those same arrays: dynamic pruning skips most
postings of common terms, ties are broken by position inside the top-k selection, and
the scores returned are bm25s's own, bit for bit.
"""

from __future__ import annotations

import json
import re
import threading
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from marag.corpus.models import Chunk
from marag.errors import IndexFormatError
from marag.index.kinds import RETRIEVERS
from marag.index.retriever import BaseRetriever
from marag.index.traced import Ranked, index_text, kernels

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
    so stemming holds a lock."""

    def __init__(self) -> None:
        import Stemmer

        self._stemmer = Stemmer.Stemmer("english")
        self._stop = _stopwords()
        self._lock = threading.Lock()

    def __call__(self, texts: Sequence[str]) -> list[list[str]]:
        stems, lengths = self.flat(texts)
        ends = list(accumulate(lengths))
        return [stems[end - n : end] for end, n in zip(ends, lengths)]

    def flat(self, texts: Sequence[str]) -> tuple[list[str], list[int]]:
        """Every text's tokens in one list, and how many each text has: the stemmer is
        called (and its lock taken) once per batch rather than once per text."""
        stop = self._stop
        words = [[w for w in _TOKEN.findall(text.lower()) if w not in stop] for text in texts]
        return self.flat_words([w for ws in words for w in ws]), [len(ws) for ws in words]

    def flat_words(self, words: list[str]) -> list[str]:
        """Stems of words already split, lower-cased and stripped of stop words."""
        with self._lock:
            return self._stemmer.stemWords(words)


_analyzer: _Analyzer | None = None
_analyzer_lock = threading.Lock()


def analyzer() -> _Analyzer:
    global _analyzer
    if _analyzer is None:
        with _analyzer_lock:
            if _analyzer is None:
                _analyzer = _Analyzer()
    return _analyzer


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """Tokens of each text, exactly as the BM25 index sees them."""
    return analyzer()(texts)


@RETRIEVERS.register("bm25")
class BM25Retriever(BaseRetriever):
    """BM25 over `chunks` (title + text). Build with `from_chunks`, persist with
    `save`/`load_dir`. `n_threads > 1` splits a batch of queries across threads."""

    kind = "bm25"
    #: Queries whose terms have fewer postings than this in all skip dynamic pruning: its
    #: bookkeeping costs more than reading a few thousand postings.
    prune_from: int = 4096
    #: Distinct query words whose term ids are remembered (see `_query_terms`).
    word_cache_size: int = 200_000

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
        self._allowed_arr: np.ndarray | None = None
        self._term_max_arr: np.ndarray | None = None  # shared by restricted copies once made
        self._word_ids: dict[str, int] = {}  # query word -> term id, -1 for none (shared by copies)

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

    # -- the index-directory protocol (see marag.index.kinds) -------------------------------
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
    def _rank(self, queries: list[str], want: int) -> Ranked:
        return self.rank_counted(queries, want)[0]

    def _kernel(self, queries: list[str], want: int):
        """(run, slices): run((a, b)) ranks queries a..b-1 as (positions, scores, counts,
        work) arrays; slices cover the batch, one per thread."""
        _kernels = kernels()
        flat, pointers = self._query_terms(queries)
        want = max(1, min(want, self._num_docs))
        scores = self.model.scores
        args = (
            want,
            scores["data"],
            scores["indptr"],
            scores["indices"],
            self._num_docs,
            self._mask(),
            self._term_max(),
            self.prune_from,
        )

        def run(bounds: tuple[int, int]):
            a, b = bounds
            return _kernels.bm25_topk(flat, pointers[a : b + 1], *args)

        return run, self._split(len(queries))

    def rank_counted(self, queries: list[str], want: int) -> tuple[Ranked, np.ndarray]:
        """`_rank`, plus per query (postings read, postings its terms have): how much
        dynamic pruning saved (see marag.index._kernels)."""
        run, parts = self._kernel(queries, want)
        if len(parts) == 1:
            *ranked, work = run(parts[0])
            return Ranked(*ranked), work
        # The kernel releases the GIL, so slices of one batch run on several cores.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(parts)) as pool:
            *ranked, work = (np.concatenate(arrays) for arrays in zip(*pool.map(run, parts)))
        return Ranked(*ranked), work

    def _term_max(self) -> np.ndarray:
        """Each term's best score in any chunk: the bounds that dynamic pruning needs."""
        if self._term_max_arr is None:
            from marag.index import _kernels

            scores = self.model.scores
            if scores["data"].size and scores["data"].min() <= 0:
                # The kernel tells a chunk's first term by a zero running sum.
                raise IndexFormatError(
                    "the BM25 index holds scores <= 0, which Lucene BM25 never produces",
                    hint="rebuild the index with `marag index ... --overwrite`",
                )
            self._term_max_arr = _kernels.term_maxima(scores["data"], scores["indptr"])
        return self._term_max_arr

    def _query_terms(self, queries: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Term ids of all queries in one array, query i's at flat[pointers[i]:pointers[i+1]].
        Repeated terms count once per occurrence, as in bm25s; unknown terms score
        nothing, and a query without a known term has no hits.

        A word's term id depends on nothing but the word (stop word, stem, this index's
        vocabulary), so each distinct word is analysed once and remembered: agents and
        evaluations ask many queries in a few hundred words, and analysing them again
        cost more than the search itself on small corpora."""
        words = [_TOKEN.findall(q.lower()) for q in queries]
        cache = self._word_ids
        missing = {w for ws in words for w in ws if w not in cache}
        if missing:
            if len(cache) + len(missing) > self.word_cache_size:
                # Bounded memory: start over (rare; the words asked about again return).
                self._word_ids = cache = {}
                missing = {w for ws in words for w in ws}
            ordered = sorted(missing)
            stop = analyzer()._stop
            kept = [w for w in ordered if w not in stop]
            stems = analyzer().flat_words(kept)
            vocab = self.model.vocab_dict
            cache.update(dict.fromkeys(ordered, -1))
            cache.update({w: vocab.get(stem, -1) for w, stem in zip(kept, stems)})
        ids = np.fromiter((cache[w] for ws in words for w in ws), dtype=np.int64, count=sum(map(len, words)))
        known = ids >= 0
        per_query = np.bincount(np.repeat(np.arange(len(queries)), [len(ws) for ws in words])[known], minlength=len(queries))
        pointers = np.zeros(len(queries) + 1, dtype=np.int64)
        np.cumsum(per_query, out=pointers[1:])
        return ids[known], pointers

    def _split(self, n: int) -> list[tuple[int, int]]:
        parts = max(1, min(self.n_threads, n // 64))  # small batches are not worth a thread
        edges = np.linspace(0, n, parts + 1).astype(int)
        return list(zip(edges[:-1], edges[1:]))

    @property
    def _num_docs(self) -> int:
        return int(self.model.scores["num_docs"])

    def _mask(self) -> np.ndarray:
        # Always an array (all True when unrestricted): numba compiles one specialisation
        # per argument type, and None vs array would mean two compiles.
        if self._allowed_arr is None:
            self._allowed_arr = (
                self._allowed if self._allowed is not None else np.ones(self._num_docs, dtype=bool)
            )
        return self._allowed_arr

    def _restricted(self) -> None:
        self._allowed_arr = None
