"""UniRAG's planning module: at each step a short Thought, then one action: `search`
with one detailed query for a single piece of information, or `final_answer` when the
evidence in the working memory answers the question.

Fallback: search for the question itself while nothing has been searched, else
final_answer.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from marag.agents.base import Agent, narrowed
from marag.agents.layout import clip, laid_out
from marag.agents.queries import QUERY_MAX_CHARS
from marag.agents.unirag._shared import PREAMBLE, MemoryStep, render_memory
from marag.errors import StructuredOutputError
from marag.llm.base import Message


class PlanInput(BaseModel):
    question: str
    memory: list[MemoryStep] = Field(default_factory=list)
    searches_left: int | None = None  # None: no cap of its own
    used: list[str] = Field(default_factory=list)  # queries already run (to ask for a new one)


class PlanStep(BaseModel):
    thought: str = Field(max_length=200)
    action: Literal["search", "final_answer"]
    query: str = Field(default="", max_length=QUERY_MAX_CHARS)


_TASK = (
    "Your task: decide the next step. Write a short thought about what the evidence so far "
    "shows and what is still missing. Then choose one action: search, with one detailed query "
    "for a single piece of information that is still missing (never several things at once), "
    "or final_answer, when the evidence already answers the question."
)
TERSE_THOUGHT_CHARS = 120


class Planner(Agent[PlanInput, PlanStep]):
    """`terse` (ours): the thought cut at 120 characters instead of 200. With the
    default model every thought ran to the 200-character limit (~45 of the planner's
    ~70 generated tokens a call, HotpotQA 51-80), restating the evidence the memory
    shows, and generated tokens are the slower half of an agent's time on a CPU (~13 a
    second against ~60 evaluated prompt tokens). The prompt is the same: asked for "a
    few words" instead, the 1.5B wrote "The next step is to search for ..." and then
    searched the question again (5 of 30 HotpotQA answers lost, RESULTS.md)."""

    name = "planner"
    max_tokens = 110

    def __init__(self, terse: bool = False):
        if terse:
            self.Output = narrowed(PlanStep, "thought", max_length=TERSE_THOUGHT_CHARS)
            self.max_tokens = 90

    def messages(self, inp: PlanInput) -> list[Message]:
        state = [
            f"Working memory:\n{render_memory(inp.memory)}",
            f"Queries already used (do not repeat them): {'; '.join(inp.used)}" if inp.used else "",
            f"Searches left: {inp.searches_left}" if inp.searches_left is not None else "",
        ]
        return laid_out(_TASK, inp.question, state, "Next step as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: PlanInput, error: StructuredOutputError) -> PlanStep:
        if not any(s.action == "search" for s in inp.memory) and inp.searches_left != 0:
            return PlanStep(thought="fallback: search for the question", action="search", query=clip(inp.question, QUERY_MAX_CHARS))
        return PlanStep(thought="fallback: answer from the evidence gathered", action="final_answer")
