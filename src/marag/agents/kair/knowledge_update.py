"""KAIR's knowledge update: from the passages just retrieved, the facts they support
(each with its passage number), each checked against what is known (new, already
known, or in conflict), which open gaps they close, and which new gaps appear (what
must be found next, e.g. a fact about an entity just learned).

Fallback: nothing learned, no gap changed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.documents import Doc
from marag.agents.kair._shared import PREAMBLE
from marag.agents.layout import laid_out, numbered_lines, numbered_passages
from marag.errors import StructuredOutputError
from marag.llm.base import Message


class UpdateInput(BaseModel):
    question: str
    known: list[str] = Field(default_factory=list)
    required: list[str] = Field(default_factory=list)
    passages: list[Doc]


class NewFact(BaseModel):
    text: str = Field(max_length=160)
    passage: int = Field(ge=1, le=20)
    status: Literal["new", "known", "conflict"]


class Update(BaseModel):
    facts: list[NewFact] = Field(default_factory=list, max_length=4)
    closed: list[int] = Field(default_factory=list, max_length=6)  # numbers of the gaps now answered
    new_gaps: list[str] = Field(default_factory=list, max_length=2)


_TASK = (
    "Your task: update what is known from the new passages. List the facts they state that help answer "
    "the question (each with its passage number; status new, known if already known, or conflict if it "
    "contradicts a known fact). Give the numbers of the open gaps these facts answer, and up to 2 new "
    "gaps: information the question still needs that the new facts point to."
)


class KnowledgeUpdater(Agent[UpdateInput, Update]):
    name = "knowledge_update"
    max_tokens = 260

    def messages(self, inp: UpdateInput) -> list[Message]:
        state = [
            f"What is known:\n{numbered_lines(inp.known)}",
            f"What is required (open gaps):\n{numbered_lines(inp.required)}",
            f"New passages:\n{numbered_passages(inp.passages)}",
        ]
        return laid_out(_TASK, inp.question, state, "Update as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: UpdateInput, error: StructuredOutputError) -> Update:
        return Update()
