"""The coordinator (mRAG, Algorithm 1): each turn it reads the question, what the agents
have reported so far and the current response, and names the one agent to run next,
with a short input for it and a short reason.

Fallback: when its output is unusable it hands over to the fixed sequence
planner -> searcher -> answerer -> finisher (without the planner when the strategy's
`plan_first` is off); the strategy tells it where that sequence stands
(`default_next`), so the run continues from what has already happened.

Hint (our addition, `hint=True`): the prompt's last line names `default_next` as "the
usual next agent". Measured on 12 probe states (3 questions x
{start, planned, searched, answered}): the default model (Qwen2.5-Coder-1.5B) chose a
sensible agent in 12 of 12 with the hint and 6 of 12 without it (it then names the
searcher in nearly every state, also after the response is written); SmolLM2-135M 11 of
12 with it, 4-7 without (it names the first agent it reads). Turn it off to study the
unaided coordinator. (The hinted agent was also listed first in the catalogue; the
default model chose as well without that, 12 of 12, and the system prompt now stays
the same.)

Layout: the system prompt (with the catalogue) is the same for every turn; the user
message starts with the question and the history,
which only grows, so consecutive turns share most of their prompt; what changes
(documents, response, calls left, hint) comes last.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

from marag.agents.base import Agent, narrowed
from marag.agents.layout import laid_out, numbered_lines
from marag.errors import StructuredOutputError
from marag.llm.base import Message

AgentName = Literal["planner", "searcher", "summarizer", "reasoner", "validator", "answerer", "reviser", "finisher"]
AGENT_NAMES: tuple[str, ...] = get_args(AgentName)

# What the coordinator is told about each agent. Deliberately short and free of
# "input:"-style labels: small models copy such text into their own fields.
AGENT_GUIDE: dict[str, str] = {
    "planner": "makes a short plan",
    "searcher": "finds documents about the topic you give it",
    "summarizer": "summarizes the documents found",
    "reasoner": "thinks through one point you give it",
    "answerer": "writes the response from the documents found",
    "validator": "checks the response",
    "reviser": "improves the response as you suggest",
    "finisher": "ends the work and returns the response",
}


# One system prompt for every turn, the agents in a fixed order, so that a question's
# coordinator turns share their prompt up to the history (the catalogue used to list the
# hinted agent first, which changed the system prompt, and so the whole prompt llama.cpp
# had to read, nearly every turn)
SYSTEM = (
    "You coordinate a team of agents that answer a question from a document collection. "
    "Each turn you choose the agent that acts next.\nAgents:\n"
    + "\n".join(f"{name} - {guide}" for name, guide in AGENT_GUIDE.items())
    + "\nReply as JSON with the agent, its input and your reason."
)


class CoordinatorInput(BaseModel):
    question: str
    history: list[str] = Field(default_factory=list)  # recent agent reports, oldest first
    response: str = ""  # the current response ("" = none yet)
    documents: list[str] = Field(default_factory=list)  # the documents collected: "title: what it gives"
    calls_left: int = 0
    default_next: AgentName = "planner"  # the fixed sequence's next agent (fallback; hint)
    hint: bool = True  # name default_next in the prompt's last line (see module docstring)


class CoordinatorDecision(BaseModel):
    agent: AgentName
    input: str = Field(default="", max_length=200)
    reason: str = Field(default="", max_length=150)


class Coordinator(Agent[CoordinatorInput, CoordinatorDecision]):
    name = "coordinator"
    max_tokens = 160

    def __init__(self, input_chars: int = 200):
        # the instruction it writes for the next agent: 200 characters keep a small
        # model's reply short; the paper's mode allows a long one
        if input_chars != 200:
            self.Output = narrowed(CoordinatorDecision, "input", max_length=input_chars)
            self.max_tokens = 160 + input_chars // 3

    def messages(self, inp: CoordinatorInput) -> list[Message]:
        history = numbered_lines(inp.history, "(nothing yet)")
        state = [
            f"Done so far:\n{history}",
            f"Documents found: {'; '.join(inp.documents) or 'none'}",
            f"Response: {inp.response or 'none yet'}",
            f"Calls left: {inp.calls_left}",
            f"The usual next agent is: {inp.default_next}" if inp.hint else "",
        ]
        return laid_out(SYSTEM, inp.question, state, "Which agent acts next?")

    def fallback(self, inp: CoordinatorInput, error: StructuredOutputError) -> CoordinatorDecision:
        return CoordinatorDecision(
            agent=inp.default_next, input="", reason="fallback: coordinator output unusable, fixed sequence"
        )


def useful_input(text: str) -> str:
    """The coordinator's input for the agent, or "" when it is an echo rather than an
    instruction: an agent's name, a phrase copied from the coordinator's own prompt,
    or something without words (small models do all three)."""
    flat = " ".join(text.split()).strip(" .,;:-\"'")
    if len(flat) < 3 or not any(c.isalpha() for c in flat) or flat.lower() in AGENT_NAMES:
        return ""
    if flat.lower() in SYSTEM.lower() or "usual next agent" in flat.lower():
        return ""
    return flat
