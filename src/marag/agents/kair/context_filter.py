"""KAIR's contextual filtering: which passages make up the refined context C (relevant
to the question and consistent with what is known). Passages are kept verbatim: the
model only names them by number. When the known facts changed, the passages already in
C are shown again beside the new ones and C becomes what the filter keeps (C is
re-filtered against the new knowledge); otherwise only the new passages are judged.

Fallback: keep the passages that support a known fact.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.documents import Doc
from marag.agents.kair._shared import PREAMBLE
from marag.agents.layout import laid_out, numbered_lines, numbered_passages
from marag.errors import StructuredOutputError
from marag.llm.base import Message


class FilterInput(BaseModel):
    question: str
    known: list[str] = Field(default_factory=list)
    passages: list[Doc]
    supporting: list[int] = Field(default_factory=list)  # passages that support a known fact (the fallback)


class Kept(BaseModel):
    keep: list[int] = Field(default_factory=list, max_length=20)


_TASK = (
    "Your task: choose the passages to keep as context for answering the question: those relevant to "
    "it and consistent with what is known. Give their numbers, most useful first."
)


class ContextFilter(Agent[FilterInput, Kept]):
    name = "context_filter"
    max_tokens = 80

    def messages(self, inp: FilterInput) -> list[Message]:
        state = [f"What is known:\n{numbered_lines(inp.known)}", f"Passages:\n{numbered_passages(inp.passages)}"]
        return laid_out(_TASK, inp.question, state, "Passages to keep as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: FilterInput, error: StructuredOutputError) -> Kept:
        return Kept(keep=inp.supporting)
