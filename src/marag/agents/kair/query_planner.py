"""KAIR's query planning: candidate queries, each aimed at one open gap, written from
what is known, what is required and the queries already run. The strategy then picks
one by relevance to an open gap minus similarity to earlier queries (measured on the
queries' words, not by the model), and rejects the redundant ones.

Fallback: one query made of the first open gap.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.kair._shared import PREAMBLE
from marag.agents.layout import clip, laid_out, numbered_lines
from marag.agents.queries import QUERY_MAX_CHARS
from marag.errors import StructuredOutputError
from marag.llm.base import Message


class PlanInput(BaseModel):
    question: str
    known: list[str] = Field(default_factory=list)
    required: list[str] = Field(default_factory=list)
    history: list[str] = Field(default_factory=list)
    focus: str = ""  # collaboration: the gap this agent was assigned
    member: int = 0  # which of `members` agents this is (several agents are told apart, so they differ)
    members: int = 1


class Candidate(BaseModel):
    query: str = Field(max_length=QUERY_MAX_CHARS)
    gap: int = Field(ge=1, le=10)  # the number of the open gap it addresses


class Candidates(BaseModel):
    candidates: list[Candidate] = Field(min_length=1, max_length=3)


_TASK = (
    "Your task: propose up to 3 search queries, each a few keywords aimed at one open gap (give the "
    "gap's number). Use names you already know. Do not repeat a query already run."
)


class QueryPlanner(Agent[PlanInput, Candidates]):
    name = "query_planner"
    max_tokens = 120

    def messages(self, inp: PlanInput) -> list[Message]:
        state = [
            f"What is known:\n{numbered_lines(inp.known)}",
            f"What is required (open gaps):\n{numbered_lines(inp.required)}",
            f"Queries already run:\n{numbered_lines(inp.history)}",
            f"Work on gap: {inp.focus}" if inp.focus else "",
            f"You are agent {inp.member + 1} of {inp.members}: try your own angle." if inp.members > 1 else "",
        ]
        return laid_out(_TASK, inp.question, state, "Candidate queries as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: PlanInput, error: StructuredOutputError) -> Candidates:
        gap = inp.focus or (inp.required[0] if inp.required else inp.question)
        return Candidates(candidates=[Candidate(query=clip(gap, QUERY_MAX_CHARS), gap=1)])
