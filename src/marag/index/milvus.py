"""A scale-out retrieval backend on Milvus: BM25 full-text search, dense vectors and
their reciprocal-rank fusion in one collection per knowledge base.

The same client code runs embedded (a Milvus Lite file: `uri="kb.db"`), against a
`milvus-lite server` on 127.0.0.1, or against a Milvus cluster
(`uri="http://host:19530"`, `token="user:password"`): Milvus computes the BM25 sparse
vectors itself from the text (its "standard" analyzer; "english" on a server), marag computes the dense vectors
with the same embedder as its own index (MiniLM by default) and sends them.

    kb = MilvusKnowledgeBase("http://127.0.0.1:19530", "sample")
    kb.build(chunks)                      # drops and recreates the collection
    retriever = kb.retriever("hybrid")    # or "bm25", "dense"; a Retriever like any other
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np

from marag.corpus.models import Chunk
from marag.errors import MaragError
from marag.index.base import Hit
from marag.index.embed import get_embedder
from marag.trace import SearchCall, record_search

Kind = Literal["bm25", "dense", "hybrid"]
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
_FIELDS = ["chunk_id", "doc_id", "title", "text"]


def _client(uri: str, token: str | None):
    try:
        from pymilvus import MilvusClient
    except ImportError:
        raise MaragError("the Milvus backend needs pymilvus", hint="pip install 'marag[milvus]' (pymilvus, milvus-lite)") from None
    try:
        return MilvusClient(uri=uri, token=token or "")
    except Exception as exc:  # connection errors come in many types
        raise MaragError(f"cannot reach Milvus at {uri}: {exc}", hint="start it (e.g. `milvus-lite server --data-dir DIR --host 127.0.0.1`) or fix the URI") from None


class MilvusKnowledgeBase:
    def __init__(
        self, uri: str, collection: str, token: str | None = None, embedder: str = "minilm", rrf_k: int = 60, depth: int = 100,
        analyzer: str = "standard",
    ):  # fmt: skip
        if not _NAME.fullmatch(collection):
            raise MaragError(f"not a valid Milvus collection name: {collection!r}", hint="letters, digits and _, starting with a letter")
        # Milvus Lite knows the "standard" analyzer (lower-cased words); a Milvus server
        # also "english" (with stemming, closer to marag's own BM25)
        self.uri, self.collection, self.rrf_k, self.depth, self.analyzer = uri, collection, rrf_k, depth, analyzer
        self.client = _client(uri, token)
        self._embedder_name = embedder
        self._embedder = None

    @property
    def embedder(self):
        if self._embedder is None:
            self._embedder = get_embedder(self._embedder_name)
        return self._embedder

    def build(self, chunks: Sequence[Chunk], batch: int = 256) -> int:
        """(Re)create the collection from `chunks`; returns how many were inserted."""
        from pymilvus import DataType, Function, FunctionType

        if not chunks:
            raise MaragError("no chunks to index", hint="check the corpus")
        c = self.client
        if c.has_collection(self.collection):
            c.drop_collection(self.collection)
        schema = c.create_schema(auto_id=False)
        schema.add_field("chunk_id", DataType.VARCHAR, is_primary=True, max_length=512)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=512)
        schema.add_field("title", DataType.VARCHAR, max_length=2048)
        schema.add_field("text", DataType.VARCHAR, max_length=65535, enable_analyzer=True, analyzer_params={"type": self.analyzer})
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=self.embedder.dim)
        schema.add_function(Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["text"], output_field_names=["sparse"]))
        index = c.prepare_index_params()
        index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        index.add_index(field_name="dense", index_type="FLAT", metric_type="IP")
        c.create_collection(self.collection, schema=schema, index_params=index)
        for start in range(0, len(chunks), batch):
            part = chunks[start : start + batch]
            vectors = np.asarray(self.embedder.embed([f"{ch.title}\n{ch.text}" if ch.title else ch.text for ch in part]), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-12)
            rows = [
                {"chunk_id": ch.id, "doc_id": ch.doc_id, "title": ch.title[:2000], "text": ch.text[:60000], "dense": v.tolist()}
                for ch, v in zip(part, vectors)
            ]
            c.insert(self.collection, rows)
        c.flush(self.collection)
        c.load_collection(self.collection)
        return len(chunks)

    def retriever(self, kind: Kind = "hybrid") -> "MilvusRetriever":
        if kind not in ("bm25", "dense", "hybrid"):
            raise MaragError(f"unknown Milvus retriever {kind!r}", hint="choose bm25, dense or hybrid")
        self.client.load_collection(self.collection)
        return MilvusRetriever(self, kind)


class MilvusRetriever:
    """`search(query, k, offset)` over a Milvus collection (the `Retriever` protocol);
    every search is recorded in the current trace like marag's own retrievers'."""

    def __init__(self, kb: MilvusKnowledgeBase, kind: Kind):
        self.kb, self.kind = kb, kind
        self.name = f"milvus-{kind}"

    def search(self, query: str, k: int = 10, offset: int = 0) -> list[Hit]:
        return self.search_batch([query], k, offset)[0]

    def search_batch(self, queries: Iterable[str], k: int = 10, offset: int = 0) -> list[list[Hit]]:
        queries = list(queries)
        if k < 1 or offset < 0:
            raise ValueError(f"k must be >= 1 and offset >= 0, got k={k}, offset={offset}")
        t0, wall = time.perf_counter(), time.time()
        kb, want = self.kb, k + offset
        if self.kind == "bm25":
            raw = kb.client.search(kb.collection, data=queries, anns_field="sparse", limit=want, output_fields=_FIELDS,
                                   search_params={"metric_type": "BM25"})  # fmt: skip
        else:
            vectors = np.asarray(kb.embedder.embed(queries), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-12)
            if self.kind == "dense":
                raw = kb.client.search(kb.collection, data=vectors.tolist(), anns_field="dense", limit=want, output_fields=_FIELDS,
                                       search_params={"metric_type": "IP"})  # fmt: skip
            else:
                raw = [self._hybrid(q, v, want) for q, v in zip(queries, vectors)]
        results = [[_hit(r) for r in rows][offset:want] for rows in raw]
        latency = (time.perf_counter() - t0) / max(1, len(queries))
        for q, hits in zip(queries, results):
            record_search(SearchCall(retriever=self.name, query=q, k=k, offset=offset, latency_s=round(latency, 6), started=round(wall, 4),
                                     hits=[{"doc_id": h.doc_id, "chunk_id": h.chunk_id, "score": h.score} for h in hits]))  # fmt: skip
        return results

    def _hybrid(self, query: str, vector: np.ndarray, want: int) -> list[Any]:
        from pymilvus import AnnSearchRequest, RRFRanker

        kb = self.kb
        depth = max(want, kb.depth)
        reqs = [
            AnnSearchRequest(data=[query], anns_field="sparse", param={"metric_type": "BM25"}, limit=depth),
            AnnSearchRequest(data=[vector.tolist()], anns_field="dense", param={"metric_type": "IP"}, limit=depth),
        ]
        return kb.client.hybrid_search(kb.collection, reqs, RRFRanker(kb.rrf_k), limit=want, output_fields=_FIELDS)[0]


def _hit(row: Any) -> Hit:
    entity = row.get("entity", row)
    return Hit(doc_id=entity["doc_id"], chunk_id=entity["chunk_id"], score=float(row.get("distance", 0.0)), text=entity["text"], title=entity.get("title", ""))
