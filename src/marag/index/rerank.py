"""Re-ranking a retriever's candidates by embedding similarity to the query.

Used where a strategy retrieves with one signal (e.g. BM25) and wants the top of that
list ordered by another (UniRAG's "dense reranking of the BM25 candidates"). The
candidates' texts are embedded at query time (MiniLM reads 256 tokens of each), so a
deep candidate list costs time: keep `depth` small (tens, not hundreds).
"""

from __future__ import annotations

from collections.abc import Sequence


from marag.index.base import Hit
from marag.index.embed import Embedder, get_embedder, similarity_to


class EmbeddingReranker:
    def __init__(self, embedder: Embedder | str = "minilm", threads: int = 1):
        self._spec, self._threads = embedder, threads
        self._embedder: Embedder | None = None if isinstance(embedder, str) else embedder

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:  # loaded on first use: strategies that never rerank pay nothing
            self._embedder = get_embedder(str(self._spec), threads=self._threads)
        return self._embedder

    def rerank(self, query: str, hits: Sequence[Hit], k: int | None = None) -> list[Hit]:
        """`hits` ordered by cosine similarity to `query` (ties keep their original
        order), the top `k`, each carrying its similarity as its score."""
        if not hits:
            return []
        texts = [f"{h.title}\n{h.text}" if h.title else h.text for h in hits]
        sims = similarity_to(self.embedder, query, self.embedder.embed(texts))
        order = sorted(range(len(hits)), key=lambda i: (-float(sims[i]), i))
        return [hits[i].model_copy(update={"score": float(sims[i])}) for i in order[: k or len(hits)]]
