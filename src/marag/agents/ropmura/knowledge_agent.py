"""A RopMura knowledge agent's answer: from the top pieces of its own collection, an
analysis that quotes them and a one-sentence answer, or "I don't know" when they do
not hold it. Its documents never leave it: only this reply does.

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


class KnowledgeInput(BaseModel):
    question: str
    collection: str
    documents: list[Doc]


class KnowledgeReply(BaseModel):
    analysis: str = Field(max_length=300)
    answer: str = Field(max_length=200)


_TASK = (
    "You are the specialist for one collection. Answer the question from your documents only: "
    "an analysis that quotes the documents, then a one-sentence answer. If they do not hold the "
    f"answer, the answer is \"{DONT_KNOW}\"."
)


class KnowledgeAgent(Agent[KnowledgeInput, KnowledgeReply]):
    name = "knowledge_agent"
    Input = KnowledgeInput
    Output = KnowledgeReply
    max_tokens = 200

    def messages(self, inp: KnowledgeInput) -> list[Message]:
        docs = numbered_passages(inp.documents)
        return laid_out(_TASK + " Reply as JSON.", inp.question, [f"Your collection: {inp.collection}"], "Analysis and answer as JSON.", docs, preamble=PREAMBLE)

    def fallback(self, inp: KnowledgeInput, error: StructuredOutputError) -> KnowledgeReply:
        return KnowledgeReply(analysis="fallback: no usable reply", answer=DONT_KNOW)
