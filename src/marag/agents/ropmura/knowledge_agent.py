"""A RopMura knowledge agent's answer: from the top pieces of its own collection, an
analysis that quotes them (up to about ten sentences) and a one-sentence answer, or
"I don't know" when they do not hold it. Its documents never leave it: only this reply
does.

Fallback: "I don't know".
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.documents import Doc
from marag.agents.layout import laid_out, numbered_passages
from marag.agents.ropmura._shared import DONT_KNOW, PREAMBLE
from marag.errors import StructuredOutputError
from marag.llm.base import Message

ANALYSIS_MAX_CHARS = 1500  # room for about ten sentences with quotes


class KnowledgeInput(BaseModel):
    question: str
    collection: str
    documents: list[Doc]


class KnowledgeReply(BaseModel):
    analysis: str = Field(max_length=ANALYSIS_MAX_CHARS)
    answer: str = Field(max_length=200)


_TASK = (
    "You are the specialist for one collection. Answer the question from your documents only: "
    "first an analysis of at most ten sentences that quotes the passages it relies on, then a "
    f"one-sentence answer. If the documents do not hold the answer, the answer is \"{DONT_KNOW}\"."
)


class KnowledgeAgent(Agent[KnowledgeInput, KnowledgeReply]):
    name = "knowledge_agent"
    max_tokens = 520  # the analysis (~1,500 characters) and the answer, in JSON

    def messages(self, inp: KnowledgeInput) -> list[Message]:
        docs = numbered_passages(inp.documents)
        return laid_out(_TASK + " Reply as JSON.", inp.question, [f"Your collection: {inp.collection}"], "Analysis and answer as JSON.", docs, preamble=PREAMBLE)

    def fallback(self, inp: KnowledgeInput, error: StructuredOutputError) -> KnowledgeReply:
        return KnowledgeReply(analysis="fallback: no usable reply", answer=DONT_KNOW)
