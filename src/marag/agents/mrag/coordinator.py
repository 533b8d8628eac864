"""The coordinator (mRAG, Algorithm 1): each turn it reads the question, what the agents
have reported so far and the current response, and names the one agent to run next,
with a short input for it and a short reason.

Fallback: when its output is unusable it hands over to the fixed sequence
planner -> searcher -> answerer -> finisher; the strategy tells it where that sequence
stands (`default_next`), so the run continues from what has already happened.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.mrag._shared import render_lines
from marag.errors import StructuredOutputError
from marag.llm.base import Message

AgentName = Literal["planner", "searcher", "summarizer", "reasoner", "validator", "answerer", "reviser", "finisher"]
AGENT_NAMES: tuple[str, ...] = get_args(AgentName)

# What the coordinator is told about each agent: what to give it, what comes back.
AGENT_GUIDE: dict[str, str] = {
    "planner": "input: what to plan for. Returns a short list of steps.",
    "searcher": "input: the aspects to look up. Returns relevant documents from the collection.",
    "summarizer": "input: what to focus on. Returns a summary of the information collected.",
    "reasoner": "input: one aspect to think through. Returns a step-by-step analysis.",
    "answerer": "input: guidance for the answer. Returns a response based on the documents.",
    "validator": "input: nothing. Checks the response: valid, grounded, correct, with feedback.",
    "reviser": "input: what to change. Returns a revised response (only after the answerer).",
    "finisher": "input: nothing. Ends the work and returns the response (only after the answerer).",
}

_SYSTEM = (
    "You lead a team of agents that answer a question using a document collection. "
    "Each turn, choose the one agent that should act next, give it a short input, and "
    "say why in a few words.\nAgents:\n"
    + "\n".join(f"- {name}: {text}" for name, text in AGENT_GUIDE.items())
    + "\nA good order: planner, searcher, answerer, validator, finisher. "
    "Search before answering. Finish once a good response exists."
)


class CoordinatorInput(BaseModel):
    question: str
    history: list[str] = Field(default_factory=list)  # recent agent reports, oldest first
    response: str = ""  # the current response ("" = none yet)
    documents: list[str] = Field(default_factory=list)  # titles of the documents collected
    calls_left: int = 0
    default_next: AgentName = "planner"  # the fixed sequence's next agent: only the fallback reads it


class CoordinatorDecision(BaseModel):
    agent: AgentName
    input: str = Field(default="", max_length=200)
    reason: str = Field(default="", max_length=150)


class Coordinator(Agent[CoordinatorInput, CoordinatorDecision]):
    name = "coordinator"
    Input = CoordinatorInput
    Output = CoordinatorDecision
    max_tokens = 160

    def messages(self, inp: CoordinatorInput) -> list[Message]:
        history = "\n".join(f"{i}. {h}" for i, h in enumerate(inp.history, 1)) or "(nothing yet)"
        user = (
            f"Question: {inp.question}\n"
            f"Documents collected ({len(inp.documents)}):\n{render_lines(inp.documents)}\n"
            f"Current response: {inp.response or '(none yet)'}\n"
            f"Agent calls left: {inp.calls_left}\n"
            f"What the agents reported so far:\n{history}\n\n"
            "Which agent acts next? Reply as JSON."
        )
        return [Message(role="system", content=_SYSTEM), Message(role="user", content=user)]

    def fallback(self, inp: CoordinatorInput, error: StructuredOutputError) -> CoordinatorDecision:
        return CoordinatorDecision(
            agent=inp.default_next, input="", reason="fallback: coordinator output unusable, fixed sequence"
        )
