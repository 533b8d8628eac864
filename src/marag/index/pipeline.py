"""Documents on disk -> chunks -> an index, in one call (what `marag index` runs). The
index goes wherever its target says: a directory or an index URI (`marag.index.uri`)."""

from __future__ import annotations

from pathlib import Path

from marag.corpus import chunk_documents, load_corpus
from marag.corpus.models import Document
from marag.errors import CorpusError
from marag.index.store import IndexConfig, corpus_hash
from marag.index.uri import SKIPPED_FILE, backend, build_index_at, open_index

__all__ = ["SKIPPED_FILE", "index_corpus", "index_documents", "split_topics"]


def split_topics(documents: list[Document], config: IndexConfig, progress: bool = True) -> list[Document]:
    """Each document with its topic (`config.split` = "kmeans:N") in
    `metadata[config.collection_field]`: "topic-00" .. "topic-NN", by spherical k-means
    over an embedding of its title and first 1,000 characters."""
    from marag.index.cluster import kmeans
    from marag.index.embed import get_embedder

    n = config.split_n or 1
    if n > len(documents):
        raise CorpusError(
            f"cannot split {len(documents)} documents into {n} collections", hint=f"use --split kmeans:N with N <= {len(documents)}"
        )
    vectors = get_embedder(config.embedder).embed([f"{d.title}\n{d.text[:1000]}" for d in documents], progress=progress)
    labels = kmeans(vectors, n, seed=0)
    width = len(str(n - 1))
    field = config.collection_field or "topic"
    return [d.model_copy(update={"metadata": {**d.metadata, field: f"topic-{int(k):0{width}d}"}}) for d, k in zip(documents, labels)]


def index_documents(
    documents: list[Document], out: str | Path, config: IndexConfig, overwrite: bool = False, progress: bool = True,
    batch_size: int = 256,
):  # fmt: skip
    """Chunk `documents` and build their index at `out` (a directory or an index URI);
    returns the opened index."""
    if config.split:
        documents = split_topics(documents, config, progress)
    chunks = chunk_documents(documents, size=config.chunk_size, overlap=config.chunk_overlap)
    if not chunks:
        raise CorpusError("the documents hold no text to index", hint="check that the files are not empty")
    build_index_at(chunks, out, config, corpus_hash(documents), overwrite=overwrite, progress=progress, batch_size=batch_size)
    return open_index(out)


def index_corpus(
    path: Path,
    out: str | Path,
    config: IndexConfig,
    format: str = "auto",
    on_error: str = "fail",
    overwrite: bool = False,
    progress: bool = True,
    batch_size: int = 256,
):
    loaded = load_corpus(path, format=format, on_error=on_error)
    idx = index_documents(loaded.documents, out, config, overwrite=overwrite, progress=progress, batch_size=batch_size)
    if loaded.skipped_at:  # every skipped record, for the user to fix (the warning shows the first few)
        skipped = backend(out).skipped_file(str(out))
        skipped.parent.mkdir(parents=True, exist_ok=True)
        skipped.write_text("\n".join(loaded.skipped_at) + "\n", encoding="utf-8")
    return idx
