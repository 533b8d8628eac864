"""The retrieval port: anything with `search` is a retriever."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from pydantic import BaseModel


class Hit(BaseModel):
    doc_id: str
    chunk_id: str
    score: float
    text: str
    title: str = ""


@runtime_checkable
class Retriever(Protocol):
    """`search(query, k, offset)` returns hits ranked `offset .. offset+k-1`.

    Paging by offset lets the mRAG searcher ask for "the next two" with the same query.
    Ties are broken by chunk order in the index, so results are deterministic.
    `search_batch` returns one page per query: any read-only sequence of hits (the
    built-in retrievers make a batch's hits when a page is first read); `list(page)`
    when you need a list to change.
    """

    name: str

    def search(self, query: str, k: int = 10, offset: int = 0) -> list[Hit]: ...

    def search_batch(
        self, queries: Sequence[str], k: int = 10, offset: int = 0
    ) -> list[Sequence[Hit]]: ...
