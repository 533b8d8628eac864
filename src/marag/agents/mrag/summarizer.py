"""The summarizer: what the collected documents say about the question, in a few
sentences.

Fallback: an extract (the start of each collected document, clipped), so the next
agent still gets the gist.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from marag.agents.base import Agent
from marag.agents.mrag._shared import Doc, clip, render_docs, render_lines, laid_out
from marag.errors import StructuredOutputError
from marag.llm.base import Message

SUMMARY_MAX_CHARS = 300


class SummarizerInput(BaseModel):
    question: str
    focus: str = ""  # the coordinator's input
    documents: list[Doc] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class Summary(BaseModel):
    summary: str = Field(max_length=SUMMARY_MAX_CHARS)


_SYSTEM = (
    "You summarize documents for a question. Keep only facts that help answer it, "
    "in two or three short sentences. Reply as JSON."
)


class Summarizer(Agent[SummarizerInput, Summary]):
    name = "summarizer"
    max_tokens = 200

    def messages(self, inp: SummarizerInput) -> list[Message]:
        state = [f"Notes:\n{render_lines(inp.notes)}" if inp.notes else "", f"Focus on: {inp.focus}" if inp.focus else ""]
        return laid_out(_SYSTEM, inp.question, state, "Summary as JSON.", render_docs(inp.documents))

    def fallback(self, inp: SummarizerInput, error: StructuredOutputError) -> Summary:
        if not inp.documents:
            return Summary(summary="Nothing has been collected yet.")
        per_doc = max(40, SUMMARY_MAX_CHARS // len(inp.documents) - 3)
        return Summary(summary=clip(" | ".join(clip(d.text, per_doc) for d in inp.documents), SUMMARY_MAX_CHARS))
