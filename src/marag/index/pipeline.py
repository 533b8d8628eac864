"""Documents on disk -> chunks -> an index directory, in one call (what `marag index` runs)."""

from __future__ import annotations

from pathlib import Path

from marag.corpus import chunk_documents, load_corpus
from marag.corpus.models import Document
from marag.errors import CorpusError
from marag.index.store import Index, IndexConfig, build_index, corpus_hash, open_index


def index_documents(
    documents: list[Document], out: Path, config: IndexConfig, overwrite: bool = False, progress: bool = True
) -> Index:
    chunks = chunk_documents(documents, size=config.chunk_size, overlap=config.chunk_overlap)
    if not chunks:
        raise CorpusError("the documents hold no text to index", hint="check that the files are not empty")
    build_index(chunks, Path(out), config, corpus_hash=corpus_hash(documents), overwrite=overwrite, progress=progress)
    return open_index(out)


def index_corpus(
    path: Path,
    out: Path,
    config: IndexConfig,
    format: str = "auto",
    on_error: str = "fail",
    overwrite: bool = False,
    progress: bool = True,
) -> Index:
    loaded = load_corpus(path, format=format, on_error=on_error)
    return index_documents(loaded.documents, out, config, overwrite=overwrite, progress=progress)
