"""The registry of retriever kinds an index directory builds and opens.

RETRIEVERS maps a kind name to a class that an index directory (`marag.index.store`)
can build and open:

    kind.build(chunks, directory, config, progress) -> dict   (written into the manifest)
    kind.load(index) -> Retriever                              (index: marag.index.store.DirectoryIndex)

Each kind registers itself where it is defined (`@RETRIEVERS.register("bm25")` on
`BM25Retriever`, and so on); the built-in ones are imported, and so registered, by
`marag.index`, which every import of an index module runs first. Third-party kinds
register under the entry-point group `marag.retrievers`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from marag.corpus.models import Chunk
from marag.index.base import Retriever
from marag.registry import Registry

if TYPE_CHECKING:
    from marag.index.config import IndexConfig

# The kind that fuses the others at query time (no files of its own).
HYBRID = "hybrid"


class RetrieverKind(Protocol):
    kind: str

    @classmethod
    def build(
        cls, chunks: Sequence[Chunk], directory: Path, config: "IndexConfig", progress: bool = True
    ) -> dict[str, Any]: ...

    @classmethod
    def load(cls, index: Any) -> Retriever: ...


RETRIEVERS: Registry[Any] = Registry("retrievers")
