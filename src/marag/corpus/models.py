"""Plain records for documents, chunks and questions."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Document(BaseModel):
    id: str
    title: str = ""
    text: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class Chunk(BaseModel):
    """A window of a document's tokens; `position` is its index within the document."""

    id: str
    doc_id: str
    text: str
    position: int = 0
    title: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)


class Question(BaseModel):
    """A question with its references, as a dataset provides it."""

    id: str
    question: str
    answers: list[str] = Field(default_factory=list)
    gold_doc_ids: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
