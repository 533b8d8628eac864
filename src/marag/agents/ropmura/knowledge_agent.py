"""A RopMura knowledge agent's answer: from the top pieces of its own collection, an
analysis that quotes them and a one-sentence answer, or "I don't know" when they do
not hold it. Its documents never leave it: only this reply does.

Fallback: "I don't know".
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.documents import Doc
from marag.agents.ropmura._shared import DONT_KNOW, role_prompt
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
        docs = "\n\n".join(f"[{i}] {d.title}\n{d.text}" for i, d in enumerate(inp.documents, 1))
        return role_prompt(_TASK, inp.question, [f"Your collection: {inp.collection}"], "Analysis and answer as JSON.", docs)

    def fallback(self, inp: KnowledgeInput, error: StructuredOutputError) -> KnowledgeReply:
        return KnowledgeReply(analysis="fallback: no usable reply", answer=DONT_KNOW)
