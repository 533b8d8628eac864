"""Documents, chunks, collections and the loaders that read them."""

from marag.corpus.chunking import ChunkList, chunk_documents
from marag.corpus.collections import collection_of, split_collections
from marag.corpus.loaders import (
    LOADERS,
    CorpusWarning,
    LoadedCorpus,
    Loader,
    detect_format,
    load_corpus,
    load_questions,
    register_loader,
)
from marag.corpus.models import Chunk, Document, Question

__all__ = [
    "LOADERS",
    "Chunk",
    "ChunkList",
    "CorpusWarning",
    "Document",
    "LoadedCorpus",
    "Loader",
    "Question",
    "chunk_documents",
    "collection_of",
    "detect_format",
    "load_corpus",
    "load_questions",
    "register_loader",
    "split_collections",
]
