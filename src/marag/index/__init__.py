"""Retrieval: BM25, dense and hybrid retrievers over an on-disk index directory or a
Milvus collection.

The port is `Retriever` (marag.index.base); everything above the index layer receives
one as an argument. `build_index` builds an index directory; `open_index` opens any
index target, a directory or an index URI (`marag.index.uri`), as an `Index` (the
protocol both stores satisfy: `DirectoryIndex`, `marag.index.milvus.MilvusIndex`).
"""

from marag.index.base import Hit, Index, Retriever
# importing the built-in retrievers registers their kinds in RETRIEVERS (marag.index.kinds);
# every import of an index module runs this file first
from marag.index.bm25 import BM25Retriever
from marag.index.config import IndexConfig
from marag.index.dense import DenseRetriever
from marag.index.embed import EMBEDDERS, Embedder, get_embedder
from marag.index.hybrid import HybridRetriever
from marag.index.kinds import RETRIEVERS
from marag.index.store import DirectoryIndex, build_index, corpus_hash
from marag.index.uri import open_index
from marag.index.retriever import BaseRetriever

__all__ = [
    "BM25Retriever",
    "BaseRetriever",
    "DenseRetriever",
    "DirectoryIndex",
    "EMBEDDERS",
    "Embedder",
    "Hit",
    "HybridRetriever",
    "Index",
    "IndexConfig",
    "RETRIEVERS",
    "Retriever",
    "build_index",
    "corpus_hash",
    "get_embedder",
    "open_index",
]
