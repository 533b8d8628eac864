"""The planner: a short list of steps for answering the question.

Fallback: a generic two-step plan (search, then answer), which is what the fixed
sequence does anyway.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from marag.agents.base import Agent
from marag.agents.mrag._shared import render_lines, laid_out
from marag.errors import StructuredOutputError
from marag.llm.base import Message

Step = Annotated[str, StringConstraints(max_length=150)]


class PlannerInput(BaseModel):
    question: str
    request: str = ""  # the coordinator's input
    known: list[str] = Field(default_factory=list)  # what the team has found so far


class Plan(BaseModel):
    steps: list[Step] = Field(min_length=1, max_length=5)


_SYSTEM = (
    "You plan how to answer a question with a document search engine. "
    "Write 2 to 4 short steps: what to look up and what to work out. Reply as JSON."
)


class Planner(Agent[PlannerInput, Plan]):
    name = "planner"
    max_tokens = 220

    def messages(self, inp: PlannerInput) -> list[Message]:
        state = [f"Focus: {inp.request}" if inp.request else "", f"Known so far:\n{render_lines(inp.known)}" if inp.known else ""]
        return laid_out(_SYSTEM, inp.question, state, "Plan as JSON.")

    def fallback(self, inp: PlannerInput, error: StructuredOutputError) -> Plan:
        return Plan(steps=[f"Search the collection for: {inp.question}"[:150], "Answer from the documents found"])
