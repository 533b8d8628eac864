"""KAIR's moderator: how well does an agent's refined context C support an answer to
the question? A score from 0 to 10 that the strategy compares with its threshold: in
competition the best-scored C at or above it is shared with every agent (each keeps its
own known facts and gaps); with one agent (`moderator=true`) a C at or above it ends
the retrieval.

Fallback: score 0 (nothing is shared, the cycle goes on).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.documents import Doc
from marag.agents.kair._shared import PREAMBLE
from marag.agents.layout import laid_out, numbered_passages
from marag.errors import StructuredOutputError
from marag.llm.base import Message


class ModeratorInput(BaseModel):
    question: str
    passages: list[Doc] = Field(default_factory=list)  # the refined context, most relevant first


class Verdict(BaseModel):
    reason: str = Field(default="", max_length=160)  # what the context still lacks, if anything
    score: int = Field(ge=0, le=10)


_TASK = (
    "Your task: rate the refined context below as evidence for the question. Say in a few words what "
    "it still lacks (if anything), then score it from 0 (nothing that helps) to 10 (everything a "
    "complete, correct answer needs)."
)


class Moderator(Agent[ModeratorInput, Verdict]):
    name = "moderator"
    max_tokens = 80

    def messages(self, inp: ModeratorInput) -> list[Message]:
        return laid_out(_TASK, inp.question, [], "Verdict as JSON.", numbered_passages(inp.passages), preamble=PREAMBLE)

    def fallback(self, inp: ModeratorInput, error: StructuredOutputError) -> Verdict:
        return Verdict(reason="fallback: no usable verdict", score=0)
