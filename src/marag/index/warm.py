"""The retrievers' compiled kernels, compiled before they are needed.

numba compiles `marag.index._kernels` on first use and caches the result beside the
source; on a fresh install that first use took over a minute on 2 busy cores, and it
fell on the first question: `marag serve`'s first 17 asks waited past a client's 60 s
(the 30-minute soak on a fresh clone, benchmarks/soak.py). `make setup` runs this module
once, and `marag serve` calls `warm_kernels` before it listens: from the disk cache that
takes about a second.

    python -m marag.index.warm
"""

from __future__ import annotations

import tempfile

WORDS = ("retrieval kernels compile once", "a tiny corpus of three documents", "each searched by every retriever")


def warm_kernels() -> list[str]:
    """Build a three-document index with every retriever the machine can build (dense
    needs the embedder's file: without it, BM25 alone) and search each; returns the
    retrievers warmed."""
    from marag.corpus.models import Document
    from marag.errors import MaragError
    from marag.index.pipeline import index_documents
    from marag.index.store import IndexConfig

    docs = [Document(id=f"d{i}", title=f"Doc {i}", text=f"{text}. " * 20) for i, text in enumerate(WORDS)]
    warmed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="marag-warm-") as tmp:

        def search_each(name: str, cfg: IndexConfig) -> None:
            index = index_documents(docs, f"{tmp}/{name}", cfg, progress=False)
            for kind in [*cfg.retrievers, "hybrid"] if len(cfg.retrievers) > 1 else cfg.retrievers:
                retriever = index.retriever(kind)
                retriever.search("which documents compile", k=2)
                retriever.search_batch(["tiny corpus", "every retriever"], k=2, offset=1)
                warmed.append(f"{kind} ({name})" if kind == "dense" else kind)

        try:  # exact dense search (and hybrid over it) as small indexes run; HNSW as large ones do
            search_each("exact", IndexConfig())
            search_each("hnsw", IndexConfig(ann="hnsw"))
        except MaragError:  # no embedder file: BM25 alone
            if not warmed:
                search_each("bm25", IndexConfig(retrievers=["bm25"]))
    return list(dict.fromkeys(warmed))


if __name__ == "__main__":
    print("retrieval kernels ready:", ", ".join(warm_kernels()) or "none")
