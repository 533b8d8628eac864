"""The reasoner: a step-by-step analysis of one aspect of the question, from what has
been collected.

Fallback: a note saying no analysis was produced (the coordinator sees it and moves on).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.mrag._shared import Doc, render_docs, render_lines, laid_out
from marag.errors import StructuredOutputError
from marag.llm.base import Message


class ReasonerInput(BaseModel):
    question: str
    aspect: str = ""  # the coordinator's input
    documents: list[Doc] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class Analysis(BaseModel):
    analysis: str = Field(max_length=300)


_SYSTEM = (
    "You think through one aspect of a question, step by step, using the documents. "
    "Write the steps briefly and end with what follows. Reply as JSON."
)


class Reasoner(Agent[ReasonerInput, Analysis]):
    name = "reasoner"
    max_tokens = 200

    def messages(self, inp: ReasonerInput) -> list[Message]:
        state = [
            f"Notes:\n{render_lines(inp.notes)}" if inp.notes else "",
            f"Aspect to analyse: {inp.aspect or 'the whole question'}",
        ]
        return laid_out(_SYSTEM, inp.question, state, "Analysis as JSON.", render_docs(inp.documents))

    def fallback(self, inp: ReasonerInput, error: StructuredOutputError) -> Analysis:
        return Analysis(analysis="No analysis was produced (the reasoner's output was unusable).")
