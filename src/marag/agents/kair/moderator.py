"""KAIR's optional moderator: is the refined context sufficient to answer the question?

Fallback: not sufficient (the cycle goes on until Required is empty or the budget ends).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.kair._shared import kair_prompt, numbered
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
        state = [f"What is known:\n{numbered(inp.known)}", f"Still open:\n{numbered(inp.required)}"]
        return kair_prompt(inp.question, _TASK, state, "Verdict as JSON.")

    def fallback(self, inp: ModeratorInput, error: StructuredOutputError) -> Verdict:
        return Verdict(sufficient=False, reason="fallback: no usable verdict")
