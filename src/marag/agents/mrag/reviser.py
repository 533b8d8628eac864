"""The reviser: rewrites the current response following a suggestion (typically the
validator's feedback), staying grounded in the documents.

It only runs once a response exists; before that the strategy records a refusal step
instead of calling it. Fallback: the response unchanged.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.answerer import AnswerOutput, AnswerStyle, StyledAnswer
from marag.agents.base import Agent
from marag.agents.mrag._shared import Doc, render_docs, render_lines, laid_out
from marag.errors import StructuredOutputError
from marag.llm.base import Message


class ReviserInput(BaseModel):
    question: str
    response: str
    suggestion: str = ""  # the coordinator's input
    notes: list[str] = Field(default_factory=list)
    documents: list[Doc] = Field(default_factory=list)


class Reviser(StyledAnswer, Agent[ReviserInput, AnswerOutput]):
    name = "reviser"

    def __init__(self, style: AnswerStyle | None = None):
        self._set_style(style)

    def messages(self, inp: ReviserInput) -> list[Message]:
        system = (
            "You improve a response to a question. Apply the suggestion, keep what is right, "
            f"use only facts from the documents. {self.style.instruction} Reply as JSON."
        )
        state = [
            f"Notes:\n{render_lines(inp.notes)}" if inp.notes else "",
            f"Response: {inp.response}",
            f"Suggestion: {inp.suggestion or 'make it more accurate and direct'}",
        ]
        return laid_out(system, inp.question, state, "Revised answer as JSON.", render_docs(inp.documents))

    def fallback(self, inp: ReviserInput, error: StructuredOutputError) -> AnswerOutput:
        return self.Output(answer=inp.response[: self.style.max_chars])
