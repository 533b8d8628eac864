"""Re-ranking a retriever's candidates with a second, more careful signal.

Used where a strategy retrieves with one signal (e.g. BM25) and wants the top of that
list ordered by another (UniRAG's reranking of the BM25 candidates, RopMura's agents,
GINGER's pointwise step). Rerankers are registered by name (`RERANKERS`; plug-ins:
entry-point group `marag.rerankers`), and `get_reranker(name, **options)` builds one:

- `embedding`: cosine similarity of MiniLM vectors of the query and of each candidate
  (embedded at query time: MiniLM reads 256 tokens of each, so keep the candidate list
  to tens, not hundreds). Options: `embedder` (a name or an `Embedder`), `threads`.
- `cross_encoder`: an ONNX cross-encoder reading the query and the candidate together
  (`marag.index.cross_encoder`). None ships with marag; the user installs one
  (`$MARAG_CROSS_ENCODER`) or passes `model=` and `tokenizer=` paths. Options: `model`,
  `tokenizer`, `threads`, `max_length`. `cross_encoder_available()` says whether one is
  installed, so a strategy can use it when present and fall back (saying so) when not.

Every reranker has `name`, `score(query, texts) -> np.ndarray` (higher is more relevant)
and `rerank(query, hits, k=None) -> list[Hit]` (best first, ties in their original
order, each hit carrying its new score).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from marag.errors import MaragError
from marag.index.base import Hit
from marag.index.cross_encoder import (
    SUPPLY_HINT,
    OnnxCrossEncoder,
    installed_cross_encoder,
)
from marag.index.embed import Embedder, get_embedder, similarity_to
from marag.registry import Registry


@runtime_checkable
class Reranker(Protocol):
    name: str

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray: ...

    def rerank(self, query: str, hits: Sequence[Hit], k: int | None = None) -> list[Hit]: ...


RERANKERS: Registry[Callable[..., Reranker]] = Registry("rerankers")


def _text(h: Hit) -> str:
    return f"{h.title}\n{h.text}" if h.title else h.text


@RERANKERS.register("embedding")
class EmbeddingReranker:
    name = "embedding"

    def __init__(self, embedder: Embedder | str = "minilm", threads: int = 1):
        self._spec, self._threads = embedder, threads
        self._embedder: Embedder | None = None if isinstance(embedder, str) else embedder

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:  # loaded on first use: strategies that never rerank pay nothing
            self._embedder = get_embedder(str(self._spec), threads=self._threads)
        return self._embedder

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        return similarity_to(self.embedder, query, self.embedder.embed(list(texts)))

    def rerank(self, query: str, hits: Sequence[Hit], k: int | None = None) -> list[Hit]:
        """`hits` ordered by cosine similarity to `query` (ties keep their original
        order), the top `k`, each carrying its similarity as its score."""
        if not hits:
            return []
        sims = self.score(query, [_text(h) for h in hits])
        order = sorted(range(len(hits)), key=lambda i: (-float(sims[i]), i))
        return [hits[i].model_copy(update={"score": float(sims[i])}) for i in order[: k or len(hits)]]


_cross_encoders: dict[tuple, OnnxCrossEncoder] = {}
_cross_lock = threading.Lock()


@RERANKERS.register("cross_encoder")
def cross_encoder(model: str | None = None, tokenizer: str | None = None, threads: int = 1, max_length: int = 384) -> OnnxCrossEncoder:
    """The given ONNX cross-encoder, else the installed one; one session per model per
    process (onnxruntime sessions run concurrent calls safely)."""
    if model is None or tokenizer is None:
        spec = installed_cross_encoder()
        if spec is None:
            raise MaragError("no cross-encoder is installed (none ships with marag)", hint=SUPPLY_HINT)
        model, tokenizer = model or spec["model"], tokenizer or spec["tokenizer"]
    key = (str(model), str(tokenizer), threads, max_length)
    with _cross_lock:
        if key not in _cross_encoders:
            _cross_encoders[key] = OnnxCrossEncoder(model, tokenizer, max_length=max_length, threads=threads)
        return _cross_encoders[key]


def cross_encoder_available() -> bool:
    """Whether `get_reranker("cross_encoder")` finds an installed model with no options."""
    return installed_cross_encoder() is not None


def get_reranker(name: str, **options: Any) -> Reranker:
    """The reranker registered as `name`, built with `options` (module docstring);
    an unknown name is an error listing the known ones."""
    return RERANKERS.get(name)(**options)
