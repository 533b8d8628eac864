"""One KAIR agent's state (or the shared blackboard in collaboration): What is Known
(verified facts, each with its source passage), What is Required (open information
gaps), the query history and the refined context (passages kept verbatim)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.index.base import Hit


class Fact(BaseModel):
    text: str
    source: str  # chunk id of the passage that supports it


class KnowledgeState(BaseModel):
    known: list[Fact] = Field(default_factory=list)
    required: list[str] = Field(default_factory=list)
    history: list[str] = Field(default_factory=list)
    context: dict[str, Hit] = Field(default_factory=dict)  # chunk id -> passage, in the order kept
    linked: list[str] = Field(default_factory=list)  # chunk ids joined by title link (`linked_docs`)
    cycles: int = 0

    def known_lines(self) -> list[str]:
        return [f"{f.text} [{f.source}]" for f in self.known]

    def snapshot(self) -> dict:
        return {"known": [f.text for f in self.known], "required": list(self.required), "context": list(self.context)}
