"""Documents, chunks, collections and the loaders that read them."""

from marag.corpus.models import Chunk, Document, Question

__all__ = ["Chunk", "Document", "Question"]
