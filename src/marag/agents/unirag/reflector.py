"""UniRAG's evidence reflector: reads the documents one search returned and condenses
them into short evidence for the question, each piece with the number of the document
it comes from, or says that no information was found. Only its evidence enters the
working memory, never the raw documents.

Fallback: no evidence ("No information found"); the planner then searches again.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.documents import Doc
from marag.agents.layout import laid_out, numbered_passages
from marag.agents.unirag._shared import PREAMBLE
from marag.errors import StructuredOutputError
from marag.llm.base import Message


class ReflectInput(BaseModel):
    question: str
    query: str
    documents: list[Doc]


class Finding(BaseModel):
    doc: int = Field(ge=1, le=20)  # the document's number in the prompt
    text: str = Field(max_length=160)


class Reflection(BaseModel):
    found: bool
    evidence: list[Finding] = Field(default_factory=list, max_length=3)


_TASK = (
    "Your task: read the documents retrieved for the search query below and write the evidence "
    "they give toward answering the question: up to 3 short statements, each with the number of "
    "its document. Copy names, dates and numbers exactly. If no document helps, set found to false "
    "and give no evidence."
)


class Reflector(Agent[ReflectInput, Reflection]):
    name = "reflector"
    max_tokens = 200

    def messages(self, inp: ReflectInput) -> list[Message]:
        docs = numbered_passages(inp.documents)
        state = [f"Search query: {inp.query}", f"Documents:\n{docs}"]
        return laid_out(_TASK, inp.question, state, "Evidence as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: ReflectInput, error: StructuredOutputError) -> Reflection:
        return Reflection(found=False)
