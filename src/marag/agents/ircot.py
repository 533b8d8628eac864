"""IRCoT's reasoning step (Trivedi et al., ACL 2023, "Interleaving Retrieval with
Chain-of-Thought Reasoning"): given the question, the paragraphs collected so far and
the chain of thought so far, write the next sentence of the chain; when the chain
reaches the answer, give it. The strategy uses each new sentence as the next query.

Fallback: an empty sentence and no answer (the strategy stops reasoning and the reader
answers from the paragraphs collected).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from marag.agents.answerer import AnswerStyle, SHORT
from marag.agents.base import Agent, narrowed
from marag.agents.documents import Doc
from marag.agents.layout import laid_out, numbered_passages
from marag.errors import StructuredOutputError
from marag.llm.base import Message

THOUGHT_MAX_CHARS = 300


class ThinkInput(BaseModel):
    question: str
    documents: list[Doc] = Field(default_factory=list)
    chain: list[str] = Field(default_factory=list)  # the sentences of the chain so far


class Thought(BaseModel):
    sentence: str = Field(max_length=THOUGHT_MAX_CHARS)  # the next reasoning step: one sentence
    answer: str = Field(default="", max_length=SHORT.max_chars)  # empty until the chain reaches it


_SYSTEM = (
    "You answer a question that may need several facts, by reasoning one step at a time over the "
    "numbered paragraphs. Each turn, write only the next sentence of the reasoning: one new fact "
    "from the paragraphs, with the names it involves, or the conclusion. Set answer only when the "
    "reasoning so far gives the answer; otherwise leave answer empty. Reply as JSON."
)


def render_chain(chain: Sequence[str]) -> str:
    return " ".join(chain) if chain else "(nothing yet)"


class Thinker(Agent[ThinkInput, Thought]):
    name = "ircot.think"
    max_tokens = 160

    def __init__(self, style: AnswerStyle | None = None):
        style = style or SHORT
        self.Output = narrowed(Thought, "answer", max_length=style.max_chars)
        self.max_tokens = 100 + style.max_tokens

    def messages(self, inp: ThinkInput) -> list[Message]:
        return laid_out(
            _SYSTEM,
            inp.question,
            [f"Reasoning so far: {render_chain(inp.chain)}"],
            "The next sentence (and the answer, if reached) as JSON.",
            numbered_passages(inp.documents),
        )

    def fallback(self, inp: ThinkInput, error: StructuredOutputError) -> Thought:
        return self.Output(sentence="", answer="")
