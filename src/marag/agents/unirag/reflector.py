"""UniRAG's evidence reflector: reads the documents one search returned and condenses
them into short evidence for the question, each piece with the number of the document
it comes from, or says that no information was found. Only its evidence enters the
working memory, never the raw documents.

Fallback: no evidence ("No information found"); the planner then searches again.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, create_model

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


def _task(statements: str) -> str:
    return (
        "Your task: read the documents retrieved for the search query below and write the evidence "
        f"they give toward answering the question: {statements}, each with the number of "
        "its document. Copy names, dates and numbers exactly. If no document helps, set found to false "
        "and give no evidence."
    )


TERSE_FINDINGS, TERSE_FINDING_CHARS = 2, 100
# the same class names, so traces, scripted replies and training exports read the same
_TerseFinding = create_model("Finding", __base__=Finding, text=(str, Field(max_length=TERSE_FINDING_CHARS)))
_TerseReflection = create_model(
    "Reflection", __base__=Reflection, evidence=(list[_TerseFinding], Field(default_factory=list, max_length=TERSE_FINDINGS))
)


class Reflector(Agent[ReflectInput, Reflection]):
    """`terse` (ours): at most 2 statements of at most 100 characters, each one fact
    (the paper's: up to 3 of 160). The final answer reads the cited documents whole, so
    the statements only tell the planner what was found and which documents to cite;
    with the default model they were the reflector's ~80 generated tokens a call."""

    name = "reflector"
    max_tokens = 200

    def __init__(self, terse: bool = False):
        self.terse = terse
        if terse:
            self.Output = _TerseReflection
            self.max_tokens = 120

    def messages(self, inp: ReflectInput) -> list[Message]:
        docs = numbered_passages(inp.documents)
        state = [f"Search query: {inp.query}", f"Documents:\n{docs}"]
        task = _task("up to 2 short statements of one fact each" if self.terse else "up to 3 short statements")
        return laid_out(task, inp.question, state, "Evidence as JSON.", preamble=PREAMBLE)

    def fallback(self, inp: ReflectInput, error: StructuredOutputError) -> Reflection:
        return Reflection(found=False)
