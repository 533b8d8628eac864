"""KAIR's optional moderator: is the refined context sufficient to answer the question?

Fallback: not sufficient (the cycle goes on until Required is empty or the budget ends).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.kair._shared import PREAMBLE
from marag.agents.layout import laid_out, numbered_lines
from marag.errors import StructuredOutputError
from marag.llm.base import Message


class ModeratorInput(BaseModel):
    question: str
    known: list[str] = Field(default_factory=list)
    required: list[str] = Field(default_factory=list)


class Verdict(BaseModel):
    sufficient: bool
    reason: str = Field(default="", max_length=120)


_TASK = "Your task: judge whether what is known is enough to answer the question fully."


class Moderator(Agent[ModeratorInput, Verdict]):
    name = "moderator"
    Input = ModeratorInput
    Output = Verdict
    max_tokens = 60

    def messages(self, inp: ModeratorInput) -> list[Message]:
        state = [f"What is known:\n{numbered_lines(inp.known)}", f"Still open:\n{numbered_lines(inp.required)}"]
        return laid_out(_TASK, inp.question, state, "Verdict as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: ModeratorInput, error: StructuredOutputError) -> Verdict:
        return Verdict(sufficient=False, reason="fallback: no usable verdict")
